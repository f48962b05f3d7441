#!/usr/bin/python3
"""The lpsgd training step written in PyTorch, for measuring lpsgd against it.

Never a dependency of lpsgd: jobs/local/vs-pytorch.sh runs it beside
`lpsgd train` on the same data, model, batch and optimizer, and
jobs/local/netns-train.sh across the namespaces of netns-cluster.sh. Debian's
python3-torch (CPU, oneDNN inside) is enough.

    torch_train.py --data data/fashion-mnist.h5 --model mlp|cnn --batch 64 --steps 600
    torch_train.py --synthetic --shape 1,28,28 --classes 10 --model mlp:784-2048-2048-10 \\
        --batch 32 --steps 35 --warmup 5 [--fp16-compress] [--bucket-mb 25]

Options:
  --data F.h5          lpsgd's HDF5 dataset (the training split is held in memory)
  --synthetic          random data instead: normal noise of --shape C,H,W (default
                       1,28,28) with labels in [0, --classes) (default 10), made in
                       memory (a pool of 8 batches per rank, cycled); no file needed
  --model SPEC         mlp (= mlp:784-512-256-10), cnn or cnn:lenet (lpsgd's LeNet),
                       mlp:IN-H1-...-OUT (Flatten, then Linear+ReLU layers, as lpsgd's
                       mlp specs; IN must be C*H*W), alexnet or cnn:alexnet (lpsgd's:
                       3x3 convolutions of 64, 192, 384, 256, 256 channels with 2x2 max
                       pools after the 1st, 2nd and 5th, then Linear 4096, 4096, classes;
                       28.5 M parameters on 1x28x28), resnet20 (or 6n+2 layers), resnet18,
                       resnet34 or cnn:resnetN: lpsgd's residual networks with batch norm
  --batch B            samples per rank and step, as lpsgd's --batch
  --steps S            steps run in all (warm-up included)
  --warmup W           the first W steps are left out of the per-step timings (default 0)
  --probe-steps K      compute probe: K steps of forward+backward alone (and the update,
                       on a copy), timed before the training steps (default 5, after 2
                       untimed; 0: none)
  --lr, --momentum, --weight-decay
                       SGD as lpsgd's (defaults 0.05, 0.9, 1e-4)
  --fp16-compress      DDP communication hook fp16_compress_hook: gradients cross the
                       network as float16 (half the bytes), averaged in float32
  --bucket-mb M        DDP's bucket_cap_mb (default 25, DDP's own default)
  --seed S             parameters, data order and synthetic data (default 1)

Several ranks: start one process per rank with WORLD_SIZE, RANK, MASTER_ADDR
and MASTER_PORT set; they train with DistributedDataParallel over gloo, each
rank taking its slice of every global batch, as lpsgd's ranks do (across
network namespaces also GLOO_SOCKET_IFNAME: the interface with the node's
address). One thread per process: set OMP_NUM_THREADS=1 as well
(torch.set_num_threads does not reach OpenBLAS, which runs PyTorch's Linear
layers).

Prints one JSON line on rank 0:
  samples_per_s, train_s   over the whole run (batch fetch, forward, backward,
                           gradient exchange and update of every step, like
                           lpsgd's samples_per_s); final_loss
  step_s, step_mean_s      median and mean time of the measured steps (after
                           --warmup), rank 0's clock
  measured_samples_per_s   global batch x measured steps / their wall time
  compute_s, compute_max_s forward+backward per step without any exchange,
                           from the probe (DDP's no_sync(): no gradient
                           bucket is reduced), the mean and the largest over
                           the ranks; all ranks probe at once, after a barrier,
                           so they share the CPUs as in training. DDP gives no
                           way to time compute inside a step that communicates:
                           the probe is the honest stand-in
  update_s                 rank 0's SGD update per step, timed in the probe (on
                           a copy: parameters and optimizer are restored after it)
  exposed_comm_s           step_s - compute_s: what the exchange adds to a step,
                           with the update (update_s) and any slowdown of
                           compute by the exchange's CPU use
  cpu_s                    CPU seconds of rank 0's process (all its threads) in
                           the measured steps
  t_start_mono, t_end_mono the measured window in CLOCK_MONOTONIC seconds (as
                           lpsgd's --step-trace start_s), for matching samples
                           of link counters
  params, ranks, model, batch, steps, warmup, fp16_compress, bucket_mb
"""
import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

PROBE_UNTIMED = 2
SYNTHETIC_POOL = 8


def mlp(widths):
    layers = [nn.Flatten()]
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def alexnet(c, h, w, classes):
    """lpsgd's cnn:alexnet (lib/nn/builder.cpp)."""
    flat = 256 * (h // 2 // 2 // 2) * (w // 2 // 2 // 2)
    return nn.Sequential(
        nn.Conv2d(c, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(flat, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, classes))


class BasicBlock(nn.Module):
    """He et al.'s basic block as lpsgd's (lib/model/desc.cpp Graph::basic_block):
    conv3x3-BN-ReLU-conv3x3-BN, the input added back (through a 1x1 convolution
    with BN where the stride or the channels change), then ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def resnet(c, h, w, classes, widths, blocks, stem):
    """lpsgd's cnn:resnetN: a stem (3x3 conv-BN-ReLU of widths[0], or for
    resnet18/34 on inputs over 64 pixels ImageNet's 7x7/2 and 3x3/2 max pool),
    stages of basic blocks (stride 2 at the start of every stage but the
    first), global average pooling and the classifier."""
    if stem == "small":
        layers = [nn.Conv2d(c, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    else:
        layers = [nn.Conv2d(c, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = widths[0]
    for s, (width, n) in enumerate(zip(widths, blocks)):
        for b in range(n):
            layers.append(BasicBlock(cin, width, 2 if s > 0 and b == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def model_of(spec, shape, classes):
    """The same models as lpsgd's specs (see the docstring)."""
    c, h, w = shape
    if spec == "mlp":
        spec = "mlp:784-512-256-10"
    if spec.startswith("mlp:"):
        if not re.fullmatch(r"\d+(-\d+)+", spec[4:]):
            sys.exit(f"torch_train.py: error: bad model spec '{spec}' (mlp:IN-H1-...-OUT)")
        widths = [int(v) for v in spec[4:].split("-")]
        if widths[0] != c * h * w:
            sys.exit(f"torch_train.py: error: {spec} takes {widths[0]} inputs, the data has "
                     f"{c}x{h}x{w} = {c * h * w}")
        return mlp(widths)
    if spec in ("cnn", "cnn:lenet"):
        return nn.Sequential(nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * (h // 4) * (w // 4), 512), nn.ReLU(), nn.Linear(512, classes))
    if spec in ("alexnet", "cnn:alexnet"):
        return alexnet(c, h, w, classes)
    m = re.fullmatch(r"(?:cnn:)?resnet(\d+)", spec)
    if m and int(m.group(1)) in (18, 34):
        blocks = [2, 2, 2, 2] if m.group(1) == "18" else [3, 4, 6, 3]
        return resnet(c, h, w, classes, [64, 128, 256, 512], blocks, "small" if max(h, w) <= 64 else "imagenet")
    if m and int(m.group(1)) >= 8 and (int(m.group(1)) - 2) % 6 == 0:
        n = (int(m.group(1)) - 2) // 6
        return resnet(c, h, w, classes, [16, 32, 64], [n, n, n], "small")
    sys.exit(f"torch_train.py: error: unknown model '{spec}' (mlp, cnn, cnn:lenet, "
             "mlp:IN-H1-...-OUT, alexnet or cnn:alexnet, resnet20 (6n+2), resnet18, resnet34)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/fashion-mnist.h5")
    ap.add_argument("--synthetic", action="store_true", help="random data in memory, no --data file")
    ap.add_argument("--shape", default="1,28,28", help="C,H,W of --synthetic data")
    ap.add_argument("--classes", type=int, default=10, help="classes of --synthetic data")
    ap.add_argument("--model", required=True,
                    help="mlp, cnn, cnn:lenet, mlp:IN-H1-...-OUT, alexnet or cnn:alexnet")
    ap.add_argument("--batch", type=int, required=True, help="per rank, as lpsgd's --batch")
    ap.add_argument("--steps", type=int, required=True, help="steps in all, warm-up included")
    ap.add_argument("--warmup", type=int, default=0, help="first steps left out of the step timings")
    ap.add_argument("--probe-steps", type=int, default=5, help="timed compute-only steps before training")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--fp16-compress", action="store_true", help="DDP hook fp16_compress_hook")
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP bucket_cap_mb")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not 0 <= args.warmup < args.steps:
        sys.exit("torch_train.py: error: --warmup must be >= 0 and below --steps")

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)

    if args.synthetic:
        try:
            shape = tuple(int(v) for v in args.shape.split(","))
            assert len(shape) == 3 and min(shape) > 0
        except (ValueError, AssertionError):
            sys.exit(f"torch_train.py: error: --shape must be C,H,W, got '{args.shape}'")
        classes = args.classes
        g = torch.Generator().manual_seed(args.seed * 1000 + rank)
        pool_x = torch.randn((SYNTHETIC_POOL * args.batch,) + shape, generator=g)
        pool_y = torch.randint(0, classes, (SYNTHETIC_POOL * args.batch,), generator=g)

        def batch_of(step):
            i = step % SYNTHETIC_POOL
            return pool_x[i * args.batch:(i + 1) * args.batch], pool_y[i * args.batch:(i + 1) * args.batch]
    else:
        import h5py
        # The training split in memory as uint8, normalised per batch as lpsgd's
        # loader does: (v / 255 - mean) / std.
        with h5py.File(args.data, "r") as f:
            xs = torch.from_numpy(np.asarray(f["train/x"]))
            ys = torch.from_numpy(np.asarray(f["train/y"]).astype(np.int64))
            mean = float(np.asarray(f.attrs.get("mean", [0.0]))[0])
            std = float(np.asarray(f.attrs.get("std", [1.0]))[0])
            classes = int(f.attrs.get("num_classes", int(ys.max()) + 1))
        shape = tuple(xs.shape[1:])
        global_batch = args.batch * world
        per_epoch = len(ys) // global_batch
        if per_epoch < 1:
            sys.exit(f"torch_train.py: error: {args.data} has fewer than {global_batch} samples")
        gen = torch.Generator().manual_seed(args.seed)
        perm = [torch.randperm(len(ys), generator=gen)]

        def batch_of(step):
            i = step % per_epoch
            if i == 0 and step > 0:
                perm[0] = torch.randperm(len(ys), generator=gen)
            idx = perm[0][i * global_batch + rank * args.batch:i * global_batch + (rank + 1) * args.batch]
            return (xs[idx].float() / 255.0 - mean) / std, ys[idx]

    torch.manual_seed(args.seed)
    model = model_of(args.model, shape, classes)
    params = sum(p.numel() for p in model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
        if args.fp16_compress:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
            model.register_comm_hook(state=None, hook=fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    global_batch = args.batch * world

    # The compute probe: forward+backward with no exchange (no_sync() keeps
    # DDP from reducing any bucket; the gradients are then dropped, nothing is
    # updated). All ranks at once, so they share the cores as they will.
    # The update is timed too, on a copy of the parameters: they and the
    # optimizer are restored afterwards.
    compute_s = compute_max_s = update_s = float("nan")
    if args.probe_steps > 0:
        no_sync = model.no_sync if world > 1 else contextlib.nullcontext
        saved = [p.detach().clone() for p in model.parameters()]
        times, updates = [], []
        if world > 1:
            dist.barrier()
        for k in range(PROBE_UNTIMED + args.probe_steps):
            x, y = batch_of(k)
            t = time.perf_counter()
            with no_sync():
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x), y).backward()
            t1 = time.perf_counter()
            opt.step()
            if k >= PROBE_UNTIMED:
                times.append(t1 - t)
                updates.append(time.perf_counter() - t1)
        opt.zero_grad(set_to_none=True)
        opt.state.clear()
        with torch.no_grad():
            for p, v in zip(model.parameters(), saved):
                p.copy_(v)
        del saved
        compute_s = compute_max_s = statistics.median(times)
        update_s = statistics.median(updates)
        if world > 1:
            c = torch.tensor([compute_s], dtype=torch.float64)
            cmax = c.clone()
            dist.all_reduce(c)
            dist.all_reduce(cmax, op=dist.ReduceOp.MAX)
            compute_s, compute_max_s = float(c) / world, float(cmax)
            dist.barrier()

    loss = torch.zeros(())
    step_times = []
    t0 = time.perf_counter()
    t_meas = mono0 = cpu0 = 0.0
    for step in range(args.steps):
        ts = time.perf_counter()
        if step == args.warmup:
            t_meas, mono0, cpu0 = ts, time.monotonic(), time.process_time()
        x, y = batch_of(step)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        te = time.perf_counter()
        if step >= args.warmup:
            step_times.append(te - ts)
    mono1, cpu1 = time.monotonic(), time.process_time()
    seconds = te - t0
    measured = len(step_times)
    step_s = statistics.median(step_times)
    if rank == 0:
        print(json.dumps({
            "ranks": world, "model": args.model, "batch": args.batch, "steps": args.steps,
            "samples_per_s": global_batch * args.steps / seconds, "train_s": seconds,
            "final_loss": float(loss), "params": params, "warmup": args.warmup,
            "measured_steps": measured, "step_s": step_s, "step_mean_s": statistics.mean(step_times),
            "measured_samples_per_s": global_batch * measured / (te - t_meas),
            "compute_s": compute_s, "compute_max_s": compute_max_s, "update_s": update_s,
            "exposed_comm_s": step_s - compute_s, "cpu_s": cpu1 - cpu0,
            "t_start_mono": mono0, "t_end_mono": mono1,
            "fp16_compress": args.fp16_compress and world > 1, "bucket_mb": args.bucket_mb}),
            flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
