#!/usr/bin/python3
"""Checks an `lpsgd train --trace` timeline (Chrome trace-event JSON).

    trace_check.py FILE --ranks P --steps S [--deferred]

- it parses as JSON: {"traceEvents": [...]}, every event with a phase, a pid
  and (but metadata) a category, a name and a time; complete events ("X") with
  a duration >= 0;
- the pids are the ranks 0..P-1, each named "rank R" by a metadata event;
- on every lane of every rank the complete events nest (each lies inside the
  one around it or after it, never across its end): layers inside steps;
- every rank has S steps and, in every step, one collective per gradient
  bucket (all-reduce mode), on the exchange lane, each with its algorithm,
  bytes and blocks, starting after its bucket was ready and ending before
  the next step does (--overlap on lets the next forward overlap it; with
  --deferred some step's must reach into the next);
- the ranks are on one clock: the spans of one collective (same step, same
  bucket) on all ranks overlap, as they must, since none can finish before
  every rank has joined.
Exits 1 with the first problem found.
"""
import argparse
import collections
import json
import sys

EPS_US = 2.0  # clock reads of nested spans are separate calls: allow rounding


def fail(msg):
    print(f"FAIL: trace: {msg}")
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--deferred", action="store_true",
                    help="require some step's collective to end after the next step began "
                         "(--overlap on with a launch plan that holds buckets back)")
    a = ap.parse_args()
    try:
        doc = json.load(open(a.file))
    except (OSError, ValueError) as e:
        fail(f"{a.file} is not JSON: {e}")
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail("no traceEvents list")

    names = {}
    spans = collections.defaultdict(list)  # (pid, tid) -> [(ts, end, ev)]
    for e in events:
        if e.get("ph") == "M":
            if e.get("name") == "process_name":
                names[e["pid"]] = e["args"]["name"]
            continue
        for k in ("ph", "cat", "name", "pid", "tid", "ts"):
            if k not in e:
                fail(f"event without '{k}': {e}")
        if e["ph"] == "X":
            if e.get("dur", -1) < 0:
                fail(f"complete event without a duration >= 0: {e}")
            spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e))
        elif e["ph"] != "i":
            fail(f"unexpected phase {e['ph']}: {e}")
    pids = sorted({p for p, _ in spans})
    if pids != list(range(a.ranks)):
        fail(f"pids {pids}, expected ranks 0..{a.ranks - 1}")
    for p in pids:
        if names.get(p) != f"rank {p}":
            fail(f"pid {p} is named {names.get(p)!r}")

    # Nesting per lane: a stack of open spans.
    for lane, lst in spans.items():
        lst.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for ts, end, e in lst:
            while stack and ts >= stack[-1][1] - EPS_US:
                stack.pop()
            if stack and end > stack[-1][1] + EPS_US:
                fail(f"rank {lane[0]} lane {lane[1]}: {e['name']} [{ts:.1f}, {end:.1f}] crosses the end "
                     f"of {stack[-1][2]['name']} [{stack[-1][0]:.1f}, {stack[-1][1]:.1f}]")
            stack.append((ts, end, e))

    # Steps, buckets and one collective per bucket per step.
    per_rank = {}
    for p in pids:
        steps = sorted((s for s in spans[(p, 0)] if s[2]["cat"] == "step"), key=lambda s: s[0])
        if len(steps) != a.steps:
            fail(f"rank {p}: {len(steps)} steps, expected {a.steps}")
        if not any(s[2]["cat"] == "layer" and steps[0][0] <= s[0] and s[1] <= steps[0][1] + EPS_US
                   for s in spans[(p, 0)]):
            fail(f"rank {p}: no layer span inside its first step")
        colls = sorted((s for s in spans[(p, 1)] if s[2]["cat"] == "collective"), key=lambda s: s[0])
        ready = sorted((e["ts"], e["args"]["bucket"]) for e in events
                       if e.get("pid") == p and e.get("cat") == "bucket")
        buckets = sorted({b for _, b in ready})
        if len(buckets) < 2:
            fail(f"rank {p}: {len(buckets)} buckets; the test expects several")
        if len(colls) != a.steps * len(buckets):
            fail(f"rank {p}: {len(colls)} collectives for {a.steps} steps of {len(buckets)} buckets")
        # The collectives run one at a time, a step's after the step before's:
        # the k-th group of len(buckets) (by start) is step k's. Each starts
        # after its bucket was ready in that step and ends before the next
        # step does (with --overlap on the next forward overlaps the last
        # ones; after the last step, the final evaluation waits for them).
        by_step = []
        deferred_steps = 0
        for i, (ts, end, st) in enumerate(steps):
            group = colls[i * len(buckets):(i + 1) * len(buckets)]
            got = sorted(c[2]["args"]["bucket"] for c in group)
            if got != buckets:
                fail(f"rank {p} step {i + 1}: collectives of buckets {got}, expected {buckets}")
            until = steps[i + 1][1] if i + 1 < len(steps) else float("inf")
            for c in group:
                args = c[2]["args"]
                for k in ("algo", "bytes", "blocks"):
                    if k not in args:
                        fail(f"rank {p}: collective without '{k}': {c[2]}")
                r = [t for t, b in ready if b == args["bucket"] and ts - EPS_US <= t <= end]
                if not r or c[0] < r[0] - EPS_US:
                    fail(f"rank {p} step {i + 1}: bucket {args['bucket']} moved before it was ready")
                if c[1] > until + EPS_US:
                    fail(f"rank {p} step {i + 1}: bucket {args['bucket']}'s collective ends after "
                         f"the next step")
            by_step.append({c[2]["args"]["bucket"]: c for c in group})
            if i + 1 < len(steps) and any(c[1] > steps[i + 1][0] + EPS_US for c in group):
                deferred_steps += 1
        per_rank[p] = by_step
        if a.deferred and not deferred_steps:
            fail(f"rank {p}: no step's exchange reached into the next step (nothing deferred)")

    # One clock: a collective's spans on all ranks overlap.
    worst = 0.0
    for i in range(a.steps):
        for b in buckets:
            cs = [per_rank[p][i][b] for p in pids]
            gap = max(c[0] for c in cs) - min(c[1] for c in cs)
            worst = max(worst, gap)
            if gap > 1000.0:  # 1 ms: far above a clock estimate's error here
                fail(f"step {i + 1} bucket {b}: one rank finished {gap:.0f} us before another started")
    print(f"ok: trace: {a.ranks} ranks, {a.steps} steps x {len(buckets)} buckets, "
          f"{len(events)} events, nested, ranks on one clock (worst gap {worst:.1f} us)")


if __name__ == "__main__":
    main()
