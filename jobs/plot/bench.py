#!/usr/bin/python3
"""Plots `lpsgd bench --json` rows.

  jobs/plot/bench.py results.json [more.json ...] --out DIR
  jobs/plot/bench.py results.json --table      # Markdown: time (ms) vs P, largest size
  jobs/plot/bench.py results.json --netns [--table]   # rows of jobs/local/netns-sweep.sh

Writes, per collective, DIR/<op>_busbw_vs_size.png (bus bandwidth against
message size, one line per algorithm; the largest P in the files) and, when the
files hold several P, DIR/<op>_time_vs_ranks.png (time against P at the
largest size, log-scaled P), with the cost model's prediction dashed.

With --netns the rows carry topology, nodes and rate (jobs/local/netns-sweep.sh):
one PNG per topology, DIR/netns_<topology>.png, time against the number of
nodes per algorithm and collective (the model dashed); --table prints a table
per topology and the ratios the sweep is judged by.
"""
import argparse
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"bench.py: error: {p}:{n}: not a JSON row ({e})")
    if not rows:
        sys.exit("bench.py: error: no rows in " + ", ".join(paths))
    return rows


def human(nbytes):
    for unit in ("", "K", "M", "G"):
        if nbytes < 1024 or unit == "G":
            return f"{nbytes:g}{unit}"
        nbytes /= 1024


def plot_size(rows, op, out):
    P = max(r["ranks"] for r in rows)
    series = collections.defaultdict(list)
    for r in rows:
        if r["ranks"] == P:
            series[r["algo"]].append((r["bytes"], r["busbw_gbs"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algo, pts in sorted(series.items()):
        pts.sort()
        if algo == "copy":  # bench --floor: each rank copies in -> out
            ax.plot([b for b, _ in pts], [bw for _, bw in pts], "k--", label="memory floor (copy)")
        else:
            ax.plot([b for b, _ in pts], [bw for _, bw in pts], marker="o", label=algo)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{op}, P = {P}")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human(v)))
    ax.grid(True, alpha=0.3)
    ax.legend()
    path = os.path.join(out, f"{op}_busbw_vs_size.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_ranks(rows, op, out):
    size = max(r["bytes"] for r in rows)
    series = collections.defaultdict(list)
    for r in rows:
        if r["bytes"] == size:
            series[r["algo"]].append((r["ranks"], r["time_us"] / 1e3, r.get("predicted_us")))
    if max(len(v) for v in series.values()) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algo, pts in sorted(series.items()):
        pts.sort()
        line, = ax.plot([p for p, _, _ in pts], [t for _, t, _ in pts], marker="o", label=algo)
        pred = [(p, q / 1e3) for p, _, q in pts if q is not None]
        if pred:
            ax.plot([p for p, _ in pred], [q for _, q in pred], linestyle="--",
                    color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks P")
    ax.set_ylabel("time (ms)")
    ax.set_title(f"{op}, {human(size)}B (dashed: cost model)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    path = os.path.join(out, f"{op}_time_vs_ranks.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def table(rows):
    """Markdown table of time (ms) against P at the largest size: one column
    per (collective, algorithm), the model's prediction in parentheses."""
    size = max(r["bytes"] for r in rows)
    order = {k: i for i, k in enumerate(("bcast", "reduce", "allreduce", "lp", "mst", "be", "ring", "mpi"))}
    cols = sorted({(r["op"], r["algo"]) for r in rows if r["bytes"] == size},
                  key=lambda c: (order.get(c[0], 9), order.get(c[1], 9), c[1]))
    cell = {(r["ranks"], r["op"], r["algo"]): r for r in rows if r["bytes"] == size}
    ranks = sorted({p for p, _, _ in cell})
    out = [f"time (ms) for {human(size)}B; cost model in parentheses",
           "", "| P | " + " | ".join(f"{op} {algo}" for op, algo in cols) + " |",
           "|---" * (len(cols) + 1) + "|"]
    for p in ranks:
        vals = []
        for op, algo in cols:
            r = cell.get((p, op, algo))
            if r is None:
                vals.append("")
                continue
            pred = r.get("predicted_us")
            vals.append(f"{r['time_us'] / 1e3:.1f}" + (f" ({pred / 1e3:.1f})" if pred is not None else ""))
        out.append(f"| {p} | " + " | ".join(vals) + " |")
    return "\n".join(out)


def netns_rows(rows):
    """{topology: (main rate, rows at that rate, rows at other rates)}, of the
    largest message (the sweep's smaller ones are for auto: jobs/plot/grid.py)"""
    out = {}
    largest = max(r["bytes"] for r in rows)
    for topo in sorted({r["topology"] for r in rows}):
        mine = [r for r in rows if r["topology"] == topo and r["bytes"] == largest]
        rates = collections.Counter(r["rate"] for r in mine)
        main_rate = rates.most_common(1)[0][0]
        out[topo] = (main_rate, [r for r in mine if r["rate"] == main_rate],
                     [r for r in mine if r["rate"] != main_rate])
    return out


def plot_netns(rows, out):
    paths = []
    for topo, (rate, main, _) in netns_rows(rows).items():
        ops = [op for op in ("bcast", "reduce", "allreduce") if any(r["op"] == op for r in main)]
        fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.5), squeeze=False)
        for ax, op in zip(axes[0], ops):
            series = collections.defaultdict(list)
            for r in main:
                if r["op"] == op:
                    series[r["algo"]].append((r["nodes"], r["time_us"] / 1e3, r.get("predicted_us")))
            for algo, pts in sorted(series.items()):
                pts.sort()
                line, = ax.plot([n for n, _, _ in pts], [t for _, t, _ in pts], marker="o", label=algo)
                pred = [(n, q / 1e3) for n, _, q in pts if q is not None]
                if pred:
                    ax.plot([n for n, _ in pred], [q for _, q in pred], linestyle="--",
                            color=line.get_color(), alpha=0.6)
            size = max(r["bytes"] for r in main)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["nodes"] for r in main}))
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("nodes N (one rank each)")
            ax.set_ylabel("time (ms)")
            ax.set_title(f"{op}, {human(size)}B, {topo} of {rate} links (dashed: model)")
            ax.grid(True, alpha=0.3)
            ax.legend()
        path = os.path.join(out, f"netns_{topo}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def netns_table(rows):
    lines = []
    for topo, (rate, main, other) in netns_rows(rows).items():
        lines.append(f"### {topo}, {rate} per link and direction\n")
        lines.append(table([dict(r, ranks=r["nodes"]) for r in main]).replace("| P |", "| N |"))
        t = {(r["nodes"], r["op"], r["algo"]): r["time_us"] for r in main}
        pred = {(r["nodes"], r["op"], r["algo"]): r.get("predicted_us") for r in main}
        ns = sorted({r["nodes"] for r in main})
        lo, hi = ns[0], ns[-1]
        checks = []

        def ratio(label, a, b):
            if a in t and b in t:
                checks.append(f"- {label}: {t[a] / t[b]:.2f}")
        ratio(f"LP bcast, N = {hi} / N = {lo}", (hi, "bcast", "lp"), (lo, "bcast", "lp"))
        ratio(f"LP allreduce, N = {hi} / N = {lo}", (hi, "allreduce", "lp"), (lo, "allreduce", "lp"))
        ratio(f"MST bcast / LP bcast at N = {hi}", (hi, "bcast", "mst"), (hi, "bcast", "lp"))
        best = min((b for b in ("be", "ring") if (hi, "allreduce", b) in t),
                   key=lambda b: t[(hi, "allreduce", b)], default=None)
        if best:
            ratio(f"LP allreduce / best of BE and ring ({best}) at N = {hi}",
                  (hi, "allreduce", "lp"), (hi, "allreduce", best))
        ratio(f"BE allreduce / LP allreduce at N = {hi}", (hi, "allreduce", "be"), (hi, "allreduce", "lp"))
        ratio(f"ring allreduce / LP allreduce at N = {hi}", (hi, "allreduce", "ring"), (hi, "allreduce", "lp"))
        errs = [abs(pred[k] / t[k] - 1) for k in t if k[2] == "lp" and pred.get(k)]
        if errs:
            checks.append(f"- LP model error: at most {100 * max(errs):.0f}% ({len(errs)} rows)")
        for r in other:
            k = (r["nodes"], r["op"], r["algo"])
            if k in t:
                checks.append(f"- {r['algo'].upper()} {r['op']} at N = {r['nodes']}: {r['rate']} takes "
                              f"{r['time_us'] / t[k]:.2f}x the time of {rate}")
        lines.append("\n" + "\n".join(checks) + "\n")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="files written by lpsgd bench --json")
    ap.add_argument("--out", default=".", help="directory for the PNGs")
    ap.add_argument("--table", action="store_true", help="print a Markdown table instead of plotting")
    ap.add_argument("--netns", action="store_true", help="rows of jobs/local/netns-sweep.sh: per topology")
    args = ap.parse_args()
    rows = load(args.json)
    if args.netns:
        if any("topology" not in r for r in rows):
            sys.exit("bench.py: error: --netns needs rows with topology, nodes and rate (netns-sweep.sh)")
        if args.table:
            print(netns_table(rows))
        else:
            os.makedirs(args.out, exist_ok=True)
            print("\n".join(plot_netns(rows, args.out)))
        return
    if args.table:
        print(table(rows))
        return
    os.makedirs(args.out, exist_ok=True)
    by_op = collections.defaultdict(list)
    for r in rows:
        by_op[r["op"]].append(r)
    for op, op_rows in sorted(by_op.items()):
        for path in (plot_size(op_rows, op, args.out), plot_ranks(op_rows, op, args.out)):
            if path:
                print(path)


if __name__ == "__main__":
    main()
