#!/usr/bin/python3
"""Plots an `lpsgd train --metrics` file (JSON lines).

  jobs/plot/metrics.py metrics.jsonl [more.jsonl ...] --out FILE.png

One PNG with three panels: train and test loss against epoch, test accuracy
against epoch, and where the training time went (compute, waiting for
communication, waiting for data) per interval between records, with the
communication that ran hidden behind compute drawn as a line. Several files
(e.g. runs with different P or algorithms) are drawn side by side in the
first two panels and labelled by file name; the time split is drawn for the
first file. A resumed run's records (times restart at 0) are split at the
restart, so the intervals stay right.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"metrics.py: error: {path}:{n}: not a JSON record ({e})")
    if not rows:
        sys.exit(f"metrics.py: error: {path} holds no records")
    return rows


def intervals(rows):
    """Per record, the time spent since the previous one (restarts reset)."""
    keys = ("train_s", "compute_s", "comm_s", "comm_wait_s", "data_s")
    out, prev = [], None
    for r in rows:
        if prev is None or r["train_s"] < prev["train_s"]:  # first, or a resumed run
            prev = dict.fromkeys(keys, 0.0)
        out.append({k: r[k] - prev[k] for k in keys})
        prev = {k: r[k] for k in keys}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True, help="PNG to write")
    a = ap.parse_args()
    runs = [(os.path.basename(p), load(p)) for p in a.files]

    fig, (ax_loss, ax_acc, ax_time) = plt.subplots(1, 3, figsize=(16, 4.6))
    for name, rows in runs:
        ep = [r["epoch"] for r in rows]
        line = ax_loss.plot(ep, [r["test_loss"] for r in rows], marker="o", ms=3, label=f"{name} test")[0]
        ax_loss.plot(ep, [r["train_loss"] for r in rows], ls="--", color=line.get_color(), label=f"{name} train")
        ax_acc.plot(ep, [r["test_acc"] for r in rows], marker="o", ms=3, label=name)
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="test accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)

    name, rows = runs[0]
    iv = intervals(rows)
    x = list(range(len(rows)))
    compute = [d["compute_s"] for d in iv]
    wait = [d["comm_wait_s"] for d in iv]
    data = [d["data_s"] for d in iv]
    ax_time.bar(x, compute, label="compute", color="tab:blue")
    ax_time.bar(x, wait, bottom=compute, label="waiting for communication", color="tab:red")
    ax_time.bar(x, data, bottom=[c + w for c, w in zip(compute, wait)], label="waiting for data",
                color="tab:gray")
    ax_time.plot(x, [d["comm_s"] for d in iv], "k.-", label="communication in flight")
    ax_time.set_xticks(x, [f"{r['epoch']:.3g}" for r in rows], rotation=45, fontsize=7)
    ranks, batch = rows[-1].get("ranks", "?"), rows[-1].get("batch", "?")
    ax_time.set(xlabel="epoch at record", ylabel="seconds per interval",
                title=f"training time, {name} (P={ranks}, batch {batch}/rank)")
    ax_time.legend(fontsize=7)
    share = sum(wait) / max(sum(d["train_s"] for d in iv), 1e-12)
    fig.suptitle(f"final test accuracy {rows[-1]['test_acc']:.4f}, "
                 f"{rows[-1]['samples_per_s']:.0f} samples/s, communication wait {100 * share:.1f}% of training time")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"metrics.py: wrote {a.out}")


if __name__ == "__main__":
    main()
