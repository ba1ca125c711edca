#!/bin/sh
# test_daemon_limits.sh: a request whose simulation would take more memory
# than the daemon can give one job is refused at once, before any work,
# with RESOURCE_EXHAUSTED and the estimate: the 135 KB request for gpt3-125m
# with 65,536 microbatches (about 14 GiB if run). distird under
# `prlimit --as` of 2 GiB derives its per-job budget from that limit and
# serves 8 concurrent clients sending such requests (and 4 with requests
# that fit) without dying;
# --max-job-mb sets the budget explicitly.
. tests/integration/lib.sh

T="timeout 120"
$T "$DISTIR" model gpt --preset gpt3-125m --batch 65536 -o "$TMP/big.pb" >/dev/null ||
    fail "generate the big model"
$T "$DISTIR" model gpt --preset gpt3-125m --batch 4096 -o "$TMP/fit.pb" >/dev/null ||
    fail "generate the model that fits"
size=$(stat -c %s "$TMP/big.pb")
check "the big request's module is small ($size bytes)" [ "$size" -lt 200000 ]

# start_daemon runs "$DISTIRD": run it under prlimit through a wrapper.
cat >"$TMP/distird-2g" <<SH
#!/bin/sh
exec prlimit --as=2147483648 "$ROOT/$DISTIRD" "\$@"
SH
chmod +x "$TMP/distird-2g"
case "$B" in
*asan*)
    # AddressSanitizer reserves terabytes of address space: no RLIMIT_AS
    # there. The same budget, given explicitly.
    echo "# sanitizer build: --max-job-mb 355 instead of prlimit --as 2 GiB"
    start_daemon limited --workers 2 --max-job-mb 355 || { fail "daemon start"; finish; }
    ;;
*)
    REAL=$DISTIRD
    DISTIRD=$TMP/distird-2g
    start_daemon limited --workers 2 || { fail "daemon start under prlimit --as 2 GiB"; finish; }
    DISTIRD=$REAL
    ;;
esac
budget=$(sed -n 's/.*job_budget_mb=\([0-9]*\).*/\1/p' "$TMP/limited.log" | head -n 1)
check "the per-job budget comes from RLIMIT_AS (${budget} MiB, under 1 GiB)" \
    [ -n "$budget" ] && [ "$budget" -gt 16 ] && [ "$budget" -lt 1024 ]

start=$(date +%s)
clients=
for i in 1 2 3 4 5 6 7 8; do
    $T "$DISTIR" simulate "$TMP/big.pb" --hw a100-dgx:2 --pp 2 --microbatches 65536 \
        --server "$ADDR" >"$TMP/big$i.out" 2>"$TMP/big$i.err" &
    clients="$clients $!"
done
for i in 1 2 3 4; do
    $T "$DISTIR" simulate "$TMP/fit.pb" --hw "a100-dgx:$((2 * i))" --pp 2 --microbatches 512 \
        --server "$ADDR" --json >"$TMP/fit$i.json" 2>"$TMP/fit$i.err" &
    clients="$clients $!"
done
for p in $clients; do wait "$p"; done
took=$(($(date +%s) - start))
refused=0
for i in 1 2 3 4 5 6 7 8; do
    grep -q "RESOURCE_EXHAUSTED: this strategy would simulate about .* op instances (65536 microbatches x 875 ops), an estimated [0-9.]* MiB" "$TMP/big$i.err" &&
        refused=$((refused + 1))
done
check "8 clients sending the big request: each refused with the estimate ($refused of 8)" \
    [ $refused -eq 8 ]
answered=0
for i in 1 2 3 4; do grep -q '"step_time_s"' "$TMP/fit$i.json" && answered=$((answered + 1)); done
check "meanwhile 4 requests that fit are answered ($answered of 4)" [ $answered -eq 4 ]
check "all 12 answered within 60 s (${took} s)" [ "$took" -lt 60 ]
check "the daemon is alive" kill -0 "$PID"
$T "$DISTIR" simulate "$TMP/fit.pb" --hw a100-dgx:2 --pp 2 --microbatches 512 \
    --server "$ADDR" --json >"$TMP/again.json"
check "it still answers (a hit)" grep -q '^{"cache":"hit"' "$TMP/again.json"
stop_daemon
check "the daemon under prlimit exits 0" [ $? -eq 0 ]

# An explicit budget: the model that fits above is now too big; a small one is not.
start_daemon explicit --max-job-mb 64 || { fail "daemon start (--max-job-mb)"; finish; }
check "the log shows the explicit budget" grep -q "job_budget_mb=64 " "$TMP/explicit.log"
$T "$DISTIR" simulate "$TMP/fit.pb" --hw a100-dgx:2 --pp 2 --microbatches 512 \
    --server "$ADDR" 2>"$TMP/explicit.err" >/dev/null
check "--max-job-mb 64 refuses 512 microbatches" grep -q "may take 64.0 MiB" "$TMP/explicit.err"
$T "$DISTIR" simulate "$TMP/fit.pb" --hw a100-dgx:2 --pp 2 --microbatches 8 \
    --server "$ADDR" --json >"$TMP/small.json"
check "--max-job-mb 64 answers 8 microbatches" grep -q '"step_time_s"' "$TMP/small.json"
stop_daemon
finish
