#!/usr/bin/python3
"""The PyTorch twin of lpsgd's ResNet-20 recipe (jobs/configs/fmnist-resnet20.ini),
for comparing the test accuracy the two reach. Never a dependency of lpsgd:
jobs/local/resnet-accuracy.sh runs it after `lpsgd train` on the same recipe.
Debian's python3-torch, python3-h5py and python3-onnx are enough.

    resnet_twin.py --init init.onnx [--data data/fashion-mnist.h5] [--epochs 12]
                   [--batch 64] [--lr 0.1] [--seed 1] [--max-steps S] [--out F.jsonl]

What is the same as lpsgd's recipe:
  model     cnn:resnet20 (torch_train.py's resnet(): BasicBlock, BN eps 1e-5,
            momentum 0.1), starting from lpsgd's own initial parameters: --init
            is `lpsgd export --model cnn:resnet20 --data F.h5 --seed S --onnx
            init.onnx`, whose initializers layers.I.{weight,bias,running_mean,
            running_var} (I: lpsgd's node index) are mapped in node order onto
            the modules, every shape and BN attribute checked. Any lpsgd export
            of the same layout works (a trained checkpoint's too).
  data      the HDF5 file's /train and /test splits held in memory as uint8,
            scaled as lpsgd's loader does: x = float(v) * scale + shift with
            scale = (1/255)/std, shift = -mean/std in float32 (the file's
            mean/std attributes; checked against the export's input.scale and
            input.shift).
  augment   crop:PAD,flip: torchvision's RandomCrop(H, padding=PAD) on the
            uint8 image (zero padding before the scaling, offsets uniform in
            [0, 2*PAD]) then RandomHorizontalFlip, done per batch with torch
            indexing. Draws are a function of (seed, epoch, sample index),
            like lpsgd's, but not lpsgd's draws.
  order     every epoch one global permutation (the same on every rank); rank
            r takes samples [r*B, (r+1)*B) of each global batch of B*P; the
            last partial global batch is dropped. Not lpsgd's permutation.
  optimizer torch.optim.SGD(momentum, weight_decay on every parameter,
            nesterov False); LR per step s as lpsgd's LrSchedule::lr: warm-up
            lr*(s+1)/W for s < W, then cosine from lr to 0 over
            total - W steps, total = epochs * steps per epoch (--max-steps only
            cuts the run short). Mean cross-entropy per rank; DDP averages the
            gradients over the ranks.
  ranks     one process per rank with WORLD_SIZE, RANK, MASTER_ADDR and
            MASTER_PORT set: DistributedDataParallel over gloo; one thread per
            process (torch.set_num_threads(1), OMP_NUM_THREADS=1).

What differs: batch-norm running statistics. DDP (broadcast_buffers=True, its
default) copies rank 0's buffers to every rank before each forward, so the
running statistics follow rank 0's batches; lpsgd keeps each rank's own and
averages them over the ranks before every evaluation (lib/train/batch_stats.hpp).
--bn-stats average does lpsgd's (broadcast_buffers=False, an allreduce average
before every evaluation). Either way training itself is the same: every rank
normalizes with its own batch's statistics.

Evaluation: after every epoch (and where --max-steps stops the run), on rank 0
alone, the whole test split in eval mode (running statistics). Prints one JSON
line per epoch {"kind": "epoch", epoch, step, test_acc, test_loss, train_loss,
train_acc, lr, elapsed_s, train_s} and last {"kind": "final", ... samples_per_s,
...}; --out also writes them to a file. train_loss/train_acc: over the samples
of all ranks since the last evaluation (as lpsgd's metrics). --max-steps 0
evaluates the initial model only.
"""
import argparse
import json
import math
import os
import re
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch loads its OpenMP runtime

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import resnet  # noqa: E402  (the same layout as lpsgd's cnn:resnetN)

PROG = "resnet_twin.py"
EVAL_BATCH = 1000


def fail(msg):
    sys.exit(f"{PROG}: error: {msg}")


def lr_at(step, base, warmup, total, min_lr=0.0):
    """lpsgd's LrSchedule::lr for the cosine schedule (lib/train/schedule.cpp)."""
    if step < warmup:
        return base * (step + 1) / warmup
    t = step - warmup
    span = total - warmup
    x = min(t, span) / span
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * x))


def parse_augment(spec):
    """'crop:PAD,flip', 'crop:PAD', 'flip', 'none' -> (pad or 0, flip)."""
    pad, flip = 0, False
    if spec in ("", "none"):
        return pad, flip
    for part in spec.split(","):
        m = re.fullmatch(r"crop:(\d+)", part)
        if m and pad == 0:
            pad = int(m.group(1))
        elif part == "flip" and not flip:
            flip = True
        else:
            fail(f"bad --augment '{spec}' (crop:PAD,flip, crop:PAD, flip or none)")
    return pad, flip


def load_data(path):
    """Both splits as uint8 tensors, int64 labels, the float32 scale and shift
    per channel (lib/io/dataset.cpp input_scaling) and the class count."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"cannot open {path}: {e}")
    with f:
        for k in ("train/x", "train/y", "test/x", "test/y"):
            if k not in f:
                fail(f"{path}: no /{k}")
        if f["train/x"].dtype != np.uint8:
            fail(f"{path}: /train/x is {f['train/x'].dtype}; the twin takes uint8 images")
        d = {s: (torch.from_numpy(np.asarray(f[s + "/x"])),
                 torch.from_numpy(np.asarray(f[s + "/y"]).astype(np.int64))) for s in ("train", "test")}
        c = d["train"][0].shape[1]
        mean = np.asarray(f.attrs.get("mean", np.zeros(c)), dtype=np.float64).reshape(-1)
        std = np.asarray(f.attrs.get("std", np.ones(c)), dtype=np.float64).reshape(-1)
        classes = int(f.attrs.get("num_classes", int(d["train"][1].max()) + 1))
    if len(mean) != c or len(std) != c:
        fail(f"{path}: mean/std have {len(mean)}/{len(std)} values for {c} channels")
    # As lpsgd: scale = (1.0f / 255.0f) / float(std), shift = -float(mean) / float(std), in float.
    unit = np.float32(1.0) / np.float32(255.0)
    scale = np.array([unit / np.float32(s) for s in std], dtype=np.float32)
    shift = np.array([-np.float32(m) / np.float32(s) for m, s in zip(mean, std)], dtype=np.float32)
    return d, torch.from_numpy(scale).view(1, c, 1, 1), torch.from_numpy(shift).view(1, c, 1, 1), classes


def load_init(model, path, scale, shift):
    """lpsgd's exported initializers onto `model`, in node order, every shape checked."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        fail("the onnx module is missing (Debian: apt-get install python3-onnx)")
    try:
        g = onnx.load(path).graph
    except Exception as e:  # noqa: BLE001 (onnx raises several kinds)
        fail(f"cannot read {path}: {e}")
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    # The loader's scaling, exported as the graph's first nodes: must be ours.
    for name, mine in (("input.scale", scale), ("input.shift", shift)):
        if name in inits and not np.array_equal(inits[name].reshape(-1), mine.numpy().reshape(-1)):
            fail(f"{path}: {name} is {inits[name].reshape(-1)}, the data file gives "
                 f"{mine.numpy().reshape(-1)}: another dataset?")
    nodes = {}  # lpsgd node index -> {tensor kind: array}
    for name, a in inits.items():
        m = re.fullmatch(r"layers\.(\d+)\.(weight|bias|running_mean|running_var)", name)
        if m:
            nodes.setdefault(int(m.group(1)), {})[m.group(2)] = a
        elif not name.startswith("input."):
            fail(f"{path}: unexpected initializer '{name}' (not an lpsgd export?)")
    ops, attrs = {}, {}
    for n in g.node:
        for i in n.input:
            m = re.fullmatch(r"layers\.(\d+)\.weight", i)
            if m:
                ops[int(m.group(1))] = n.op_type
                attrs[int(m.group(1))] = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    want = {nn.Conv2d: "Conv", nn.BatchNorm2d: "BatchNormalization", nn.Linear: "Gemm"}
    mods = [m for m in model.modules() if type(m) in want]
    order = sorted(nodes)
    if len(order) != len(mods):
        fail(f"{path} has {len(order)} layers with parameters, the twin's ResNet {len(mods)}")
    loaded = 0
    with torch.no_grad():
        for idx, mod in zip(order, mods):
            t = nodes[idx]
            if ops.get(idx) != want[type(mod)]:
                fail(f"{path}: node {idx} is {ops.get(idx)}, the twin has {type(mod).__name__} there")
            names = ["weight"] + (["bias"] if getattr(mod, "bias", None) is not None else [])
            if isinstance(mod, nn.BatchNorm2d):
                names += ["running_mean", "running_var"]
                a = attrs[idx]
                if not math.isclose(a.get("epsilon", 1e-5), mod.eps, rel_tol=1e-6) or \
                        not math.isclose(1.0 - a.get("momentum", 0.9), mod.momentum, rel_tol=1e-5):
                    fail(f"{path}: node {idx}: batch norm epsilon/momentum {a} differ from the twin's "
                         f"eps {mod.eps}, momentum {mod.momentum}")
            if isinstance(mod, nn.Linear) and attrs[idx].get("transB", 0) != 1:
                fail(f"{path}: node {idx}: Gemm without transB=1 (weight not [out, in])")
            if sorted(t) != sorted(names):
                fail(f"{path}: node {idx} has {sorted(t)}, the twin's {type(mod).__name__} {sorted(names)}")
            for name in names:
                dst = getattr(mod, name)
                if tuple(t[name].shape) != tuple(dst.shape):
                    fail(f"{path}: layers.{idx}.{name} is {list(t[name].shape)}, the twin's "
                         f"{type(mod).__name__} takes {list(dst.shape)}")
                dst.copy_(torch.from_numpy(t[name].astype(np.float32)))
                loaded += t[name].size
            if isinstance(mod, nn.BatchNorm2d):
                mod.num_batches_tracked.zero_()
    return loaded


def augment_batch(x, idx, draws, pad, flip):
    """RandomCrop(H, padding=pad) then RandomHorizontalFlip of uint8 samples x
    [B, C, H, W] (sample indices idx), with the epoch's draws (dy, dx, flip per
    sample of the split)."""
    b, c, h, w = x.shape
    dy, dx, fl = (d[idx] for d in draws)
    if pad:
        x = nn.functional.pad(x, (pad, pad, pad, pad))  # zeros in the stored domain
    ar_h, ar_w = torch.arange(h), torch.arange(w)
    rows = dy[:, None] + ar_h[None, :]                                       # [B, H]
    cols = torch.where(fl[:, None], w - 1 - ar_w[None, :], ar_w[None, :]) if flip else ar_w.expand(b, w)
    cols = dx[:, None] + cols                                                # [B, W]
    return x[torch.arange(b)[:, None, None, None], torch.arange(c)[None, :, None, None],
             rows[:, None, :, None], cols[:, None, None, :]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="lpsgd export of the initial model (ONNX)")
    ap.add_argument("--data", default="data/fashion-mnist.h5")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch", type=int, default=64, help="per rank, as lpsgd's --batch")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--augment", default="crop:2,flip", help="crop:PAD,flip | crop:PAD | flip | none")
    ap.add_argument("--seed", type=int, default=1, help="data order and augmentation draws")
    ap.add_argument("--max-steps", type=int, default=None,
                    help="stop after this many steps (0: evaluate the initial model only); "
                         "the LR schedule still spans --epochs")
    ap.add_argument("--bn-stats", choices=("ddp", "average"), default="ddp",
                    help="ddp: DDP's broadcast of rank 0's buffers (default); average: lpsgd's "
                         "average over the ranks before every evaluation")
    ap.add_argument("--out", help="also write the JSON lines to this file")
    args = ap.parse_args()
    if args.epochs < 1 or args.batch < 1 or not args.lr >= 0 or args.warmup_steps < 0:
        fail("--epochs and --batch must be >= 1, --lr and --warmup-steps >= 0")
    if args.max_steps is not None and args.max_steps < 0:
        fail("--max-steps must be >= 0")
    pad, flip = parse_augment(args.augment)

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)

    data, scale, shift, classes = load_data(args.data)
    xs, ys = data["train"]
    xt, yt = data["test"]
    n, c, h, w = xs.shape
    if pad >= min(h, w):
        fail(f"--augment crop:{pad}: the padding must be below the image size {h}x{w}")
    global_batch = args.batch * world
    per_epoch = n // global_batch
    if per_epoch < 1:
        fail(f"{args.data}: {n} training samples, fewer than one global batch of {global_batch}")
    total = args.epochs * per_epoch
    if total <= args.warmup_steps:
        fail(f"cosine schedule: total steps ({total}) must exceed the warm-up steps ({args.warmup_steps})")
    last = total if args.max_steps is None else min(total, args.max_steps)

    model = resnet(c, h, w, classes, [16, 32, 64], [3, 3, 3], "small")
    loaded = load_init(model, args.init, scale, shift)
    params = sum(p.numel() for p in model.parameters())
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, broadcast_buffers=args.bn_stats == "ddp")
    opt = torch.optim.SGD(model.parameters(), lr=lr_at(0, args.lr, args.warmup_steps, total),
                          momentum=args.momentum, weight_decay=args.weight_decay, nesterov=False)
    loss_fn = nn.CrossEntropyLoss()

    def normalize(x_u8):
        return x_u8.float() * scale + shift

    out = open(args.out, "w") if args.out and rank == 0 else None

    def emit(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    def evaluate():
        """Test loss and accuracy on rank 0 (None elsewhere), running statistics."""
        if args.bn_stats == "average" and world > 1:
            with torch.no_grad():
                for m in model.modules():
                    if isinstance(m, nn.BatchNorm2d):
                        for buf in (m.running_mean, m.running_var):
                            dist.all_reduce(buf)
                            buf.div_(world)
        if rank != 0:
            return None
        model.eval()
        loss_sum, correct = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(yt), EVAL_BATCH):
                s = model(normalize(xt[i:i + EVAL_BATCH]))
                y = yt[i:i + EVAL_BATCH]
                loss_sum += float(nn.functional.cross_entropy(s, y, reduction="sum"))
                correct += int((s.argmax(1) == y).sum())
        model.train()
        return loss_sum / len(yt), correct / len(yt)

    if rank == 0:
        print(f"{PROG}: {world} rank(s) x batch {args.batch} = {global_batch} per step, {per_epoch} steps "
              f"per epoch, {total} planned, {last} run; {params} parameters ({loaded} values from "
              f"{args.init}); augment {args.augment}; bn stats {args.bn_stats}; torch {torch.__version__}",
              file=sys.stderr, flush=True)

    interval = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, samples since the last evaluation
    t0 = time.perf_counter()
    train_s = 0.0
    lr = opt.param_groups[0]["lr"]
    step = 0
    last_eval = None
    rec = {}
    draws = None
    perm = None

    def report(kind):
        nonlocal interval, last_eval, rec
        st = interval.clone()
        if world > 1:
            dist.all_reduce(st)
        interval.zero_()
        res = evaluate()
        last_eval = step
        if rank == 0:
            # epoch as lpsgd's: whole epochs + the samples of this one / N
            epoch, i = divmod(step, per_epoch)
            rec = {"kind": kind, "epoch": epoch + i * global_batch / n, "step": step,
                   "samples": step * global_batch, "test_acc": res[1], "test_loss": res[0],
                   "train_loss": float(st[0] / st[2]) if st[2] > 0 else None,
                   "train_acc": float(st[1] / st[2]) if st[2] > 0 else None,
                   "lr": lr, "elapsed_s": time.perf_counter() - t0, "train_s": train_s}
            emit(rec)

    while step < last:
        epoch, i = divmod(step, per_epoch)
        if i == 0 or perm is None:
            # The epoch's order and augmentation draws: the same on every rank,
            # a function of (seed, epoch) only.
            gen = torch.Generator().manual_seed(args.seed * 1_000_003 + epoch)
            perm = torch.randperm(n, generator=gen)
            draws = (torch.randint(0, 2 * pad + 1, (n,), generator=gen),
                     torch.randint(0, 2 * pad + 1, (n,), generator=gen),
                     torch.randint(0, 2, (n,), generator=gen).bool())
        ts = time.perf_counter()
        idx = perm[i * global_batch + rank * args.batch:i * global_batch + (rank + 1) * args.batch]
        x = xs[idx]
        if pad or flip:
            x = augment_batch(x, idx, draws, pad, flip)
        x, y = normalize(x), ys[idx]
        lr = lr_at(step, args.lr, args.warmup_steps, total)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        scores = net(x)
        loss = loss_fn(scores, y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            interval += torch.tensor([float(loss) * len(y), float((scores.argmax(1) == y).sum()), len(y)],
                                     dtype=torch.float64)
        step += 1
        train_s += time.perf_counter() - ts
        if step % per_epoch == 0:
            report("epoch")
    if last_eval != step:  # stopped by --max-steps inside an epoch (or at step 0)
        report("eval")
    if rank == 0:
        rec = dict(rec, kind="final", samples_per_s=step * global_batch / train_s if train_s > 0 else 0.0,
                   elapsed_s=time.perf_counter() - t0, ranks=world, batch=args.batch, epochs=args.epochs,
                   planned_steps=total, seed=args.seed, augment=args.augment, bn_stats=args.bn_stats,
                   params=params, torch=torch.__version__, threads=torch.get_num_threads())
        emit(rec)
    if out:
        out.close()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
