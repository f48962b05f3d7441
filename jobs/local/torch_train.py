#!/usr/bin/python3
"""The lpsgd training step written in PyTorch, for measuring lpsgd against it.

Never a dependency of lpsgd: jobs/local/vs-pytorch.sh runs it beside
`lpsgd train` on the same data, model, batch and optimizer. Debian's
python3-torch (CPU, oneDNN inside) is enough.

    torch_train.py --data data/fashion-mnist.h5 --model mlp|cnn --batch 64 --steps 600

Several ranks: start one process per rank with WORLD_SIZE, RANK, MASTER_ADDR
and MASTER_PORT set; they train with DistributedDataParallel over gloo, each
rank taking its slice of every global batch, as lpsgd's ranks do. One thread
per process: set OMP_NUM_THREADS=1 as well (torch.set_num_threads does not
reach OpenBLAS, which runs PyTorch's Linear layers).

Prints one JSON line on rank 0: samples/s over the whole run (batch fetch,
forward, backward, gradient exchange and update of every step, like lpsgd's
samples_per_s), and the final training loss.
"""
import argparse
import json
import os
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn


def model_of(kind):
    """The same models as lpsgd's mlp:784-512-256-10 and cnn:lenet."""
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/fashion-mnist.h5")
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--batch", type=int, required=True, help="per rank, as lpsgd's --batch")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)

    # The training split in memory as uint8, normalised per batch as lpsgd's
    # loader does: (v / 255 - mean) / std.
    with h5py.File(args.data, "r") as f:
        xs = torch.from_numpy(np.asarray(f["train/x"]))
        ys = torch.from_numpy(np.asarray(f["train/y"]).astype(np.int64))
        mean = float(np.asarray(f.attrs.get("mean", [0.0]))[0])
        std = float(np.asarray(f.attrs.get("std", [1.0]))[0])

    torch.manual_seed(args.seed)
    model = model_of(args.model)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    global_batch = args.batch * world
    per_epoch = len(ys) // global_batch
    gen = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(len(ys), generator=gen)
    loss = torch.zeros(())
    t0 = time.perf_counter()
    for step in range(args.steps):
        i = step % per_epoch
        if i == 0 and step > 0:
            perm = torch.randperm(len(ys), generator=gen)
        idx = perm[i * global_batch + rank * args.batch:i * global_batch + (rank + 1) * args.batch]
        x = (xs[idx].float() / 255.0 - mean) / std
        y = ys[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"ranks": world, "model": args.model, "batch": args.batch,
                          "steps": args.steps, "samples_per_s": global_batch * args.steps / seconds,
                          "train_s": seconds, "final_loss": float(loss)}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
