#!/usr/bin/env bash
# Makes VENV, a Python virtual environment with ONNX Runtime from PyPI for the
# ONNX tests (tests/e2e/onnx_check.py): Debian's Python with its packages
# visible (--system-site-packages: numpy, h5py, onnx, torch), numpy pinned to
# Debian's so h5py keeps working. Quick when VENV already has it. Never fails:
# where it cannot be made (no PyPI access, no python3-venv) it writes the
# reason to VENV.status, and the tests that need ONNX Runtime report SKIPPED
# with it.
#   Usage: tests/e2e/onnx_venv.sh VENV
set -u
venv=${1:?usage: onnx_venv.sh VENV}
status=$venv.status
if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import onnxruntime' 2>/dev/null; then
  rm -f "$status"
  echo "onnx_venv: $venv has onnxruntime $("$venv/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)')"
  exit 0
fi
log=$venv.log
if ! /usr/bin/python3 -m venv --system-site-packages "$venv" >"$log" 2>&1; then
  echo "/usr/bin/python3 -m venv failed (python3-venv missing?): $(tail -n1 "$log")" >"$status"
  cat "$status"; exit 0
fi
numpy=$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)' 2>/dev/null)
pins=()
[[ -n $numpy ]] && pins=("numpy==$numpy")
if ! timeout 900 "$venv/bin/pip" install --disable-pip-version-check -q onnxruntime "${pins[@]}" >>"$log" 2>&1; then
  echo "pip install onnxruntime failed (no PyPI access?): $(grep -v '^\s*$' "$log" | tail -n1)" >"$status"
  cat "$status"; exit 0
fi
rm -f "$status"
echo "onnx_venv: $venv has onnxruntime $("$venv/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)')"
