#!/bin/sh
# test_python_client.sh: the Python client package against a real daemon
# (tests/python/test_client.py with Debian's /usr/bin/python3).
B=${DISTIR_BUILD:-build/release}
if ! /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
    echo "FAIL - /usr/bin/python3 cannot import grpc and protobuf (python3-grpcio, python3-protobuf)"
    exit 1
fi
LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
timeout 300 /usr/bin/python3 tests/python/test_client.py "$B" || exit 1

# The example in examples/python runs as its documentation says.
. tests/integration/lib.sh
"$DISTIR" model gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 64 --batch 16 \
    -o "$TMP/m.pb" >/dev/null || fail "model"
start_daemon ex || { fail "daemon start"; finish; }
PYTHONPATH=$B/python PATH="$ROOT/$B:$PATH" timeout 120 /usr/bin/python3 \
    examples/python/regression_check.py "$ADDR" "$TMP/m.pb" --set-baseline v1 >"$TMP/ex1" 2>&1
check "examples/python/regression_check.py sets the baseline" grep -q "baseline train-step set to v1" "$TMP/ex1"
PYTHONPATH=$B/python timeout 120 /usr/bin/python3 examples/python/regression_check.py \
    "$ADDR" "$TMP/m.pb" >"$TMP/ex2" 2>&1
check "... and compares with it (exit 0, no regression)" [ $? -eq 0 ]
stop_daemon
finish
