#!/usr/bin/python3
"""Summarises jobs/local/floor.sh: LP against the memory floor, run by run.

  jobs/plot/floor.py DIR [--json FILE] [--png FILE]

DIR holds r<N>-lp_mpi.csv and r<N>-lp.csv (`lpsgd bench --csv`, one pair per
run). Per run and (size, op) it prints LP / copy (the fastest `copy` of that
size in the same run), MPI / LP, and for each pair how far `copy` and `lp`
moved between the run with the MPI library's rows and the one without; then
the range of each over all runs (of the moves, the median too), and whether
the bounds held: the ratios in every run, the moves' medians. --png draws LP / copy and MPI / LP per run (dots) over the bounds.
"""
import argparse
import collections
import csv
import glob
import json
import os
import re
import statistics
import sys

# The bounds the floor is judged by (P = 2): LP at most this many times the
# fastest copy; the MPI library at least this many times LP; copy and lp the
# same within this fraction with and without the MPI rows.
LP_OVER_COPY = {"bcast": 1.1, "reduce": 1.65, "allreduce": 1.375}
MPI_OVER_LP = {"bcast": 2.0, "reduce": 1.8, "allreduce": 2.0}
AGREE = 0.10


def load(path):
    rows = collections.defaultdict(dict)  # (bytes, op) -> algo -> row
    with open(path) as f:
        for r in csv.DictReader(f):
            rows[(int(r["bytes"]), r["op"])][r["algo"]] = r
    return rows


def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def summarise(d):
    runs = sorted({int(m.group(1)) for p in glob.glob(os.path.join(d, "r*-*.csv"))
                   if (m := re.match(r"r(\d+)-", os.path.basename(p)))})
    if not runs:
        sys.exit(f"floor.py: error: no r<N>-lp_mpi.csv / r<N>-lp.csv in {d}")
    out = []
    for n in runs:
        with_mpi = load(os.path.join(d, f"r{n}-lp_mpi.csv"))
        without = load(os.path.join(d, f"r{n}-lp.csv"))
        for (size, op), algos in sorted(with_mpi.items()):
            fastest_copy = {id(run): min(float(a["copy"]["time_us"]) for (s, _), a in run.items()
                                         if s == size and "copy" in a)
                            for run in (with_mpi, without)}
            other = without.get((size, op), {})
            t = lambda run, algo: float(run[(size, op)][algo]["time_us"])  # noqa: E731
            e = {"run": n, "bytes": size, "op": op,
                 "lp_us": t(with_mpi, "lp"), "mpi_us": t(with_mpi, "mpi"),
                 "copy_us": float(algos["copy"]["time_us"]),
                 "lp_alone_us": t(without, "lp"), "copy_alone_us": float(other["copy"]["time_us"]),
                 "predicted_us": float(algos["lp"]["predicted_us"] or "nan"),
                 "wrong": sum(int(a[k]["wrong"]) for a in (algos, other) for k in ("lp", "mpi")
                              if k in a)}
            e["lp_over_copy"] = max(e["lp_us"] / fastest_copy[id(with_mpi)],
                                    e["lp_alone_us"] / fastest_copy[id(without)])
            e["mpi_over_lp"] = e["mpi_us"] / e["lp_us"]
            e["copy_moved"] = e["copy_us"] / e["copy_alone_us"] - 1
            e["lp_moved"] = e["lp_us"] / e["lp_alone_us"] - 1
            e["model_over_lp"] = e["predicted_us"] / e["lp_alone_us"]
            out.append(e)
    return out


def report(entries):
    print("| run | size | op | lp ms (alone) | copy ms (alone) | mpi ms | lp/copy | mpi/lp |"
          " copy moved | lp moved | model/lp alone | wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for e in entries:
        print(f"| {e['run']} | {size_name(e['bytes'])} | {e['op']} | {e['lp_us'] / 1e3:.2f} "
              f"({e['lp_alone_us'] / 1e3:.2f}) | {e['copy_us'] / 1e3:.2f} ({e['copy_alone_us'] / 1e3:.2f})"
              f" | {e['mpi_us'] / 1e3:.2f} | {e['lp_over_copy']:.2f} | {e['mpi_over_lp']:.2f} | "
              f"{e['copy_moved']:+.0%} | {e['lp_moved']:+.0%} | {e['model_over_lp']:.2f} | {e['wrong']} |")
    print()
    groups = collections.defaultdict(list)
    for e in entries:
        groups[(e["bytes"], e["op"])].append(e)
    held = True
    print("| size | op | lp/copy | bound | mpi/lp | bound | copy moved | lp moved | model/lp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (size, op), es in sorted(groups.items()):
        rng = lambda k: (min(x[k] for x in es), max(x[k] for x in es))  # noqa: E731
        lc, ml = rng("lp_over_copy"), rng("mpi_over_lp")
        # A pair's two runs are seconds apart and the machine drifts between
        # them (copy and lp move together, either way): the medians over the
        # runs say whether the MPI rows slow their neighbours.
        med = {k: statistics.median(x[k] for x in es)
               for k in ("copy_moved", "lp_moved", "model_over_lp")}
        ok = (lc[1] <= LP_OVER_COPY[op] and ml[0] >= MPI_OVER_LP[op]
              and max(abs(med["copy_moved"]), abs(med["lp_moved"])) <= AGREE
              and all(x["wrong"] == 0 for x in es))
        held &= ok
        moved = lambda k: f"{med[k]:+.0%} ({rng(k)[0]:+.0%}…{rng(k)[1]:+.0%})"  # noqa: E731
        print(f"| {size_name(size)} | {op} | {lc[0]:.2f}–{lc[1]:.2f} | ≤ {LP_OVER_COPY[op]} | "
              f"{ml[0]:.2f}–{ml[1]:.2f} | ≥ {MPI_OVER_LP[op]} | {moved('copy_moved')} | "
              f"{moved('lp_moved')} | {med['model_over_lp']:.2f} ({rng('model_over_lp')[0]:.2f}…"
              f"{rng('model_over_lp')[1]:.2f}) |{'' if ok else ' **not met**'}")
    print(f"\ncopy/lp moved: median over the runs of (time with the MPI rows / time without) - 1"
          f" (range); bound: medians within {AGREE:.0%}. model/lp: the cost model's prediction"
          f" over LP's time in the run without the MPI rows, median (range).")
    print(f"every bound held: {'yes' if held else 'no'}")
    return held


def plot(entries, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted({(e["bytes"], e["op"]) for e in entries})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, field, bound, title in (
            (axes[0], "lp_over_copy", LP_OVER_COPY, "LP time / fastest copy (lower is better)"),
            (axes[1], "mpi_over_lp", MPI_OVER_LP, "MPI library time / LP (higher is better)")):
        for i, (size, op) in enumerate(keys):
            ys = [e[field] for e in entries if (e["bytes"], e["op"]) == (size, op)]
            ax.plot([i] * len(ys), ys, "o", color="C0", alpha=0.7)
            ax.plot([i - 0.3, i + 0.3], [bound[op]] * 2, "-", color="C3")
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([f"{op}\n{size_name(s)}" for s, op in keys], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    axes[0].axhline(1.0, color="grey", lw=0.8, ls="--")
    fig.suptitle("lpsgd bench --floor, P = 2, one dot per run; red: the bound", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--json")
    ap.add_argument("--png")
    a = ap.parse_args()
    entries = summarise(a.dir)
    report(entries)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(entries, f, indent=1)
    if a.png:
        plot(entries, a.png)


if __name__ == "__main__":
    main()
