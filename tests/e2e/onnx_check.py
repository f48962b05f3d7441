#!/usr/bin/python3
"""End-to-end tests of lpsgd's ONNX paths (issue 34), one case per CTest test.

  onnx_check.py CASE LPSGD VENV

  agreement  graphs built with onnx.helper (an MLP, a LeNet-like CNN, odd
             shapes: stride 2, padding 1, rectangular windows, channels 3 and
             5, a fixed batch of 1, no bias, MatMul + Add, Reshape, Dropout,
             Softmax/LogSoftmax; opsets 11 to 17): lpsgd's forward pass on
             1,000 inputs (lpsgd eval --outputs) agrees with ONNX Runtime's
             within 1e-5 relative, before and after training; the export of
             the trained model passes onnx.checker, runs in ONNX Runtime on
             the raw samples with the same outputs and the same accuracy as
             lpsgd eval; eval on 1 and 3 ranks gives the same outputs.
  torch      the same for models exported from PyTorch (torch.onnx.export).
  roundtrip  export -> import -> export gives the same tensors and nodes;
             the imported export evaluates exactly as the checkpoint.
  twin       a model imported from ONNX trains bitwise as its built-in twin
             (same initial parameters, same seed), and --init fresh draws
             the built-in's parameters.
  errors     unsupported or malformed graphs: one error line, exit 2 on
             every rank, before training.
  notest     a dataset without a test split trains and says so once.

"1e-5 relative" is max |lpsgd - reference| / max |reference| over all
outputs of a model. Exit 77 (CTest's SKIP_RETURN_CODE) with "SKIPPED:
reason" where what a case needs (onnx, ONNX Runtime, PyTorch) is missing.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

SKIP = 77
TOL = 1e-5


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


try:
    import h5py
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # python3-onnx, python3-h5py, python3-numpy
    skip(f"python module missing ({e}); tools/setup.sh installs python3-onnx python3-h5py")

CASE, LPSGD, VENV = sys.argv[1], sys.argv[2], sys.argv[3]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
MPIFLAGS = shlex.split(os.environ.get("MPIEXEC_FLAGS", ""))
fails = 0


def need_ort():
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        why = "onnxruntime is not installed"
        status = VENV + ".status"
        if os.path.exists(status):
            why = open(status).read().strip()
        skip(f"ONNX Runtime unavailable: {why} (tests/e2e/onnx_venv.sh makes {VENV})")


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"PyTorch unavailable ({e}); tools/setup.sh installs python3-torch")


def check(ok, what):
    global fails
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        fails += 1


def run(args, np_=1, expect=0):
    cmd = [MPIEXEC, "-n", str(np_), *MPIFLAGS, LPSGD, *args]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if expect is not None and p.returncode != expect:
        print(f"FAIL: {' '.join(args)} (P={np_}) exited {p.returncode}, want {expect}:\n"
              f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
        raise SystemExit(1)
    return p


# ---- data ----------------------------------------------------------------------------------

def make_dataset(path, c, h, w, classes, dtype="uint8", n_train=512, n_test=1000, seed=0,
                 test=True, mean=None, std=None, names=True):
    """A dataset in lpsgd's layout whose labels follow the data (so training learns)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    if dtype == "uint8":
        x = rng.integers(0, 256, size=(n, c, h, w), dtype=np.uint8)
        xf = x.astype(np.float32) / 255
    else:
        x = rng.normal(size=(n, c, h, w)).astype(np.float32)
        xf = x
    proj = rng.normal(size=(c * h * w, classes))
    flat = xf.reshape(n, -1)
    y = ((flat - flat.mean(0)) @ proj).argmax(1).astype(np.int32)  # about balanced classes
    if mean is None:
        mean = [float(xf[:n_train, k].mean()) for k in range(c)] if dtype == "uint8" else [0.0] * c
    if std is None:
        std = [float(xf[:n_train, k].std()) for k in range(c)] if dtype == "uint8" else [1.0] * c
    with h5py.File(path, "w") as f:
        f.create_dataset("train/x", data=x[:n_train])
        f.create_dataset("train/y", data=y[:n_train])
        if test:
            f.create_dataset("test/x", data=x[n_train:])
            f.create_dataset("test/y", data=y[n_train:])
        f.attrs["num_classes"] = np.int64(classes)
        f.attrs["mean"] = np.array(mean, dtype=np.float64)
        f.attrs["std"] = np.array(std, dtype=np.float64)
        if names:
            f.attrs["class_names"] = [f"class {k}" for k in range(classes)]
    return path


def test_split(path):
    with h5py.File(path, "r") as f:
        return f["test/x"][:], f["test/y"][:]


def scaled(path, x):
    """The loader's input scaling in float32, operation for operation."""
    with h5py.File(path, "r") as f:
        mean, std = f.attrs["mean"], f.attrs["std"]
    unit = np.float32(1) / np.float32(255) if x.dtype == np.uint8 else np.float32(1)
    out = x.astype(np.float32)
    for k in range(x.shape[1]):
        sd, mu = np.float32(std[k]), np.float32(mean[k])
        out[:, k] = out[:, k] * (unit / sd) + (-mu / sd)
    return out


# ---- running models ------------------------------------------------------------------------

def ort(model_path, x):
    import onnxruntime as rt
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = 1
    s = rt.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    batch = inp.shape[0]
    if isinstance(batch, int):  # a fixed batch: one sample (or batch) at a time
        return np.concatenate([s.run(None, {inp.name: x[i:i + batch]})[0]
                               for i in range(0, len(x), batch)])
    if len(inp.shape) == 2:
        x = x.reshape(len(x), -1)
    return s.run(None, {inp.name: x})[0]


def lpsgd_outputs(model, data, work, np_=1):
    out = os.path.join(work, f"out-{os.path.basename(model)}-{np_}.h5")
    p = run(["eval", model, "--data", data, "--outputs", out], np_)
    acc = float(re.search(r"lpsgd: eval samples=\d+ loss=\S+ acc=(\S+)", p.stdout).group(1))
    with h5py.File(out, "r") as f:
        return f["scores"][:], acc


def rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def train(model, data, ckpt, np_=2, extra=()):
    run(["train", "--model", model, "--data", data, "--epochs", "2", "--batch", "16",
         "--lr", "0.02", "--progress", "off", "--checkpoint-dir", ckpt, *extra], np_)
    return os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip())


def agree(name, graph, data, work):
    """lpsgd and ONNX Runtime on one graph, before and after training."""
    x, y = test_split(data)
    ours, _ = lpsgd_outputs(graph, data, work, 2)
    theirs = ort(graph, scaled(data, x))
    r = rel(ours, theirs)
    check(r <= TOL, f"{name}: lpsgd forward vs ONNX Runtime on {len(x)} inputs: {r:.2e} relative")
    ckpt = train(graph, data, os.path.join(work, name + "-ckpt"))
    exported = os.path.join(work, name + "-trained.onnx")
    run(["export", "--onnx", exported, ckpt])
    onnx.checker.check_model(onnx.load(exported), full_check=True)
    check(True, f"{name}: onnx.checker passes on the export")
    ours, acc = lpsgd_outputs(ckpt, data, work, 1)
    theirs = ort(exported, x)  # the raw samples: the export scales them itself
    r = rel(ours, theirs)
    check(r <= TOL, f"{name}: after training, lpsgd eval vs ONNX Runtime on the export: {r:.2e} relative")
    ort_acc = float((theirs.argmax(1) == y).mean())
    check(f"{acc:.4f}" == f"{ort_acc:.4f}",
          f"{name}: accuracy lpsgd eval {acc:.4f}, ONNX Runtime {ort_acc:.4f}")
    return ckpt, exported


# ---- graphs built with onnx.helper ------------------------------------------------------------

class G:
    """A sequential graph under construction."""

    def __init__(self, shape, opset, seed=0, elem=TensorProto.FLOAT):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.opset = [], [], opset
        self.input = helper.make_tensor_value_info("x", elem, shape)
        self.cur, self.n = "x", 0

    def t(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def w(self, *shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else np.sqrt(2.0 / fan_in)
        return (self.rng.normal(size=shape) * s).astype(np.float32)

    def node(self, op, *inputs, out=None, **attrs):
        self.n += 1
        y = out or f"v{self.n}"
        self.nodes.append(helper.make_node(op, [self.cur, *inputs], [y], name=f"{op.lower()}{self.n}", **attrs))
        self.cur = y
        return self

    def conv(self, cout, cin, kh, kw, bias=True, **attrs):
        ins = [self.t(f"c{self.n}.w", self.w(cout, cin, kh, kw))]
        if bias:
            ins.append(self.t(f"c{self.n}.b", self.w(cout, scale=0.1)))
        return self.node("Conv", *ins, **attrs)

    def gemm(self, fin, fout, bias=True, trans_b=1):
        wt = self.w(fout, fin)
        ins = [self.t(f"g{self.n}.w", wt if trans_b else wt.T.copy())]
        if bias:
            ins.append(self.t(f"g{self.n}.b", self.w(fout, scale=0.1)))
        return self.node("Gemm", *ins, transB=trans_b)

    def matmul(self, fin, fout, bias=True):
        self.node("MatMul", self.t(f"m{self.n}.w", self.w(fin, fout, scale=np.sqrt(2.0 / fin))))
        if bias:
            self.node("Add", self.t(f"m{self.n}.b", self.w(fout, scale=0.1)))
        return self

    def save(self, path, classes, batch="N"):
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])
        self.nodes[-1].output[0] = "y"
        g = helper.make_graph(self.nodes, "g", [self.input], [out], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = min(m.ir_version, 8)
        onnx.checker.check_model(m, full_check=True)
        onnx.save(m, path)
        return path


def helper_graphs(work):
    """(name, graph, dataset) triples covering the operations, odd shapes and opsets 11-17."""
    out = []
    # An MLP on 1x8x8 uint8 images: Flatten, Gemm with transB 1 and 0 (opset 11).
    d = make_dataset(os.path.join(work, "d-mlp.h5"), 1, 8, 8, 4, seed=1)
    g = G(["N", 1, 8, 8], 11, seed=1)
    g.node("Flatten", axis=1).gemm(64, 32).node("Relu").gemm(32, 4, trans_b=0)
    out.append(("mlp-opset11", g.save(os.path.join(work, "mlp.onnx"), 4), d))
    # LeNet-like, float32 1x28x28: Reshape by a Constant, MatMul + Add, Softmax (opset 13).
    d = make_dataset(os.path.join(work, "d-lenet.h5"), 1, 28, 28, 10, dtype="float32", seed=2)
    g = G(["batch", 1, 28, 28], 13, seed=2)
    g.conv(6, 1, 5, 5, pads=[2, 2, 2, 2]).node("Relu").node("MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    g.conv(16, 6, 5, 5).node("Relu").node("MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    g.nodes.append(helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([-1, 400], np.int64))))
    g.node("Reshape", "shape").gemm(400, 120).node("Relu").matmul(120, 10).node("Softmax", axis=1)
    out.append(("lenet-opset13", g.save(os.path.join(work, "lenet.onnx"), 10), d))
    # Odd shapes, a fixed batch of 1, 3 channels (opset 17): stride 2 and padding 1
    # without bias, a rectangular pool with its own strides and pads, a 1x3 kernel,
    # Dropout in inference form (ratio as an input), LogSoftmax.
    d = make_dataset(os.path.join(work, "d-odd.h5"), 3, 11, 9, 6, seed=3)
    g = G([1, 3, 11, 9], 17, seed=3)
    g.conv(5, 3, 3, 3, bias=False, strides=[2, 2], pads=[1, 1, 1, 1]).node("Relu")   # 5x6x5
    g.node("MaxPool", kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 0])        # 5x6x2
    g.conv(5, 5, 1, 3, pads=[0, 1, 0, 1]).node("Identity").node("Flatten")           # 60
    g.node("Dropout", g.t("ratio", np.array(0.3, np.float32)))
    g.gemm(60, 6).node("LogSoftmax", axis=-1)
    out.append(("odd-batch1-opset17", g.save(os.path.join(work, "odd.onnx"), 6, batch=1), d))
    # 5 channels, float32 with a mean and std, a 2x2 stride-2 kernel (opset 12, Dropout ratio attr-less).
    d = make_dataset(os.path.join(work, "d-c5.h5"), 5, 7, 7, 3, dtype="float32", seed=4,
                     mean=[0.1, -0.2, 0.3, 0.0, 0.5], std=[1.5, 0.5, 2.0, 1.0, 0.8])
    g = G(["N", 5, 7, 7], 12, seed=4)
    g.conv(3, 5, 2, 2, strides=[2, 2]).node("Relu").node("Dropout").node("Flatten").gemm(27, 3)
    out.append(("channels5-opset12", g.save(os.path.join(work, "c5.onnx"), 3), d))
    # Flat input [N, 48] of 3x4x4 samples, MatMul with and without Add (opsets 14, 15, 16).
    for opset in (14, 15, 16):
        d = make_dataset(os.path.join(work, f"d-flat{opset}.h5"), 3, 4, 4, 5, seed=opset)
        g = G(["N", 48], opset, seed=opset)
        g.matmul(48, 24).node("Relu").matmul(24, 5, bias=opset != 15)
        out.append((f"flat-opset{opset}", g.save(os.path.join(work, f"flat{opset}.onnx"), 5), d))
    return out


def case_agreement(work):
    need_ort()
    for name, graph, data in helper_graphs(work):
        agree(name, graph, data, work)
    # Any number of ranks: the same outputs on 1 and 3.
    name, graph, data = "lenet-opset13", os.path.join(work, "lenet.onnx"), os.path.join(work, "d-lenet.h5")
    a, _ = lpsgd_outputs(graph, data, work, 1)
    b, _ = lpsgd_outputs(graph, data, work, 3)
    check(np.array_equal(a, b), f"{name}: lpsgd eval on 1 and 3 ranks gives the same outputs")


# ---- PyTorch ----------------------------------------------------------------------------------

def case_torch(work):
    need_ort()
    need_torch()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 32, 5, padding=2)
            self.c2 = nn.Conv2d(32, 64, 5, padding=2)
            self.f1 = nn.Linear(64 * 7 * 7, 512)
            self.f2 = nn.Linear(512, 10)
            self.drop = nn.Dropout(0.25)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            x = self.drop(F.relu(self.f1(torch.flatten(x, 1))))
            return self.f2(x)

    class Small(nn.Module):  # 3 channels, stride 2, padding 1, no bias, view, log_softmax
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
            self.p = nn.MaxPool2d(3, stride=1, padding=1)
            self.f = nn.Linear(8 * 6 * 5, 4)

        def forward(self, x):
            x = self.p(F.relu(self.c(x)))
            return F.log_softmax(self.f(x.view(-1, 8 * 6 * 5)), dim=1)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(784, 64)
            self.b = nn.Linear(64, 10, bias=False)

        def forward(self, x):
            return self.b(F.relu(self.a(x.reshape(x.shape[0], 784))))

    d28 = make_dataset(os.path.join(work, "d28.h5"), 1, 28, 28, 10, seed=5)
    dsmall = make_dataset(os.path.join(work, "dsmall.h5"), 3, 11, 9, 4, seed=6)
    cases = []
    for opset in (11, 13, 17):
        cases.append((f"torch-lenet-opset{opset}", LeNet(), (1, 1, 28, 28), d28, opset, True))
    cases.append(("torch-small-batch1", Small(), (1, 3, 11, 9), dsmall, 13, False))
    # A fixed batch of 2: x.reshape(x.shape[0], 784) becomes a Reshape to the constant [2, 784].
    cases.append(("torch-mlp-batch2-opset14", Mlp(), (2, 1, 28, 28), d28, 14, False))
    for name, module, shape, data, opset, dynamic in cases:
        path = os.path.join(work, name + ".onnx")
        module.eval()
        kw = dict(input_names=["x"], output_names=["y"], opset_version=opset)
        if dynamic:
            kw["dynamic_axes"] = {"x": {0: "N"}, "y": {0: "N"}}
        torch.onnx.export(module, torch.zeros(shape), path, **kw)
        x, _ = test_split(data)
        with torch.no_grad():
            ref = module(torch.from_numpy(scaled(data, x))).numpy()
        ours, _ = lpsgd_outputs(path, data, work, 2)
        r = rel(ours, ref)
        check(r <= TOL, f"{name}: lpsgd forward vs PyTorch's own on {len(x)} inputs: {r:.2e} relative")
        agree(name, path, data, work)


# ---- round trip, twin, errors, no test split ----------------------------------------------

def tensors(path):
    m = onnx.load(path)
    return ({t.name: (list(t.dims), numpy_helper.to_array(t).tobytes()) for t in m.graph.initializer},
            [(n.op_type, list(n.input), list(n.output), str(n.attribute)) for n in m.graph.node])


def case_roundtrip(work):
    data = make_dataset(os.path.join(work, "d.h5"), 1, 12, 12, 5, seed=7)
    ckpt = train("layers:conv(4,3x3,s1x1,p1x1)-relu-maxpool(2x2)-flatten-dropout(0.2)-linear(5)-softmax",
                 data, os.path.join(work, "ckpt"))
    first = os.path.join(work, "first.onnx")
    second = os.path.join(work, "second.onnx")
    run(["export", "--onnx", first, ckpt])
    onnx.checker.check_model(onnx.load(first), full_check=True)
    run(["export", "--onnx", second, "--model", first, "--data", data])  # import, export again
    a, b = tensors(first), tensors(second)
    check(a[0] == b[0] and len(a[0]) > 0, f"export -> import -> export: the same {len(a[0])} tensors")
    check(a[1] == b[1], "export -> import -> export: the same nodes")
    m = onnx.load(first)
    meta = {p.key: p.value for p in m.metadata_props}
    check(json.loads(meta.get("lpsgd.class_names", "[]")) == [f"class {k}" for k in range(5)],
          "class names in the export's metadata")
    check([i.name for i in m.graph.input] == ["input"] and m.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
          and m.graph.input[0].type.tensor_type.shape.dim[0].dim_param != "",
          "the export takes uint8 samples with a symbolic batch")
    x1, _ = lpsgd_outputs(ckpt, data, work, 1)
    x2, _ = lpsgd_outputs(first, data, work, 2)
    check(np.array_equal(x1, x2), "the imported export evaluates bitwise as its checkpoint")
    # Training on from the export (its scaling is the data's): accepted.
    train(first, data, os.path.join(work, "ckpt2"), extra=["--max-steps", "3"])
    check(True, "an export trains on (import of lpsgd's input scaling)")


def checksum(out):
    m = re.search(r"final parameters: checksum (\w+)", out)
    return m.group(1) if m else None


def case_twin(work):
    data = make_dataset(os.path.join(work, "d.h5"), 1, 28, 28, 10, n_train=1024, n_test=200, seed=8)
    # --algo lp: one algorithm's bits are compared (auto might choose anew between runs).
    common = ["--algo", "lp", "--data", data, "--seed", "11", "--max-steps", "25", "--epochs", "3",
              "--batch", "16", "--lr", "0.02", "--progress", "off"]
    for spec in ("cnn:lenet", "mlp:784-64-10"):
        path = os.path.join(work, spec.replace(":", "-") + ".onnx")
        run(["export", "--onnx", path, "--model", spec, "--data", data, "--seed", "11"])
        built = checksum(run(["train", "--model", spec, *common], 2).stderr)
        imported = checksum(run(["train", "--model", path, *common], 2).stderr)
        check(built is not None and built == imported,
              f"{spec} and its ONNX twin train bitwise alike: {built} / {imported}")
    # Another graph of LeNet's structure with other initializers, --init fresh: the built-in's start.
    g = G(["N", 1, 28, 28], 13, seed=99)
    g.conv(32, 1, 5, 5, pads=[2, 2, 2, 2]).node("Relu").node("MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    g.conv(64, 32, 5, 5, pads=[2, 2, 2, 2]).node("Relu").node("MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    g.node("Flatten").gemm(3136, 512).node("Relu").gemm(512, 10)
    other = g.save(os.path.join(work, "other.onnx"), 10)
    built = checksum(run(["train", "--model", "cnn:lenet", *common], 2).stderr)
    fresh = checksum(run(["train", "--model", other, "--init", "fresh", *common], 2).stderr)
    given = checksum(run(["train", "--model", other, *common], 2).stderr)
    check(fresh == built, "--init fresh draws the built-in's parameters")
    check(given != built, "--init file (default) starts from the graph's own initializers")


def error_graphs(work):
    """(name, path, pattern of the expected error) for graphs lpsgd must refuse."""
    out = []

    def lenet_like(opset=13, seed=0):
        g = G(["N", 1, 28, 28], opset, seed=seed)
        return g

    def save(name, g, classes=10, pattern=""):
        path = os.path.join(work, name + ".onnx")
        out_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])
        g.nodes[-1].output[0] = "y"
        m = helper.make_model(helper.make_graph(g.nodes, "g", [g.input], [out_vi], g.inits),
                              opset_imports=[helper.make_opsetid("", g.opset)])
        m.ir_version = min(m.ir_version, 8)
        onnx.save(m, path)
        out.append((name, path, pattern))

    g = lenet_like(); g.node("Flatten").gemm(784, 10).node("Sigmoid")
    save("unsupported-op", g, pattern=r"\(Sigmoid\): operation not supported; lpsgd reads")
    g = lenet_like(); g.conv(4, 1, 3, 3, group=1, dilations=[2, 2]).node("Flatten").gemm(4 * 24 * 24, 10)
    save("dilation", g, pattern=r"\(Conv\): dilations \[2, 2\] are not supported")
    g = G(["N", 2, 28, 28], 13); g.conv(4, 1, 3, 3, group=2).node("Flatten").gemm(4 * 26 * 26, 10)
    save("group", g, pattern=r"group 2 is not supported")
    g = lenet_like(); g.conv(4, 1, 3, 3, pads=[1, 1, 0, 0]).node("Flatten").gemm(4 * 27 * 27, 10)
    save("asymmetric-pads", g, pattern=r"pads \[1, 1, 0, 0\] differ")
    g = lenet_like(); g.node("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1).node("Flatten").gemm(196, 10)
    save("ceil-mode", g, pattern=r"ceil_mode 1 is not supported")
    g = lenet_like(); g.node("Flatten"); g.nodes.append(helper.make_node("Gemm", [g.cur, g.t("w", g.w(10, 784)), g.t("b", g.w(10))], ["y"], alpha=2.0, transB=1))
    save("gemm-alpha", g, pattern=r"alpha and beta must be 1")
    g = lenet_like(); g.node("Flatten"); g.node("Gemm", g.t("w64", g.w(10, 784).astype(np.float64)), transB=1)
    save("float64-initializer", g, pattern=r"is float64; lpsgd reads float32")
    g = lenet_like(); g.node("Flatten").gemm(700, 10)
    save("wrong-shape-initializer", g, pattern=r"for 700 input features, but the input has 784")
    # Two computed values into another operation than Add or Sum (a residual
    # Add of the same two trains: lpsgd reads graphs).
    g = lenet_like(); g.node("Relu"); a = g.cur; g.node("Relu"); b = g.cur
    g.nodes.append(helper.make_node("Mul", [a, b], ["s"], name="join")); g.cur = "s"; g.node("Flatten").gemm(784, 10)
    save("branch", g, pattern=r"the graph branches|reads 2 values computed by the graph")
    # A cycle: relu2 feeds back into relu1.
    g = lenet_like(); g.nodes += [helper.make_node("Add", ["x", "r2"], ["r1"], name="a1"),
                                 helper.make_node("Relu", ["r1"], ["r2"], name="relu2"),
                                 helper.make_node("Flatten", ["r2"], ["f"], name="flat")]
    g.cur = "f"; g.gemm(784, 10)
    save("cycle", g, pattern=r"lies on a cycle")
    g = lenet_like(opset=9); g.node("Flatten").gemm(784, 10)
    save("opset9", g, pattern=r"opset 9 is not supported; lpsgd reads opsets 11 to 17")
    g = lenet_like(opset=18); g.node("Flatten").gemm(784, 10)
    save("opset18", g, pattern=r"opset 18 is not supported")
    g = G(["N", 3, 28, 28], 13); g.node("Flatten").gemm(3 * 784, 10)
    save("input-shape", g, pattern=r"input is per-sample \[3, 28, 28\] but .* holds samples \[1, 28, 28\]")
    g = lenet_like(); g.node("Flatten").gemm(784, 10).node("Softmax", axis=1).node("Relu")
    save("softmax-not-last", g, pattern=r"is not the graph's last node")
    g = lenet_like(); g.node("Flatten").gemm(784, 32)
    g.node("Dropout", g.t("r", np.array(0.5, np.float32)), g.t("tm", np.array(True))).gemm(32, 10)
    save("dropout-training", g, pattern=r"is in training mode")
    g = lenet_like(); g.node("Flatten").gemm(784, 10).node("Reshape", g.t("s", np.array([-1, 5, 2], np.int64)))
    save("reshape-3d", g, pattern=r"\(Reshape\): shape \[-1, 5, 2\] is not supported")
    g = lenet_like(); g.conv(4, 1, 3, 3, auto_pad="SAME_UPPER").node("Flatten").gemm(4 * 784, 10)
    save("auto-pad-same", g, pattern=r"auto_pad SAME_UPPER is not supported")
    g = lenet_like(); g.node("Flatten").gemm(784, 7)
    save("outputs-vs-classes", g, classes=7, pattern=r"has 7 outputs but .* has 10 classes")
    g = lenet_like(); g.node("Flatten").gemm(784, 10); g.nodes[-1].domain = "com.example"
    save("custom-domain", g, pattern=r"is of domain 'com.example'")
    g = lenet_like(); g.node("Flatten").gemm(784, 10); g.node("Relu", foo=1)
    save("unknown-attribute", g, pattern=r"attribute 'foo' is not supported")
    # A shape computed from the data (PyTorch's x.view(x.size(0), -1) with a dynamic batch).
    g = lenet_like(); x0 = g.cur
    g.nodes += [helper.make_node("Shape", [x0], ["shp"], name="shape"),
                helper.make_node("Gather", ["shp", g.t("zero", np.array(0, np.int64))], ["n"], name="gather", axis=0),
                helper.make_node("Unsqueeze", ["n", g.t("ax", np.array([0], np.int64))], ["n1"], name="unsq"),
                helper.make_node("Concat", ["n1", g.t("m1", np.array([-1], np.int64))], ["s2"], name="concat", axis=0),
                helper.make_node("Reshape", [x0, "s2"], ["flat"], name="reshape")]
    g.cur = "flat"; g.gemm(784, 10)
    save("shape-from-data", g, pattern=r"computes a shape from .*torch.flatten\(x, 1\)")
    # A second input.
    g = lenet_like(); g.node("Flatten").gemm(784, 10)
    path = os.path.join(work, "two-inputs.onnx")
    g.nodes[-1].output[0] = "y"
    m = helper.make_model(helper.make_graph(g.nodes, "g", [g.input, helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], g.inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    out.append(("two-inputs", path, r"has 2 inputs \(x, z\)"))
    # Initializers kept in an external file.
    g = lenet_like(); g.node("Flatten").gemm(784, 10)
    ext = os.path.join(work, "external.onnx")
    g.nodes[-1].output[0] = "y"
    m = helper.make_model(helper.make_graph(g.nodes, "g", [g.input], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], g.inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, ext, save_as_external_data=True, all_tensors_to_one_file=True, location="external.data", size_threshold=0)
    out.append(("external-data", ext, r"is stored in an external file"))
    # Damaged and truncated files.
    good = open(os.path.join(work, "unsupported-op.onnx"), "rb").read()
    open(os.path.join(work, "truncated.onnx"), "wb").write(good[: len(good) // 2])
    out.append(("truncated", os.path.join(work, "truncated.onnx"), r"damaged or truncated|holds"))
    rng = np.random.default_rng(5)
    open(os.path.join(work, "garbage.onnx"), "wb").write(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    out.append(("garbage", os.path.join(work, "garbage.onnx"), r"not an ONNX model|damaged|holds no graph"))
    open(os.path.join(work, "empty.onnx"), "wb").close()
    out.append(("empty", os.path.join(work, "empty.onnx"), r"holds no graph"))
    out.append(("missing", os.path.join(work, "missing.onnx"), r"cannot open the ONNX model"))
    return out


def case_errors(work):
    data = make_dataset(os.path.join(work, "d.h5"), 1, 28, 28, 10, n_train=256, n_test=64, seed=9)
    cases = error_graphs(work)
    for name, path, pattern in cases:
        p = run(["train", "--model", path, "--data", data, "--epochs", "1", "--progress", "off"], 2, expect=None)
        lines = [l for l in p.stderr.splitlines() if l.startswith("lpsgd")]
        ok = (p.returncode == 2 and len(lines) == 1 and lines[0].startswith("lpsgd: error: ")
              and re.search(pattern, lines[0]) is not None and "lpsgd: done" not in p.stdout)
        check(ok, f"{name}: exit {p.returncode}, {lines[0] if lines else p.stderr.strip()[:300]}")
    distinct = len({name for name, _, _ in cases})
    check(distinct >= 12, f"{distinct} distinct unsupported or malformed graphs refused with one line")
    # eval refuses them the same way.
    p = run(["eval", os.path.join(work, "cycle.onnx"), "--data", data], 2, expect=None)
    lines = [l for l in p.stderr.splitlines() if l.startswith("lpsgd")]
    check(p.returncode == 2 and len(lines) == 1 and "cycle" in lines[0], f"eval of a cycle: {lines}")
    # An export made for other data (its scaling) is refused on this data.
    other = make_dataset(os.path.join(work, "other.h5"), 1, 28, 28, 10, n_train=256, n_test=64, seed=10,
                         mean=[0.2], std=[0.4])
    exp = os.path.join(work, "for-other.onnx")
    run(["export", "--onnx", exp, "--model", "mlp:784-10", "--data", other])
    p = run(["train", "--model", exp, "--data", data, "--epochs", "1"], 2, expect=None)
    lines = [l for l in p.stderr.splitlines() if l.startswith("lpsgd")]
    check(p.returncode == 2 and len(lines) == 1 and "input scaling" in lines[0], f"another dataset's export: {lines}")


def case_notest(work):
    data = make_dataset(os.path.join(work, "train-only.h5"), 1, 8, 8, 4, n_train=512, test=False, seed=12)
    metrics = os.path.join(work, "m.jsonl")
    p = run(["train", "--model", "mlp:64-16-4", "--data", data, "--epochs", "2", "--batch", "16",
             "--progress", "off", "--metrics", metrics, "--checkpoint-dir", os.path.join(work, "ck")], 2)
    said = (p.stdout + p.stderr).count("nothing will be evaluated")
    check(said == 1, f"a train-only dataset is said once to have nothing to evaluate ({said} times)")
    check("test_acc=none" in p.stdout, "the done line says test_acc=none")
    recs = [json.loads(l) for l in open(metrics)]
    check(all(r["test_acc"] is None for r in recs) and recs[-1]["kind"] == "final" and recs[-1]["train_loss"] > 0,
          f"{len(recs)} metrics records with test_acc null and training loss")


def need_onnx_build():
    v = subprocess.run([LPSGD, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True).stdout
    if "built without ONNX" in v:
        skip("this lpsgd was built without ONNX (libonnx-dev missing when CMake ran)")


def main():
    need_onnx_build()
    cases = {"agreement": case_agreement, "torch": case_torch, "roundtrip": case_roundtrip,
             "twin": case_twin, "errors": case_errors, "notest": case_notest}
    if CASE not in cases:
        sys.exit(f"unknown case {CASE}; one of {', '.join(cases)}")
    with tempfile.TemporaryDirectory() as work:
        try:
            cases[CASE](work)
        except SystemExit as e:
            if e.code == SKIP:
                raise
            if e.code:
                return 1
    if fails:
        print(f"{fails} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
