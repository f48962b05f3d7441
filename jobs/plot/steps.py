#!/usr/bin/python3
"""Where a BSP step's time goes, from `lpsgd train --step-trace PREFIX`.

  jobs/plot/steps.py PREFIX [--skip N] [--window W] [--out FILE.png]

Reads PREFIX.rank<R>.tsv of every rank and prints, per rank, the median data,
compute (forward and backward), apply (exchange and update) and wait times.
With several ranks it also splits the waiting into its two causes, step by
step:
  skew      how much later the last rank reached the exchange than the first
            (its compute took longer): BSP makes the others wait for it;
  exchange  what the last rank to arrive still waited: the collectives'
            own time once everyone is there (with --overlap on, the part
            that backward did not hide).
The ranks' clocks are compared directly, which holds for ranks on one node.
--out draws compute per rank, skew and exchange against the step (rolling
medians over W steps), where phases of a slow exchange or a slow rank show.
"""
import argparse
import glob
import re
import statistics
import sys


def load(path):
    rows = {}
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:6] != ["step", "start_s", "data_ms", "compute_ms", "apply_ms", "wait_ms"]:
            sys.exit(f"steps.py: error: {path} is not an lpsgd step trace (header {header[:3]}...)")
        for n, line in enumerate(f, 2):
            cols = line.rstrip("\n").split("\t")
            try:
                step = int(cols[0])
                start, data, compute, apply_, wait = map(float, cols[1:6])
                # deferred_ms (newer traces): the forward's work on the last
                # step's tail, counted in apply.
                deferred = float(cols[7]) if len(cols) > 7 else 0.0
            except (ValueError, IndexError):
                sys.exit(f"steps.py: error: {path}:{n}: malformed line")
            rows[step] = dict(start=start, data=data, compute=compute, apply=apply_, wait=wait,
                              deferred=deferred)
    return rows


def rolling_median(xs, w):
    h = w // 2
    return [statistics.median(xs[max(0, i - h):i + h + 1]) for i in range(len(xs))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", help="the --step-trace PREFIX of the run")
    ap.add_argument("--skip", type=int, default=20, help="warm-up steps left out (default 20)")
    ap.add_argument("--window", type=int, default=25, help="rolling median width in steps for the plot")
    ap.add_argument("--out", help="write a PNG here")
    args = ap.parse_args()

    files = {}
    for path in glob.glob(glob.escape(args.prefix) + ".rank*.tsv"):
        m = re.search(r"\.rank(\d+)\.tsv$", path)
        if m:
            files[int(m.group(1))] = path
    if not files:
        sys.exit(f"steps.py: error: no {args.prefix}.rank<R>.tsv files")
    ranks = sorted(files)
    traces = {r: load(files[r]) for r in ranks}
    steps = sorted(set.intersection(*(set(t) for t in traces.values())))
    steps = [s for s in steps if s > args.skip]
    if not steps:
        sys.exit(f"steps.py: error: no step after the first {args.skip} is in every rank's trace")

    med = lambda xs: statistics.median(xs)
    print(f"{len(ranks)} rank(s), {len(steps)} steps (after {args.skip} warm-up steps); medians in ms")
    print(f"{'rank':>4} {'data':>7} {'compute':>8} {'apply':>7} {'wait':>7} {'step':>7}")
    for r in ranks:
        t = traces[r]
        col = lambda k: [t[s][k] for s in steps]
        step_ms = [t[s]["data"] + t[s]["compute"] + t[s]["apply"] for s in steps]
        print(f"{r:>4} {med(col('data')):7.3f} {med(col('compute')):8.3f} {med(col('apply')):7.3f} "
              f"{med(col('wait')):7.3f} {med(step_ms):7.3f}")

    skew, exchange = [], []
    if len(ranks) > 1:
        for s in steps:
            # A rank reaches its exchange when its backward ends.
            arrive = [traces[r][s]["start"] * 1e3 + traces[r][s]["compute"] + traces[r][s]["deferred"]
                      for r in ranks]
            skew.append(max(arrive) - min(arrive))
            exchange.append(min(traces[r][s]["wait"] for r in ranks))
        mean_wait = statistics.mean(traces[r][s]["wait"] for r in ranks for s in steps)
        mean_step = statistics.mean(traces[r][s]["data"] + traces[r][s]["compute"] + traces[r][s]["apply"]
                                    for r in ranks for s in steps)
        print(f"skew (last arrival - first): median {med(skew):.3f}, mean {statistics.mean(skew):.3f}")
        print(f"exchange (last arrival's wait): median {med(exchange):.3f}, mean {statistics.mean(exchange):.3f}")
        print(f"wait: mean {mean_wait:.3f} of a {mean_step:.3f} step ({100 * mean_wait / mean_step:.1f}%)")

    if args.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        panels = 2 if skew else 1
        fig, axes = plt.subplots(panels, 1, figsize=(9, 3.2 * panels), sharex=True, squeeze=False)
        ax = axes[0][0]
        for r in ranks:
            ax.plot(steps, rolling_median([traces[r][s]["compute"] for s in steps], args.window),
                    label=f"rank {r}", lw=1)
        ax.set_ylabel("compute per step (ms)")
        ax.set_title(f"{args.prefix}: rolling medians over {args.window} steps")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        if skew:
            ax = axes[1][0]
            ax.plot(steps, rolling_median(exchange, args.window), label="exchange (after the last arrival)", lw=1)
            ax.plot(steps, rolling_median(skew, args.window), label="skew (arrival spread)", lw=1)
            ax.set_ylabel("ms per step")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        axes[-1][0].set_xlabel("step")
        fig.tight_layout()
        fig.savefig(args.out, dpi=110)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
