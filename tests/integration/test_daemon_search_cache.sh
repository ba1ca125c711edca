#!/bin/sh
# test_daemon_search_cache.sh: searches stored in the daemon's cache
# (docs/daemon.md "Search"). Checks: a search asked twice is computed once
# (the log's search_started) and answered the second time from the cache
# (search_cache_hit, search_end cached=1, "cache hit" on the table's first
# line) with the JSON byte for byte the same as the first answer and the
# in-process search; another K, constraint or shard is a miss, and a
# repeated shard is a hit with that shard's JSON; a restart on the same
# database still hits; a stored row that does not decode is a miss whose
# search is then stored again; a search past its deadline is not stored.
# The timing of the miss and the hit is printed, not asserted.
. tests/integration/lib.sh

T="timeout 60"
$T "$DISTIR" model gpt --layers 4 --hidden 48 --heads 6 --seq 8 --vocab 13 --batch 24 \
    -o "$TMP/gpt.pb" || fail "model gpt"
LIMITS="--devices 8 --recompute none,full --zero 0,3 --microbatches 1,2,4 --top 3"

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json >"$TMP/local.json" || fail "local search"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --shard 1/4 >"$TMP/local_shard1.json" ||
    fail "local shard"

# count NAME EVENT: lines of event EVENT in $TMP/NAME.log.
count() { grep -c "event=$2 " "$TMP/$1.log"; }
now_ms() { date +%s%N | cut -c1-13; }

# Every candidate waits 1 ms, so that a computed search takes measurably longer than a hit.
start_daemon store --workers 2 --test-delay-ms 1 || { fail "daemon start"; finish; }
t0=$(now_ms)
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" >"$TMP/first.json"
check "the first search exits 0" [ $? -eq 0 ]
t1=$(now_ms)
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" >"$TMP/second.json"
check "the second search exits 0" [ $? -eq 0 ]
t2=$(now_ms)
echo "# computed in $((t1 - t0)) ms, answered from the cache in $((t2 - t1)) ms"
check "the first search is computed" [ "$(count store search_started)" -eq 1 ]
check "the second is a cache hit" [ "$(count store search_cache_hit)" -eq 1 ]
check "... logged as cached at its end" grep -q 'event=search_end .* cached=1' "$TMP/store.log"
check "... with the first answer's JSON byte for byte" cmp -s "$TMP/first.json" "$TMP/second.json"
check "... which is the in-process search's" cmp -s "$TMP/local.json" "$TMP/second.json"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --server "$ADDR" >"$TMP/table.out"
check "the table's first line says cache hit" sh -c 'head -n 1 "$1" | grep -q "^space: .*, cache hit)$"' \
    sh "$TMP/table.out"
check "the table form works from the cache" grep -q '^top 3 by step time on 8 devices' "$TMP/table.out"

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --top 2 --json --server "$ADDR" >/dev/null ||
    fail "search with another K"
check "another K is a miss" [ "$(count store search_started)" -eq 2 ]
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --tp 1,2 --json --server "$ADDR" >/dev/null ||
    fail "search with another constraint"
check "another constraint is a miss" [ "$(count store search_started)" -eq 3 ]
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --shard 1/4 --server "$ADDR" \
    >"$TMP/shard1_first.json" || fail "shard search"
check "a shard of a stored search is a miss" [ "$(count store search_started)" -eq 4 ]
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --shard 1/4 --server "$ADDR" \
    >"$TMP/shard1_second.json" || fail "shard search again"
check "the same shard again is a hit" [ "$(count store search_cache_hit)" -eq 3 ]
check "... with the shard's JSON" cmp -s "$TMP/local_shard1.json" "$TMP/shard1_second.json"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --shard 2/4 --server "$ADDR" >/dev/null ||
    fail "another shard"
check "another shard is a miss" [ "$(count store search_started)" -eq 5 ]
stop_daemon
check "distird exits 0" [ $? -eq 0 ]
check "the database holds the five computed searches" \
    [ "$(sqlite3 "$TMP/store.db" 'SELECT count(*) FROM searches')" -eq 5 ]
check "... and counts the hits" \
    [ "$(sqlite3 "$TMP/store.db" 'SELECT sum(hits) FROM searches')" -eq 3 ]

# The same database after a restart.
mv "$TMP/store.log" "$TMP/store.before.log"
start_daemon store --workers 2 || { fail "daemon restart"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" >"$TMP/restart.json"
check "after a restart the search still hits" [ "$(count store search_cache_hit)" -eq 1 ]
check "... with the same JSON" cmp -s "$TMP/local.json" "$TMP/restart.json"
stop_daemon
check "distird exits 0 after the restart" [ $? -eq 0 ]

# A stored row that does not decode is a miss; the recomputed search replaces it.
sqlite3 "$TMP/store.db" "UPDATE searches SET result = x'0aff01'" || fail "corrupting the rows"
mv "$TMP/store.log" "$TMP/store.before2.log"
start_daemon store --workers 2 || { fail "daemon restart (corrupt)"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" >"$TMP/corrupt.json"
check "a row that does not decode is a miss" [ "$(count store search_started)" -eq 1 ]
check "... answered correctly" cmp -s "$TMP/local.json" "$TMP/corrupt.json"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" >"$TMP/recovered.json"
check "... and stored again: the next one hits" [ "$(count store search_cache_hit)" -eq 1 ]
check "... with the same JSON" cmp -s "$TMP/local.json" "$TMP/recovered.json"
stop_daemon
check "distird exits 0 after the corrupt row" [ $? -eq 0 ]

# A search past its deadline is not stored.
start_daemon slow --workers 2 --test-delay-ms 20 || { fail "daemon start (slow)"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" --timeout-ms 300 >/dev/null \
    2>"$TMP/deadline.err"
check "a search past its deadline fails" grep -q 'DEADLINE_EXCEEDED' "$TMP/deadline.err"
i=0
while ! grep -q 'event=search_end' "$TMP/slow.log" && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
stop_daemon
check "slow daemon exits 0" [ $? -eq 0 ]
check "the cancelled search is not stored" \
    [ "$(sqlite3 "$TMP/slow.db" 'SELECT count(*) FROM searches')" -eq 0 ]

finish
