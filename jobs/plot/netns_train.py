#!/usr/bin/python3
"""Plots and tabulates the rows of jobs/local/netns-train.sh.

  jobs/plot/netns_train.py DIR/results.json [more.json ...] --out DIR
  jobs/plot/netns_train.py DIR/results.json --table

One plot per (topology, queue, model) — and per rate, ranks per node and batch
where the files hold several — DIR/netns_train_<topology>_<queue>_<model>.png:
global samples/s against the number of nodes N, one line per tool/algorithm
(lpsgd's algorithms, ddp, ddp-fp16): the median over repeats, the min–max as
error bars; dashed, the physical bound (the bytes each node must move per step
at the link rate: 2n(N-1)/N on a switch, n on a chain, n = 4 bytes x
parameters; as samples/s = N x ranks per node x batch / that time); dotted,
the same for fp16 gradients (n = 2 bytes x parameters) when ddp-fp16 rows are
there.

--table prints, per group, a Markdown table of medians per (tool/algo, N):
samples/s (min–max), step, compute and exposed communication (step - compute)
in ms, the share of the bound reached, link utilisation (busiest link and the
mean over links, each direction a link) and CPU (the ranks' processes and the
whole machine, in cores, over the measured steps).
"""
import argparse
import collections
import json
import os
import re
import statistics
import sys


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            text = f.read()
        if text.lstrip().startswith("["):
            rows.extend(json.loads(text))
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"netns_train.py: error: {p}:{n}: not a JSON row ({e})")
    if not rows:
        sys.exit("netns_train.py: error: no rows in " + ", ".join(paths))
    return rows


TOOL_ORDER = {"lpsgd": 0, "ddp": 1, "ddp-fp16": 2}
GROUP_KEYS = ("topology", "queue", "model", "rate", "ranks_per_node", "batch")


def series_name(r):
    return f"lpsgd {r['algo']}" if r["tool"] == "lpsgd" else r["tool"]


def groups(rows):
    """(topology, queue, model, rate, R, batch) -> rows, in the files' order."""
    g = collections.OrderedDict()
    for r in rows:
        g.setdefault(tuple(r[k] for k in GROUP_KEYS), []).append(r)
    return g


def series(rows):
    """name -> {N: [rows]}, lpsgd's algorithms first in the order they ran."""
    s = collections.OrderedDict()
    for r in sorted(rows, key=lambda r: TOOL_ORDER.get(r["tool"], 9)):
        s.setdefault(series_name(r), collections.defaultdict(list))[r["nodes"]].append(r)
    return s


def bound(params, topology, nodes, rpn, batch, bps, bytes_per_param=4):
    n = bytes_per_param * params
    per_node = 2 * n * (nodes - 1) / nodes if topology == "switch" else n
    return nodes * rpn * batch * bps / per_node


def rate_bps(rate):
    """A tc rate (500mbit, 1gbit, 100mbps ...) in bytes/s, as netns-cluster.sh reads it."""
    m = re.fullmatch(r"([0-9.]+)([a-z]*)", str(rate).lower())
    units = {"bit": 1 / 8, "kbit": 125, "mbit": 125e3, "gbit": 125e6, "bps": 1, "kbps": 1e3,
             "mbps": 1e6, "gbps": 1e9}
    if not m or m.group(2) not in units:
        sys.exit(f"netns_train.py: error: bad rate '{rate}'")
    return float(m.group(1)) * units[m.group(2)]


def slug(v):
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in str(v))


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = groups(rows)
    varying = [k for i, k in enumerate(GROUP_KEYS[3:], 3) if len({key[i] for key in g}) > 1]
    written = []
    for key, rs in g.items():
        topo, queue, model, rate, rpn, batch = key
        fig, ax = plt.subplots(figsize=(8.5, 4.5))
        for name, by_n in series(rs).items():
            ns = sorted(by_n)
            ys = [statistics.median(r["samples_per_s"] for r in by_n[n]) for n in ns]
            lo = [y - min(r["samples_per_s"] for r in by_n[n]) for n, y in zip(ns, ys)]
            hi = [max(r["samples_per_s"] for r in by_n[n]) - y for n, y in zip(ns, ys)]
            ax.errorbar(ns, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
        ns = sorted({r["nodes"] for r in rs})
        bps, params = rate_bps(rate), rs[0]["params"]
        ax.plot(ns, [bound(params, topo, n, rpn, batch, bps) for n in ns], "k--", marker="_", ms=16,
                label="bound (fp32 gradients)")
        if any(r["tool"] == "ddp-fp16" for r in rs):
            ax.plot(ns, [bound(params, topo, n, rpn, batch, bps, 2) for n in ns], "k:", marker="_", ms=16,
                    label="bound (fp16 gradients)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("nodes N")
        ax.set_ylabel("samples/s (global; median, min-max)")
        ax.set_title(f"{model} ({params / 1e6:.2f} M params), {topo}, {rate} links, queue {queue},\n"
                     f"batch {batch} per rank, {rpn} rank(s) per node", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        name = f"netns_train_{slug(topo)}_{slug(queue)}_{slug(model)}"
        for k in varying:
            name += f"_{slug(k)}{slug(key[GROUP_KEYS.index(k)])}"
        path = os.path.join(out, name + ".png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for p in written:
        print(f"netns_train.py: wrote {p}", file=sys.stderr)


def table(rows):
    for key, rs in groups(rows).items():
        topo, queue, model, rate, rpn, batch = key
        params = rs[0]["params"]
        print(f"\n### {topo}, {rate} links, queue {queue}: {model} ({params / 1e6:.2f} M params), "
              f"batch {batch} per rank, {rpn} rank(s) per node\n")
        print("| tool/algo | N | samples/s (min–max) | step ms | compute ms | exposed comm ms "
              "| of bound | links max / mean | CPU ranks / machine (cores) | runs |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, by_n in series(rs).items():
            for n in sorted(by_n):
                b = by_n[n]
                sps = [r["samples_per_s"] for r in b]
                m = lambda k: med([r.get(k) for r in b])
                ms = lambda k: "?" if m(k) is None else f"{1e3 * m(k):.0f}"
                pct = lambda k: "?" if m(k) is None else f"{100 * m(k):.0f}%"
                cores = lambda k: "?" if m(k) is None else f"{m(k):.2f}"
                print(f"| {name} | {n} | {statistics.median(sps):.1f} ({min(sps):.1f}–{max(sps):.1f}) "
                      f"| {ms('step_s')} | {ms('compute_s')} | {ms('exposed_comm_s')} "
                      f"| {statistics.median(sps) / m('bound_samples_per_s'):.0%} "
                      f"| {pct('link_util_max')} / {pct('link_util_mean')} "
                      f"| {cores('cpu_ranks')} / {cores('cpu_busy')} | {len(b)} |")
        ns = sorted({r["nodes"] for r in rs})
        bps = rate_bps(rate)
        line = ", ".join(f"N = {n}: {bound(params, topo, n, rpn, batch, bps):.1f}" for n in ns)
        print(f"\nBound (fp32 gradients at the link rate), samples/s: {line}.", end="")
        if any(r["tool"] == "ddp-fp16" for r in rs):
            print(" With fp16 gradients twice that (ddp-fp16's 'of bound' is against it).", end="")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("results", nargs="+", help="results.json of jobs/local/netns-train.sh")
    ap.add_argument("--out", help="write the PNGs into this directory")
    ap.add_argument("--table", action="store_true", help="print the Markdown tables")
    args = ap.parse_args()
    if not args.out and not args.table:
        ap.error("nothing to do: give --out DIR and/or --table")
    rows = load(args.results)
    missing = [k for k in GROUP_KEYS + ("tool", "algo", "nodes", "samples_per_s", "params")
               if any(k not in r for r in rows)]
    if missing:
        sys.exit(f"netns_train.py: error: rows without {', '.join(missing)}: not netns-train.sh's")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        plot(rows, args.out)
    if args.table:
        table(rows)


if __name__ == "__main__":
    main()
