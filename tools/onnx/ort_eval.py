#!/usr/bin/env python3
"""Runs an ONNX model from `lpsgd export` in ONNX Runtime on a split of an
lpsgd dataset, feeding the samples as the file stores them (the export scales
them itself), and prints the accuracy as `lpsgd eval` does.

  PY tools/onnx/ort_eval.py MODEL.onnx DATA.h5 [--split test]

PY: a Python with onnxruntime, h5py and numpy, e.g. the venv
tests/e2e/onnx_venv.sh makes (build/onnx-venv/bin/python).
"""
import argparse
import json

import h5py
import numpy as np
import onnx
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--split", default="test")
    ap.add_argument("--batch", type=int, default=500)
    a = ap.parse_args()
    meta = {p.key: p.value for p in onnx.load(a.model).metadata_props}
    names = json.loads(meta.get("lpsgd.class_names", "[]"))
    s = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    with h5py.File(a.data, "r") as f:
        x, y = f[a.split + "/x"][:], f[a.split + "/y"][:]
    scores = np.concatenate([s.run(None, {inp.name: x[i:i + a.batch]})[0]
                             for i in range(0, len(x), a.batch)])
    pred = scores.argmax(1)  # the first maximum, as lpsgd's accuracy
    print(f"model: {a.model} ({meta.get('lpsgd.model', 'not from lpsgd')})")
    print(f"input {inp.name} {inp.shape} {inp.type}, {len(x)} samples of /{a.split}")
    for k in range(scores.shape[1]):
        m = y == k
        label = f"{k} {names[k]}" if k < len(names) else str(k)
        print(f"{label[:24]:<24} {int(m.sum()):9d} {int((pred[m] == k).sum()):9d} "
              f"{float((pred[m] == k).mean()) if m.any() else 0:9.4f}")
    print(f"onnxruntime {ort.__version__}: acc={float((pred == y).mean()):.6f} samples={len(x)}")


if __name__ == "__main__":
    main()
