#!/bin/sh
# test_onnx_recent.sh: ONNX models of opsets 23 and 24 (Attention, Gelu with approximate
# tanh, Swish, RMSNormalization, Split by num_outputs) written with Debian's python3-onnx,
# run with `distir run` and compared with numpy references (tests/integration/onnx_recent.py).
# Uses Debian's /usr/bin/python3 (never the python3 on PATH), which `make test` provides with
# python3-onnx and python3-numpy. DISTIR_BUILD is the build directory (default build/release).
B=${DISTIR_BUILD:-build/release}
here=$(dirname "$0")
if [ ! -x "$B/distir" ]; then
    echo "test_onnx_recent: $B/distir is not built" >&2
    exit 1
fi
exec /usr/bin/python3 "$here/onnx_recent.py" "$B/distir"
