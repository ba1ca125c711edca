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
kill -TERM "$PID"
i=0
while kill -0 "$PID" 2>/dev/null && [ $i -lt 200 ]; do
    sleep 0.05
    i=$((i + 1))
done
if kill -0 "$PID" 2>/dev/null; then
    fail "distird still running 10 s after SIGTERM with an idle client (grace is 30 s)"
else
    wait "$PID"
    rc=$?
    PID=
    [ $rc -eq 0 ] && ok "stopped within 10 s of SIGTERM ($(($(date +%s) - start)) s), exit 0" ||
        fail "exit status $rc"
fi
grep -q "event=idle_disconnect" "$TMP/idle.log" && ok "log: idle_disconnect" ||
    fail "log has no idle_disconnect"
kill "$QPID" 2>/dev/null
finish
