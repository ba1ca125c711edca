#!/bin/sh
# test_daemon_idle_stop.sh: SIGTERM with only idle clients connected (an
# open gRPC channel from Debian's Python grpcio, no call) stops the daemon
# at once instead of waiting for the clients to hang up or for the grace
# period (30 s here): exit 0 within 10 s, the log saying it disconnected
# them, and a call in flight still gets its grace (test_daemon.sh).
. tests/integration/lib.sh

cat >"$TMP/idle.py" <<'PY'
import sys, time
import grpc
ch = grpc.insecure_channel(sys.argv[1])
grpc.channel_ready_future(ch).result(timeout=20)
print("connected", flush=True)
time.sleep(120)
PY
start_daemon idle --grace-ms 30000 || fail "daemon"
/usr/bin/python3 "$TMP/idle.py" "$ADDR" >"$TMP/py.out" 2>"$TMP/py.err" &
QPID=$!
i=0
while ! grep -q connected "$TMP/py.out" 2>/dev/null && [ $i -lt 400 ]; do
    sleep 0.05
    i=$((i + 1))
done
grep -q connected "$TMP/py.out" && ok "an idle client is connected" ||
    fail "client did not connect: $(cat "$TMP/py.err")"
start=$(date +%s)
stop_daemon
rc=$?
took=$(($(date +%s) - start))
if [ $rc -eq 0 ] && [ $took -lt 10 ]; then
    ok "stopped ${took} s after SIGTERM, exit 0 (grace is 30 s)"
else
    fail "exit status $rc ${took} s after SIGTERM with an idle client (grace is 30 s)"
fi
grep -q "event=idle_disconnect" "$TMP/idle.log" && ok "log: idle_disconnect" ||
    fail "log has no idle_disconnect"
kill "$QPID" 2>/dev/null
finish
