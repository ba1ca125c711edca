#!/bin/sh
# sigkill.sh: the long form of tests/integration/test_daemon_sigkill.sh:
# 100 SIGKILLs of distird under write load (four Python grpcio clients),
# then every acknowledged result read back and PRAGMA integrity_check.
# Target: 0 acknowledged results lost, integrity ok. Run from the top
# directory (make bench).
B=${DISTIR_BUILD:-build/release}
start=$(date +%s)
/usr/bin/python3 tests/integration/daemon_sigkill.py "$B" "${ROUNDS:-100}"
rc=$?
echo "target: 0 acknowledged results lost over ${ROUNDS:-100} SIGKILLs; took $(($(date +%s) - start)) s"
exit $rc
