#!/usr/bin/env python3
"""Compares lpsgd metrics files (JSON lines) of runs that must agree.

    metrics_compare.py [--rtol R] [--exact] REFERENCE OTHER...

Every file must have the same steps; train_loss and test_loss must agree
with REFERENCE within rtol (relative), or, with --exact, the final parameter
checksums must be identical. Prints the largest difference per file; exits 1
on any disagreement.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        sys.exit(f"{path}: no metrics records")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("reference")
    ap.add_argument("others", nargs="+")
    a = ap.parse_args()
    ref = load(a.reference)
    bad = 0
    for path in a.others:
        rows = load(path)
        if [r["step"] for r in rows] != [r["step"] for r in ref]:
            print(f"FAIL {path}: steps {[r['step'] for r in rows][:8]}... differ from the reference's")
            bad += 1
            continue
        if a.exact:
            same = rows[-1]["checksum"] == ref[-1]["checksum"]
            print(f"{'ok' if same else 'FAIL'} {path}: final checksum {rows[-1]['checksum']}"
                  f" vs {ref[-1]['checksum']}")
            bad += not same
            continue
        worst, where = 0.0, None
        for r, q in zip(ref, rows):
            for key in ("train_loss", "test_loss"):
                d = abs(q[key] - r[key]) / max(abs(r[key]), 1e-12)
                if d > worst:
                    worst, where = d, (r["step"], key)
        ok = worst <= a.rtol
        print(f"{'ok' if ok else 'FAIL'} {path}: {len(rows)} records, largest relative "
              f"difference {worst:.2e} (step {where[0] if where else '-'}"
              f" {where[1] if where else ''}), tolerance {a.rtol:g}")
        bad += not ok
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
