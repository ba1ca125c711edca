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
exec timeout 300 /usr/bin/python3 tests/python/test_client.py "$B"
