#!/bin/sh
# test_torch.sh: exports PyTorch models (an MLP and small TransformerEncoder
# stacks) to ONNX at test time, runs them with `distir run`, and compares the
# outputs with PyTorch's within 1e-4 relative (tests/integration/
# torch_models.py). Uses Debian's /usr/bin/python3 (never the python3 on
# PATH); skips with a message, and exit status 0, only when python3-torch is
# missing. DISTIR_BUILD is the build directory (default build/release).
B=${DISTIR_BUILD:-build/release}
here=$(dirname "$0")
if [ ! -x /usr/bin/python3 ]; then
    echo "skipped: /usr/bin/python3 is not installed"
    exit 0
fi
if [ ! -x "$B/distir" ]; then
    echo "test_torch: $B/distir is not built" >&2
    exit 1
fi
exec /usr/bin/python3 "$here/torch_models.py" "$B/distir"
