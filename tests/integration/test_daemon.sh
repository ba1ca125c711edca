#!/bin/sh
# test_daemon.sh: distird through the C client (distir simulate --server,
# distir info). Checks: a remote simulation equals the in-process one bit for
# bit (JSON without the cache fields); the second identical call is a cache
# hit with the same key; the cache survives a restart; requests decoded on a
# worker (--inline-decode-kb 0) give the same answers; a module over
# --max-ops is RESOURCE_EXHAUSTED; a 50 ms deadline on a slow job ends
# DEADLINE_EXCEEDED and the worker stops early; SIGTERM with a call in
# flight lets it finish, exits 0 and leaves the database intact; SIGHUP
# reopens the log file.
. tests/integration/lib.sh

MLP=tests/ir/seed001_mlp.dir
MLP_DP=tests/ir/seed001_mlp_dp.dir
T="timeout 60"

$T "$DISTIR" simulate $MLP --hw a100-dgx --json >"$TMP/inproc.json" || fail "in-process simulate"
$T "$DISTIR" simulate $MLP_DP --hw a100-dgx:2 --json >"$TMP/inproc_dp.json" ||
    fail "in-process simulate (dp)"

start_daemon main || { fail "daemon start"; finish; }
echo "# daemon at $ADDR"

$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/r1.json"
check "remote simulate succeeds" [ $? -eq 0 ]
check "first call is a cache miss" grep -q '^{"cache":"miss","cache_key":"[0-9a-f]\{64\}"' "$TMP/r1.json"
strip_cache "$TMP/r1.json" >"$TMP/r1.stripped"
check "remote result equals the in-process result bit for bit" cmp -s "$TMP/r1.stripped" "$TMP/inproc.json"

$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/r2.json"
check "second call is a cache hit" grep -q '^{"cache":"hit"' "$TMP/r2.json"
key1=$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/r1.json")
key2=$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/r2.json")
check "hit and miss share the cache key" test -n "$key1" -a "$key1" = "$key2"
strip_cache "$TMP/r2.json" >"$TMP/r2.stripped"
check "cache hit equals the in-process result bit for bit" cmp -s "$TMP/r2.stripped" "$TMP/inproc.json"

$T "$DISTIR" simulate $MLP_DP --hw a100-dgx:2 --server "$ADDR" --json >"$TMP/dp.json"
strip_cache "$TMP/dp.json" >"$TMP/dp.stripped"
check "a second model (two devices) round-trips bit for bit" cmp -s "$TMP/dp.stripped" "$TMP/inproc_dp.json"
check "other hardware is another key" [ "$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/dp.json")" != "$key1" ]

$T "$DISTIR" info --server "$ADDR" --json >"$TMP/info.json"
check "info reports 2 cache entries" grep -q '"cache_entries":2' "$TMP/info.json"
check "info reports 1 hit and 2 misses" grep -q '"cache_hits":1,"cache_misses":2' "$TMP/info.json"
$T "$DISTIR" info --server "$ADDR" >"$TMP/info.txt"
check "info prints the simulator version" grep -q '^simulator_version  distir-sim-' "$TMP/info.txt"

# Nested parallelism (per-stage degrees, tensor parallelism on some layers) through the daemon.
"$DISTIR" model gpt --layers 4 --hidden 64 --heads 4 --seq 8 --vocab 32 --batch 8 -o "$TMP/gpt.pb" ||
    fail "model gpt"
NEST="--stages 2x1,1x2 --microbatches 2 --tp-layers 2-3"
$T "$DISTIR" simulate "$TMP/gpt.pb" --hw a100-dgx $NEST --json >"$TMP/nest.inproc" ||
    fail "in-process nested simulate"
$T "$DISTIR" simulate "$TMP/gpt.pb" --hw a100-dgx $NEST --server "$ADDR" --json >"$TMP/nest.json"
check "a nested strategy runs remotely" [ $? -eq 0 ]
strip_cache "$TMP/nest.json" >"$TMP/nest.stripped"
check "the nested result equals the in-process one bit for bit" cmp -s "$TMP/nest.stripped" "$TMP/nest.inproc"
check "the nested strategy uses 2 + 2 devices" [ "$(grep -o '"id":[0-9]*' "$TMP/nest.inproc" | sort -u | wc -l)" -eq 4 ]
$T "$DISTIR" simulate "$TMP/gpt.pb" --hw a100-dgx --stages 3x1,1x2 --server "$ADDR" >"$TMP/nest.out" 2>"$TMP/nest.err"
check "an impossible stage is INVALID_ARGUMENT naming the stage" grep -q "stage 0: dp=3 does not divide the batch 8" "$TMP/nest.err"

# SIGHUP reopens the log (logrotate moves the file away first).
mv "$TMP/main.log" "$TMP/main.log.1"
kill -HUP "$PID"
$T "$DISTIR" info --server "$ADDR" >/dev/null
i=0
while [ ! -s "$TMP/main.log" ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i + 1)); done
check "SIGHUP reopens the log file" grep -q 'event=log_reopened' "$TMP/main.log"
check "SIGHUP does not stop the daemon" kill -0 "$PID"

stop_daemon
check "SIGTERM: distird exits 0" [ $? -eq 0 ]
check "database integrity_check is ok" integrity_ok "$TMP/main.db"
check "no WAL left after a clean close" [ ! -s "$TMP/main.db-wal" ]

# Restart on the same database: the cache survived.
start_daemon main || { fail "daemon restart"; finish; }
$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/r3.json"
check "after a restart the call is a cache hit" grep -q "^{\"cache\":\"hit\",\"cache_key\":\"$key1\"" "$TMP/r3.json"
strip_cache "$TMP/r3.json" >"$TMP/r3.stripped"
check "restored result equals the in-process result" cmp -s "$TMP/r3.stripped" "$TMP/inproc.json"
stop_daemon
check "second run exits 0" [ $? -eq 0 ]

# Every request decoded on a worker: hits through the worker's own connection.
start_daemon main --inline-decode-kb 0 --metrics-listen 127.0.0.1:0 ||
    { fail "daemon start (worker decode)"; finish; }
$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/w1.json"
check "worker-decoded request hits the cache" grep -q "^{\"cache\":\"hit\",\"cache_key\":\"$key1\"" "$TMP/w1.json"
$T "$DISTIR" simulate $MLP --hw h100-dgx --server "$ADDR" --json >"$TMP/w2.json"
check "worker-decoded new request is a miss" grep -q '^{"cache":"miss"' "$TMP/w2.json"
$T "$DISTIR" simulate $MLP --hw h100-dgx --json >"$TMP/w2.inproc"
strip_cache "$TMP/w2.json" >"$TMP/w2.stripped"
check "worker-decoded result equals the in-process result" cmp -s "$TMP/w2.stripped" "$TMP/w2.inproc"
# A large request seen before is answered from the memo: its digest is computed on a worker
# and the cached reply sent without decoding it.
$T "$DISTIR" simulate $MLP --hw h100-dgx --server "$ADDR" --json >"$TMP/w3.json"
check "worker-decoded repeat is a hit" grep -q '^{"cache":"hit"' "$TMP/w3.json"
strip_cache "$TMP/w3.json" >"$TMP/w3.stripped"
check "... equal to the in-process result" cmp -s "$TMP/w3.stripped" "$TMP/w2.inproc"
metric() {
    /usr/bin/python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=5).read().decode().splitlines():
    if l.startswith(sys.argv[2] + " "): print(int(float(l.split()[-1])))' "$1" "$2"
}
M=$(sed -n 's/^distird metrics on //p' "$TMP/main.out")
check "... answered by the memo without a decode (memo hits: $(metric "$M" distird_cache_memo_hits_total))" \
    [ "$(metric "$M" distird_cache_memo_hits_total)" = 1 ]
stop_daemon
check "worker-decode run exits 0" [ $? -eq 0 ]

# Limits: a module over --max-ops.
start_daemon small --max-ops 3 || { fail "daemon start (max-ops)"; finish; }
$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/big.json" 2>"$TMP/big.err"
rc=$?
check "over-limit module fails (exit 1)" [ $rc -eq 1 ]
check "over-limit module is RESOURCE_EXHAUSTED with a message" grep -q 'RESOURCE_EXHAUSTED: module: .*ops' "$TMP/big.err"
stop_daemon
check "max-ops daemon exits 0" [ $? -eq 0 ]

# Deadlines: every job first sleeps 5 s (polling its cancel flag).
start_daemon slow --test-delay-ms 5000 || { fail "daemon start (slow)"; finish; }
t0=$(date +%s%N)
$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --timeout-ms 50 >"$TMP/dl.out" 2>"$TMP/dl.err"
rc=$?
t1=$(date +%s%N)
check "50 ms deadline: the call fails" [ $rc -eq 1 ]
check "50 ms deadline: status DEADLINE_EXCEEDED" grep -q 'DEADLINE_EXCEEDED' "$TMP/dl.err"
check "50 ms deadline: the client returns within 2 s" [ $(((t1 - t0) / 1000000)) -lt 2000 ]
# The worker's job_cancelled and the call's call_cancelled come from different threads,
# in either order: wait for both (at most 10 s).
wait_log "$TMP/slow.log" 10 'event=job_cancelled' 'event=call_cancelled method=Simulate'
check "the worker job was cancelled" grep -q 'event=job_cancelled' "$TMP/slow.log"
ms=$(sed -n 's/.*event=job_cancelled .*run_ms=\([0-9]*\).*/\1/p' "$TMP/slow.log" | head -n 1)
check "the worker stopped long before its 5 s delay (ran ${ms:-?} ms)" test "${ms:-99999}" -lt 1500
# gRPC carries the deadline as a timeout relative to the request's arrival, so on
# a loaded machine the client may give up (a cancel) just before the daemon's own
# copy of the deadline passes: either reason is right there.
check "the cancelled call was logged (deadline or cancel)" grep -Eq 'event=call_cancelled method=Simulate reason=(deadline|cancelled)' "$TMP/slow.log"
# With a strategy the job owns its transformed module when the cancel comes (the delay
# runs between the transform and the simulation); the worker frees it after the answer
# (srv_worker_after). Under `make asan` a module left behind is a leak at exit, which
# fails the exit check below.
$T "$DISTIR" simulate $MLP --hw a100-dgx --dp 2 --server "$ADDR" --timeout-ms 50 >"$TMP/dl2.out" 2>"$TMP/dl2.err"
check "50 ms deadline with a strategy: the call fails" [ $? -eq 1 ]
for _ in $(seq 200); do
    [ "$(grep -c 'event=job_cancelled' "$TMP/slow.log")" -ge 2 ] && break
    sleep 0.05
done
check "the second worker job was cancelled" [ "$(grep -c 'event=job_cancelled' "$TMP/slow.log")" -ge 2 ]
stop_daemon
check "slow daemon exits 0" [ $? -eq 0 ]

# SIGTERM while a call is in flight: it drains, then exits 0.
start_daemon drain --test-delay-ms 700 || { fail "daemon start (drain)"; finish; }
$T "$DISTIR" simulate $MLP --hw a100-dgx --server "$ADDR" --json >"$TMP/d.json" 2>"$TMP/d.err" &
cpid=$!
sleep 0.3
stop_daemon
rc=$?
wait $cpid
crc=$?
check "SIGTERM with a call in flight: distird exits 0" [ $rc -eq 0 ]
check "the in-flight call exits 0" [ $crc -eq 0 ]
check "the in-flight call still got its result" grep -q '^{"cache":"miss"' "$TMP/d.json"
check "the drained result was stored" [ "$(sqlite3 "$TMP/drain.db" 'SELECT count(*) FROM results')" = 1 ]
check "database intact after the drain" integrity_ok "$TMP/drain.db"
check "log shows the shutdown sequence" grep -q 'event=drained' "$TMP/drain.log"

# A killed daemon (SIGKILL, no clean close) loses nothing it answered: the
# WAL is recovered on the next start and the result is a hit.
start_daemon killed || { fail "daemon start (killed)"; finish; }
$T "$DISTIR" simulate $MLP --hw v100-dgx1 --server "$ADDR" --json >"$TMP/k1.json"
check "before the kill: a miss" grep -q '^{"cache":"miss"' "$TMP/k1.json"
kill -KILL "$PID"
wait "$PID" 2>/dev/null
PID=
check "after SIGKILL the database is intact" integrity_ok "$TMP/killed.db"
start_daemon killed || { fail "daemon restart (killed)"; finish; }
$T "$DISTIR" simulate $MLP --hw v100-dgx1 --server "$ADDR" --json >"$TMP/k2.json"
check "after SIGKILL and a restart the answered result is a hit" \
    grep -q '^{"cache":"hit"' "$TMP/k2.json"
strip_cache "$TMP/k1.json" >"$TMP/k1.stripped"
strip_cache "$TMP/k2.json" >"$TMP/k2.stripped"
check "... and equals the result answered before the kill" cmp -s "$TMP/k1.stripped" "$TMP/k2.stripped"
stop_daemon
check "restarted daemon exits 0" [ $? -eq 0 ]

# A capped cache (--max-db-kb; SQLite reports "database or disk is full" at
# the cap, as on a full disk): every call is answered, the newest results
# are stored by evicting the least recently used, the file stays under the
# cap and intact.
start_daemon full --max-db-kb 64 || { fail "daemon start (full)"; finish; }
answered=0
for n in $(seq 1 30); do
    $T "$DISTIR" simulate $MLP --hw "a100-dgx:$n" --server "$ADDR" --json >"$TMP/f$n.json" &&
        answered=$((answered + 1))
done
check "with a capped cache every call is answered (30 of 30)" [ $answered -eq 30 ]
$T "$DISTIR" simulate $MLP --hw a100-dgx:30 --json >"$TMP/f30.inproc"
strip_cache "$TMP/f30.json" >"$TMP/f30.stripped"
check "the last result equals the in-process result" cmp -s "$TMP/f30.stripped" "$TMP/f30.inproc"
$T "$DISTIR" simulate $MLP --hw a100-dgx:30 --server "$ADDR" --json >"$TMP/f30b.json"
check "the newest result is stored (a hit)" grep -q '^{"cache":"hit"' "$TMP/f30b.json"
stop_daemon
check "the daemon with a capped cache exits 0" [ $? -eq 0 ]
rows=$(sqlite3 "$TMP/full.db" 'SELECT count(*) FROM results')
check "older results were evicted to make room ($rows of 30 kept)" [ "$rows" -gt 0 -a "$rows" -lt 30 ]
check "the capped database stays under its cap" [ "$(stat -c %s "$TMP/full.db")" -le 65536 ]
check "the capped database is intact" integrity_ok "$TMP/full.db"

finish
