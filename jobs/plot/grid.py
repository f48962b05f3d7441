#!/usr/bin/env python3
"""Draws the (P, n) grid of a SimGrid sweep (jobs/smpi/sweep.sh).

  jobs/plot/grid.py RESULTS.json|DIR [...] --out DIR [--title NAME]

Each argument is a JSON-lines file of `lpsgd bench --json` rows, or a sweep
directory, whose DIR/rows/*.json are read (DIR/results.json if it has no rows/).
Later rows replace earlier ones of the same (op, algo, ranks, bytes).

Writes, per collective, OUT/grid_<op>.png: two heat maps over P (x) and message
size n (y). Left, "best algorithm": the fastest non-auto algorithm of each cell,
a fixed colour per algorithm, annotated with its time. Right, "auto / best":
auto's time over the best time (colour clipped to 1.0..1.5), annotated with the
ratio and auto's choice; "n/a" where no auto row was run.
Prints, per collective, a Markdown table (rows n, columns P, cells
"best (auto's choice, ratio)"), the worst auto/best ratio, and the cost model's
worst error on the tree rows, max |predicted_us / time_us - 1|.
With --max-ratio R it exits 1 where auto's time is above R times the best in
any cell, naming them (tests/e2e/smpi_auto.sh holds auto to 1.10).
"""
import argparse
import glob
import json
import os
import re
import sys

try:
    import matplotlib
except ImportError:  # the python3 first on PATH may lack it; the system one has it
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {"lp": "#fdb462", "tree": "#80b1d3", "be": "#b3de69", "ring": "#fb8072", "mst": "#bebada"}
SPARE = ["#fccde5", "#ffffb3", "#8dd3c7", "#d9d9d9", "#bc80bd"]
RATIO_MAX = 1.5


def die(msg):
    print(f"grid.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def files_of(arg):
    if not os.path.isdir(arg):
        return [arg]
    rows = sorted(glob.glob(os.path.join(arg, "rows", "*.json")),  # natural order, like sort -V
                  key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)])
    return rows or [os.path.join(arg, "results.json")]


def load(args):
    cells = {}  # (op, algo, ranks, bytes) -> row; the last one wins
    for path in [f for a in args for f in files_of(a)]:
        try:
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        r = json.loads(line)
                        cells[r["op"], r["algo"], r["ranks"], r["bytes"]] = r
        except OSError as e:
            die(f"cannot read {path}: {e.strerror}")
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            die(f"{path}:{n}: not a bench row ({e})")
    if not cells:
        die("no rows in " + ", ".join(args))
    return cells


def size(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}"
        nbytes /= 1024


def ms(us):
    """us as ms to 3 significant digits, trailing zeros kept: 23.0, 106, 0.0585."""
    x = float(f"{us / 1e3:.3g}")
    return f"{x:.{max(0, 2 - int(np.floor(np.log10(x))))}f}" if x > 0 else f"{x:g}"


def grid(cells, op):
    """Per (n, P): (best algo, best time, auto choice or None, auto time or None)."""
    Ps = sorted({k[2] for k in cells if k[0] == op})
    ns = sorted({k[3] for k in cells if k[0] == op})
    g = {}
    for (o, algo, P, n), r in cells.items():
        if o != op:
            continue
        best, t, choice, ta = g.get((n, P), (None, None, None, None))
        if algo.startswith("auto"):
            choice, ta = algo.partition(":")[2] or "?", r["time_us"]
        elif t is None or r["time_us"] < t:
            best, t = algo, r["time_us"]
        g[n, P] = (best, t, choice, ta)
    return Ps, ns, g


def draw(op, Ps, ns, g, out, title):
    algos = sorted({v[0] for v in g.values() if v[0]}, key=lambda a: (list(COLOURS) + [a]).index(a))
    colours = [COLOURS.get(a) or SPARE[i % len(SPARE)] for i, a in enumerate(algos)]
    best = np.full((len(ns), len(Ps)), np.nan)
    ratio = np.full((len(ns), len(Ps)), np.nan)
    w = 1.2 * len(Ps) + 2.2
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(2 * w, 0.75 * len(ns) + 2.2))
    for i, n in enumerate(ns):
        for j, P in enumerate(Ps):
            b, t, choice, ta = g.get((n, P), (None,) * 4)
            if b:
                best[i, j] = algos.index(b)
                ax1.text(j, i, f"{b}\n{ms(t)} ms", ha="center", va="center", fontsize=8)
            if b and ta is not None:
                ratio[i, j] = ta / t
                dark = ta / t > 1.35
                ax2.text(j, i, f"{ta / t:.2f}\n{choice}", ha="center", va="center", fontsize=8,
                         color="white" if dark else "black")
            else:
                ax2.text(j, i, "n/a", ha="center", va="center", fontsize=8, color="#555555")
    cmap = ListedColormap(colours or ["white"])
    cmap.set_bad("#e0e0e0")
    ax1.imshow(np.ma.masked_invalid(best), cmap=cmap, vmin=-0.5, vmax=max(len(algos), 1) - 0.5,
               origin="lower", aspect="auto")
    rmap = plt.get_cmap("YlOrRd").copy()
    rmap.set_bad("#e0e0e0")
    im = ax2.imshow(np.ma.masked_invalid(np.clip(ratio, 1.0, RATIO_MAX)), cmap=rmap, vmin=1.0,
                    vmax=RATIO_MAX, origin="lower", aspect="auto")
    fig.colorbar(im, ax=ax2, label=f"auto / best (clipped at {RATIO_MAX})")
    ax1.legend(handles=[Patch(color=c, label=a) for a, c in zip(algos, colours)],
               loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    for ax, name in ((ax1, "best algorithm (time)"), (ax2, "auto / best (auto's choice)")):
        ax.set_xticks(range(len(Ps)), [str(P) for P in Ps])
        ax.set_yticks(range(len(ns)), [size(n) for n in ns])
        ax.set_xlabel("P (ranks)")
        ax.set_ylabel("n (message size)")
        ax.set_title(name, fontsize=10)
        ax.set_xticks(np.arange(len(Ps) + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(len(ns) + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="minor", length=0)
    fig.suptitle(f"{op}" + (f" — {title}" if title else ""))
    fig.tight_layout()
    path = os.path.join(out, f"grid_{op}.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def above(op, g, limit):
    """The cells where auto took more than limit times the best algorithm."""
    return [f"{op} P={P} n={size(n)}: auto ({choice}) {ms(ta)} ms, {ta / t:.3f}x {b}'s {ms(t)} ms"
            for (n, P), (b, t, choice, ta) in sorted(g.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            if b and ta is not None and ta > limit * t]


def report(op, Ps, ns, g, cells):
    print(f"\n### {op}\n")
    print("| n \\ P | " + " | ".join(str(P) for P in Ps) + " |")
    print("|---|" + "---|" * len(Ps))
    worst = None
    for n in ns:
        row = []
        for P in Ps:
            b, t, choice, ta = g.get((n, P), (None,) * 4)
            if not b:
                row.append("–")
            elif ta is None:
                row.append(f"{b} (n/a)")
            else:
                row.append(f"{b} ({choice}, {ta / t:.2f})")
                if worst is None or ta / t > worst[0]:
                    worst = (ta / t, n, P, b, choice)
        print(f"| {size(n)} | " + " | ".join(row) + " |")
    print()
    if worst:
        r, n, P, b, choice = worst
        print(f"{op}: worst auto/best {r:.3f} at P={P}, n={size(n)} (auto chose {choice}, best {b})")
    else:
        print(f"{op}: no auto rows")
    errs = [(abs(r["predicted_us"] / r["time_us"] - 1), P, n, r) for (o, a, P, n), r in cells.items()
            if o == op and a == "tree" and r.get("predicted_us") and r.get("time_us")]
    if errs:
        e, P, n, r = max(errs, key=lambda x: x[0])
        print(f"{op}: tree model error max |predicted/time - 1| = {e:.1%} at P={P}, n={size(n)}"
              f" (model {r['predicted_us']:.1f} us, measured {r['time_us']:.1f} us; {len(errs)} cells)")
    else:
        print(f"{op}: tree model error: no tree rows with a prediction")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", metavar="RESULTS.json|DIR")
    ap.add_argument("--out", required=True, help="directory for grid_<op>.png")
    ap.add_argument("--title", default="", help="e.g. the platform name")
    ap.add_argument("--max-ratio", type=float, metavar="R",
                    help="exit 1 where auto took more than R times the best algorithm")
    a = ap.parse_args()
    cells = load(a.inputs)
    os.makedirs(a.out, exist_ok=True)
    bad = []
    for op in sorted({k[0] for k in cells}):
        Ps, ns, g = grid(cells, op)
        path = draw(op, Ps, ns, g, a.out, a.title)
        report(op, Ps, ns, g, cells)
        print(f"wrote {path}")
        if a.max_ratio:
            bad += above(op, g, a.max_ratio)
    if bad:
        print(f"auto above {a.max_ratio} times the best algorithm in {len(bad)} cell(s):")
        print("\n".join("  " + b for b in bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
