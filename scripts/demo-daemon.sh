#!/bin/sh
# demo-daemon.sh [BUILD_DIR]: the daemon end to end. Starts distird on an
# ephemeral port with a temporary database, simulates a bundled model twice
# through the CLI (the second answer comes from the cache and says so),
# prints both results, searches the strategies of a small GPT on the daemon's
# workers (the best on 8 GPUs, then the fewest of 1, 2, 4, 8 GPUs reaching a
# step time, with the cost and time to train), sets a CI baseline and compares a deeper model with it (a
# regression, exit 1), prints `distir info`, then stops the daemon with SIGTERM
# and checks that it exited 0 and left an intact database. Exits non-zero if
# any step fails.
B=${1:-${DISTIR_BUILD:-build/release}}
DISTIRD=$B/distird
DISTIR=$B/distir
TMP=$(mktemp -d /tmp/distir-demo.XXXXXX)
PID=
cleanup() {
    [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
die() {
    echo "demo: $*" >&2
    [ -s "$TMP/distird.log" ] && tail -n 20 "$TMP/distird.log" >&2
    exit 1
}

# The model: a generated GPT-3 125M training step if this build has the
# model generator, otherwise the MLP bundled with the tests.
MODEL=$TMP/gpt3-125m.dir
if "$DISTIR" model gpt --preset gpt3-125m -o "$MODEL" 2>/dev/null &&
    "$DISTIR" verify "$MODEL" >/dev/null 2>&1; then
    echo "model: GPT-3 125M training step (distir model gpt --preset gpt3-125m)"
else
    MODEL=tests/ir/seed001_mlp.dir
    echo "model: $MODEL (two-layer MLP, forward and backward)"
fi

echo "\$ distird --listen 127.0.0.1:0 --db $TMP/demo.db"
"$DISTIRD" --listen 127.0.0.1:0 --db "$TMP/demo.db" --log-file "$TMP/distird.log" \
    >"$TMP/distird.out" 2>&1 &
PID=$!
ADDR=
i=0
while [ -z "$ADDR" ] && [ $i -lt 200 ]; do
    ADDR=$(sed -n 's/^distird listening on //p' "$TMP/distird.out" 2>/dev/null)
    kill -0 "$PID" 2>/dev/null || die "distird did not start"
    [ -z "$ADDR" ] && sleep 0.05
    i=$((i + 1))
done
[ -n "$ADDR" ] || die "distird did not print its address"
cat "$TMP/distird.out"

for n in 1 2; do
    echo
    echo "\$ distir simulate $(basename "$MODEL") --hw a100-dgx --server $ADDR    # call $n"
    "$DISTIR" simulate "$MODEL" --hw a100-dgx --server "$ADDR" >"$TMP/call$n.txt" ||
        die "simulate call $n failed"
    cat "$TMP/call$n.txt"
done
grep -q '^cache  *miss' "$TMP/call1.txt" || die "the first call should be a cache miss"
grep -q '^cache  *hit' "$TMP/call2.txt" || die "the second call should be a cache hit"
sed 1d "$TMP/call1.txt" >"$TMP/r1"
sed 1d "$TMP/call2.txt" >"$TMP/r2"
cmp -s "$TMP/r1" "$TMP/r2" || die "the cached result differs from the computed one"
echo
echo "the second answer came from the cache and is identical to the first"

echo
"$DISTIR" model gpt --preset gpt3-125m --batch 16 --dtype bf16 -o "$TMP/g125.pb" || die "model failed"
echo "\$ distir search g125.pb --hw a100-dgx --top 3 --server $ADDR    # GPT-3 125M, every strategy on 8 GPUs"
"$DISTIR" search "$TMP/g125.pb" --hw a100-dgx --top 3 --server "$ADDR" || die "search failed"
echo
echo "\$ distir search g125.pb --hw a100-dgx --devices 1,2,4,8 --objective devices --target-step 0.15 \\"
echo "      --price 2 --train-tokens 3e9 --top 3 --server $ADDR    # the fewest GPUs for 150 ms a step"
"$DISTIR" search "$TMP/g125.pb" --hw a100-dgx --devices 1,2,4,8 --objective devices \
    --target-step 0.15 --price 2 --train-tokens 3e9 --top 3 --server "$ADDR" ||
    die "search (devices objective) failed"

echo
echo "# CI: the step as a baseline, then a change with two more layers compared with it"
"$DISTIR" model gpt --preset gpt3-125m --batch 16 --dtype bf16 --layers 14 -o "$TMP/g125-14.pb" ||
    die "model failed"
echo "\$ distir baseline set train-step g125.pb --hw a100-dgx --dp 8 --label v1 --server $ADDR"
"$DISTIR" baseline set train-step "$TMP/g125.pb" --hw a100-dgx --dp 8 --label v1 --server "$ADDR" ||
    die "baseline set failed"
echo "\$ distir compare g125-14.pb --baseline train-step --hw a100-dgx --dp 8 --max-time-regression 2% --server $ADDR"
"$DISTIR" compare "$TMP/g125-14.pb" --baseline train-step --hw a100-dgx --dp 8 \
    --max-time-regression 2% --server "$ADDR"
[ $? -eq 1 ] || die "two more layers should regress the step time (exit 1)"
echo "(exit 1: the CI job fails and says why)"

echo
echo "\$ distir info --server $ADDR"
"$DISTIR" info --server "$ADDR" || die "info failed"

echo
echo "\$ kill -TERM $PID"
kill -TERM "$PID"
wait "$PID"
rc=$?
PID=
grep -E 'event=(signal|shutdown|drained|stopped)' "$TMP/distird.log" | sed 's/^/  /'
[ $rc -eq 0 ] || die "distird exited with status $rc"
echo "distird exited with status 0"
check=$(sqlite3 "$TMP/demo.db" 'PRAGMA integrity_check')
echo "sqlite3 demo.db 'PRAGMA integrity_check': $check"
[ "$check" = ok ] || die "the database is damaged"
