#!/usr/bin/python3
"""End-to-end test of ONNX graphs with residual joins and batch norms: PyTorch
ResNets (tools/onnx/torch_resnet.py: a CIFAR ResNet-20 written out, and
torchvision's ResNet-18 for one input channel) exported in PyTorch's three
forms (training mode, preserve, batch norms folded into the convolutions).

  onnx_resnet.py LPSGD VENV TORCH_RESNET_PY

For each model and form, on a small synthetic dataset (lpsgd data synth,
1x28x28):
  - lpsgd eval of the graph (2 ranks) agrees with the PyTorch model in eval()
    on the test split, within 1e-5 relative (max |lpsgd - torch| / max
    |torch|): the batch norms' running statistics, epsilon and the joins
    read as PyTorch computes them;
  - ResNet-20 with its batch norms (training, preserve) reads as lpsgd's
    cnn:resnet20 layer list exactly; the folded form as convolutions with a
    bias, and lpsgd train logs the line saying so, once on 2 ranks (and no
    such line for the other forms);
  - lpsgd train --model X.onnx trains 3 steps on 2 ranks (finite losses);
  - lpsgd export --model X.onnx (the model as train would start it) writes a
    graph that passes onnx.checker, keeps every batch norm's running
    statistics (BatchNormalization nodes with PyTorch's buffers), evaluates
    in lpsgd exactly as the graph it came from, and, where ONNX Runtime is
    available (the onnx_venv fixture), agrees in ONNX Runtime with PyTorch on
    the raw samples.

Exit 77 (CTest's SKIP_RETURN_CODE) with "SKIPPED: reason" where torch,
torchvision, onnx, h5py or an lpsgd with ONNX are missing.
"""
import importlib.util
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
    from onnx import numpy_helper
except ImportError as e:
    skip(f"python module missing ({e}); tools/setup.sh installs python3-onnx python3-h5py")
try:
    import torch
    import torchvision  # noqa: F401  (resnet18)
except ImportError as e:
    skip(f"PyTorch or torchvision unavailable ({e}); tools/setup.sh installs python3-torch "
         "python3-torchvision")

LPSGD, VENV, TOOL = sys.argv[1], sys.argv[2], sys.argv[3]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
MPIFLAGS = shlex.split(os.environ.get("MPIEXEC_FLAGS", ""))
fails = 0


def check(ok, what):
    global fails
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        fails += 1


def run(args, np_=1, expect=0):
    cmd = [MPIEXEC, "-n", str(np_), *MPIFLAGS, LPSGD, *args] if np_ > 1 else [LPSGD, *args]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if expect is not None and p.returncode != expect:
        print(f"FAIL: {' '.join(args)} (P={np_}) exited {p.returncode}, want {expect}:\n"
              f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
        raise SystemExit(1)
    return p


def rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


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


def lpsgd_scores(model, data, work, tag):
    out = os.path.join(work, f"scores-{tag}.h5")
    run(["eval", model, "--data", data, "--outputs", out], 2)
    with h5py.File(out, "r") as f:
        return f["scores"][:]


def ort_scores(path, x):
    try:
        import onnxruntime as rt
    except ImportError:
        return None
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = 1
    s = rt.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def metadata(path, key):
    return {p.key: p.value for p in onnx.load(path).metadata_props}.get(key)


FOLDED_NOTE = "look like PyTorch folded a batch normalization into them"


def one(tr, name, form, opset, data, x, work, resnet20_layers):
    tag = f"{name}-{form}"
    model = tr.random_stats(tr.build(name, 10, seed=3), seed=3)
    graph = os.path.join(work, tag + ".onnx")
    tr.export(model, graph, form, opset)
    with torch.no_grad():
        reference = model(torch.from_numpy(scaled(data, x))).numpy()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]

    ours = lpsgd_scores(graph, data, work, tag)
    r = rel(ours, reference)
    check(r <= TOL, f"{tag} (opset {opset}): lpsgd eval vs PyTorch eval() on {len(x)} inputs: {r:.2e} relative")

    p = run(["train", "--model", graph, "--data", data, "--batch", "8", "--epochs", "1",
             "--max-steps", "3", "--lr", "0.01", "--progress", "off"], 2, expect=None)
    done = re.search(r"lpsgd: done .*steps=(\d+)", p.stdout)
    losses = [float(v) for v in re.findall(r"train loss (\S+)", p.stdout)]
    check(p.returncode == 0 and done is not None and done.group(1) == "3" and losses and
          all(np.isfinite(losses)),
          f"{tag}: lpsgd train --model trains 3 steps on 2 ranks (exit {p.returncode}, "
          f"losses {losses}){'' if p.returncode == 0 else ': ' + p.stderr.strip()[-400:]}")
    notes = [l for l in (p.stdout + p.stderr).splitlines() if FOLDED_NOTE in l]
    if form == "folded":
        check(len(notes) == 1, f"{tag}: the folded batch norms are logged once: {notes[:1]}")
    else:
        check(not notes, f"{tag}: no note of folded batch norms")

    exported = os.path.join(work, tag + "-export.onnx")
    run(["export", "--onnx", exported, "--model", graph, "--data", data])
    m = onnx.load(exported)
    try:
        onnx.checker.check_model(m, full_check=True)
        check(True, f"{tag}: the export passes onnx.checker")
    except Exception as e:  # onnx.checker.ValidationError and shape inference errors
        check(False, f"{tag}: the export passes onnx.checker: {e}")
    canonical = metadata(exported, "lpsgd.model")
    if name == "resnet20" and form != "folded":
        check(canonical == resnet20_layers, f"{tag}: reads as cnn:resnet20's layer list")
    want_bn = 0 if form == "folded" else len(bns)
    got_bn = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
    check(len(got_bn) == want_bn, f"{tag}: the export has {len(got_bn)} BatchNormalization nodes, want {want_bn}")
    if got_bn:
        inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        same = all(np.array_equal(inits[n.input[3]], bn.running_mean.numpy()) and
                   np.array_equal(inits[n.input[4]], bn.running_var.numpy()) and
                   n.input[3].endswith(".running_mean") and n.input[4].endswith(".running_var")
                   for n, bn in zip(got_bn, bns))
        check(same, f"{tag}: the export's running statistics are PyTorch's buffers, named layers.I.running_*")
    again = lpsgd_scores(exported, data, work, tag + "-export")
    check(np.array_equal(again, ours), f"{tag}: the export evaluates in lpsgd exactly as the graph it came from")
    theirs = ort_scores(exported, x)
    if theirs is None:
        print(f"note: {tag}: ONNX Runtime unavailable (tests/e2e/onnx_venv.sh), export not run in it")
    else:
        r = rel(theirs, reference)
        check(r <= TOL, f"{tag}: the export in ONNX Runtime on the raw samples vs PyTorch: {r:.2e} relative")


def main():
    v = subprocess.run([LPSGD, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True).stdout
    if "built without ONNX" in v:
        skip("this lpsgd was built without ONNX (libonnx-dev missing when CMake ran)")
    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("torch_resnet", TOOL)
    tr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tr)
    with tempfile.TemporaryDirectory() as work:
        try:
            data = os.path.join(work, "d.h5")
            run(["data", "synth", "--out", data, "--samples", "48", "--test-samples", "24",
                 "--shape", "1,28,28", "--classes", "10", "--seed", "5"])
            with h5py.File(data, "r") as f:
                x = f["test/x"][:]
            ref = os.path.join(work, "cnn-resnet20.onnx")
            run(["export", "--onnx", ref, "--model", "cnn:resnet20", "--data", data])
            resnet20_layers = metadata(ref, "lpsgd.model")
            # Training mode at opset 15 for one model (training_mode=1), 13 for the other
            # (the statistics as extra outputs).
            for name, training_opset in (("resnet20", 15), ("resnet18", 13)):
                for form in tr.FORMS:
                    one(tr, name, form, training_opset if form == "training" else 13, data, x, work,
                        resnet20_layers)
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
