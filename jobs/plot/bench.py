#!/usr/bin/python3
"""Plots `lpsgd bench --json` rows.

  jobs/plot/bench.py results.json [more.json ...] --out DIR
  jobs/plot/bench.py results.json --table      # Markdown: time (ms) vs P, largest size

Writes, per collective, DIR/<op>_busbw_vs_size.png (bus bandwidth against
message size, one line per algorithm; the largest P in the files) and, when the
files hold several P, DIR/<op>_time_vs_ranks.png (time against P at the
largest size, log-scaled P), with the cost model's prediction dashed.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="files written by lpsgd bench --json")
    ap.add_argument("--out", default=".", help="directory for the PNGs")
    ap.add_argument("--table", action="store_true", help="print a Markdown table instead of plotting")
    args = ap.parse_args()
    rows = load(args.json)
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
