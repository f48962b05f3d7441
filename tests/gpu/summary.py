#!/usr/bin/env python3
"""The table of a device check: what tests/gpu/device-check.sh measured, as
Markdown, printed and written to DIR/summary.md.

    tests/gpu/summary.py DIR

Reads what device-check.sh leaves in DIR; every piece is optional and a
missing one reads "n/a" (or the step's status: "no GPU", "FAILED"):
  steps.tsv           one line per step: name, status (ok, FAILED, no GPU,
                      skipped), detail
  memory.txt          bench_gpu_memory's output (its copy_gbs=... line)
  bench-<tag>.json    lpsgd bench --json rows, tag p<P>-<links> (links: ipc
                      for the node's CUDA IPC peer links, mpi for staged MPI
                      links); with --floor the rows of algo "copy" are every
                      rank copying its input at the same time, the ceiling
  train-<name>.jsonl  lpsgd train --metrics (name: gpu-mlp-p1, cpu-mlp-p8,
                      gpu-cnn-bf16-p1, ...)
Only JSON is read, never the printed tables, so a column added to lpsgd
bench's table cannot shift what is read here.
"""
import json
import os
import re
import sys

MIB = 1 << 20


def load_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def steps(d):
    """step name -> (status, detail)"""
    out = {}
    p = os.path.join(d, "steps.tsv")
    if os.path.exists(p):
        for line in open(p):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                out[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return out


def status_or(st, step, value):
    """value when the step ran, else why it has none"""
    if value is not None:
        return value
    s = st.get(step, ("n/a", ""))[0]
    return "n/a" if s == "ok" else s


def bench_rows(d):
    """{(tag, bytes, algo): row} of every bench-<tag>.json in d"""
    out = {}
    for name in sorted(os.listdir(d)):
        m = re.fullmatch(r"bench-(p\d+-\w+)\.json", name)
        if not m:
            continue
        for r in load_jsonl(os.path.join(d, name)):
            out[(m.group(1), r["bytes"], r["algo"])] = r
    return out


def final_metrics(d, name):
    p = os.path.join(d, f"train-{name}.jsonl")
    if not os.path.exists(p):
        return None
    rows = load_jsonl(p)
    return rows[-1] if rows else None


def human(n):
    """bytes as 512K, 4M, 1.5M"""
    for unit, size in (("M", MIB), ("K", 1024)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return str(n)


def fmt(v, digits=1):
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}"
    return str(v)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    st = steps(d)
    lines = ["| measure | value | note |", "|---|---|---|"]

    copy_gbs = add_gbs = None
    mem = os.path.join(d, "memory.txt")
    if os.path.exists(mem):
        m = re.search(r"copy_gbs=([\d.]+) reduce_add_gbs=([\d.]+)", open(mem).read())
        if m:
            copy_gbs, add_gbs = float(m.group(1)), float(m.group(2))
    lines.append(f"| device-to-device copy, 256 MiB, GB/s (read + write) | "
                 f"{fmt(status_or(st, 'memory', copy_gbs))} | the ceiling |")
    note = f"{100 * add_gbs / copy_gbs:.0f}% of copy" if copy_gbs and add_gbs else ""
    lines.append(f"| reduce_add, 256 MiB, GB/s (2 reads + write) | "
                 f"{fmt(status_or(st, 'memory', add_gbs))} | {note} |")

    rows = bench_rows(d)
    for tag, what in (("p2-ipc", "2 ranks, CUDA IPC"), ("p4-ipc", "4 ranks, CUDA IPC"),
                      ("p2-mpi", "2 ranks, staged MPI links"), ("p4-mpi", "4 ranks, staged MPI links")):
        for size in (64 * MIB, 256 * MIB):
            lp, cp = rows.get((tag, size, "lp")), rows.get((tag, size, "copy"))
            value = status_or(st, f"bench-{tag}", lp["busbw_gbs"] if lp else None)
            note = []
            if lp:
                note.append(f"{lp['time_us'] / 1e3:.2f} ms, block {human(lp['block'])}, #wrong {lp['wrong']}")
            if lp and cp:
                note.append(f"copy in the same run {cp['busbw_gbs']:.1f} GB/s: LP at "
                            f"{100 * lp['busbw_gbs'] / cp['busbw_gbs']:.0f}%")
            lines.append(f"| LP allreduce busbw, {what}, {size // MIB} MiB, GB/s | {fmt(value)} | "
                         f"{'; '.join(note)} |")

    for device in ("gpu", "gpu-bf16", "cpu"):
        for model in ("mlp", "cnn"):
            for p in (1, 2, 4, 8):
                name = (f"gpu-{model}-bf16-p{p}" if device == "gpu-bf16"
                        else f"{device}-{model}-p{p}")
                step = f"train-{name}"
                if step not in st and final_metrics(d, name) is None:
                    continue
                m = final_metrics(d, name)
                sps = m["samples_per_s"] if m else None
                note = ""
                if m and m.get("train_s"):
                    note = (f"comm wait {100 * m['comm_wait_s'] / m['train_s']:.1f}% of the step, "
                            f"collectives in flight {100 * m['comm_s'] / m['train_s']:.1f}%")
                where = "GPU in bf16" if device == "gpu-bf16" else f"{device.upper()}"
                label = f"{'MLP 784-512-256-10' if model == 'mlp' else 'cnn:lenet'} on the {where}, P={p}"
                lines.append(f"| {label}, samples/s | {fmt(status_or(st, step, sps), 0)} | {note} |")

    for step, (status, detail) in st.items():
        if step.startswith("compare-"):
            lines.append(f"| {step[len('compare-'):]} | {status} | {detail} |")

    failed = [s for s, (status, _) in st.items() if status == "FAILED"]
    no_gpu = [s for s, (status, _) in st.items() if status == "no GPU"]
    text = "\n".join(lines) + "\n"
    if failed:
        text += f"\nFAILED: {', '.join(failed)}\n"
    if no_gpu:
        text += f"\nno GPU: {', '.join(no_gpu)} did not run\n"
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
