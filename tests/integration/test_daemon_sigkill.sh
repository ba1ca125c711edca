#!/bin/sh
# test_daemon_sigkill.sh: 10 SIGKILLs of distird under write load from
# Debian's Python grpcio; every acknowledged result stays readable
# (daemon_sigkill.py; bench/sigkill.sh runs the 100-round form).
B=${DISTIR_BUILD:-build/release}
if ! /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
    echo "FAIL - /usr/bin/python3 cannot import grpc (apt-get install python3-grpcio)"
    exit 1
fi
LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
exec timeout 300 /usr/bin/python3 tests/integration/daemon_sigkill.py "$B" 10
