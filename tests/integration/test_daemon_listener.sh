#!/bin/sh
# test_daemon_listener.sh: the listeners survive what used to kill them.
# distird with RLIMIT_NOFILE 1024 gets 1,100 connections held at once (the
# descriptor table would overflow: gRPC core 1.51's own accept loop stopped
# for good there); after they are released a new client is answered within
# 1 s. Idle connections are closed: a gRPC connection with no call after
# --max-idle-s, a metrics connection that sends no request after 5 s; the
# metrics port holds at most 32 connections and still answers afterwards.
. tests/integration/lib.sh

MLP=tests/ir/seed001_mlp.dir
T="timeout 60"

cat >"$TMP/hold.py" <<'PY'
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
n = int(sys.argv[2])
socks, dropped = [], 0
for i in range(n):
    s = socket.create_connection((host, int(port)), timeout=5)
    socks.append(s)
time.sleep(1.0)
for s in socks:  # which ones did the server close at once?
    s.setblocking(False)
    try:
        if s.recv(1) == b"":
            dropped += 1
    except BlockingIOError:
        pass
    except OSError:
        dropped += 1
print(len(socks), dropped, flush=True)
for s in socks:
    s.close()
PY
cat >"$TMP/idle.py" <<'PY'
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=30)
t0 = time.time()
try:
    while s.recv(4096):
        pass
except OSError:
    pass
print("%.1f" % (time.time() - t0))
PY
cat >"$TMP/scrape.py" <<'PY'
import sys, urllib.request
with urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=5) as r:
    print(r.status)
PY

cat >"$TMP/distird-1024" <<SH
#!/bin/sh
exec prlimit --nofile=1024 "$ROOT/$DISTIRD" "\$@"
SH
chmod +x "$TMP/distird-1024"
REAL=$DISTIRD
DISTIRD=$TMP/distird-1024
start_daemon fds --metrics-listen 127.0.0.1:0 --max-idle-s 2 || { fail "daemon start"; finish; }
DISTIRD=$REAL
METRICS=$(sed -n 's/^distird metrics on //p' "$TMP/fds.out")

set -- $(/usr/bin/python3 "$TMP/hold.py" "$ADDR" 1100)
check "1,100 connections made with 1,024 descriptors ($2 closed at once by distird)" \
    [ "$1" = 1100 ] && [ "$2" -ge 76 ]
check "the log says why" grep -q "event=connection_refused reason=descriptors" "$TMP/fds.log"
t0=$(date +%s%N)
$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/after.json"
ms=$((($(date +%s%N) - t0) / 1000000))
check "after the release a new client is answered within 1 s (${ms} ms)" \
    grep -q '"step_time_s"' "$TMP/after.json" && [ "$ms" -lt 1000 ]
check "metrics still answer" [ "$(/usr/bin/python3 "$TMP/scrape.py" "$METRICS")" = 200 ]

s=$(/usr/bin/python3 "$TMP/idle.py" "$ADDR")
check "an idle gRPC connection is closed after --max-idle-s 2 (${s} s)" \
    /usr/bin/python3 -c "import sys; sys.exit(not 1.5 <= $s <= 6)"
s=$(/usr/bin/python3 "$TMP/idle.py" "$METRICS")
check "a silent metrics connection is closed after 5 s (${s} s)" \
    /usr/bin/python3 -c "import sys; sys.exit(not 4.5 <= $s <= 8)"
set -- $(/usr/bin/python3 "$TMP/hold.py" "$METRICS" 40)
check "the metrics port holds at most 32 connections ($2 of 40 closed at once)" [ "$2" -ge 8 ]
check "metrics answer once they are gone" [ "$(/usr/bin/python3 "$TMP/scrape.py" "$METRICS")" = 200 ]
stop_daemon
check "distird exits 0" [ $? -eq 0 ]
finish
