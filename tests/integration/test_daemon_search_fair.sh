#!/bin/sh
# test_daemon_search_fair.sh: concurrent searches share the daemon's workers
# (each work job runs a 20 ms slice, then queues behind other work). With one
# worker and every candidate slowed to 5 ms (--test-delay-ms), a long search
# (288 candidates, about 1.4 s) starts first and a short one (64, about
# 0.3 s) 0.2 s later: the short one finishes first. First come, first served,
# it would wait for the long one. Both answers equal the in-process ones.
. tests/integration/lib.sh

T="timeout 120"
$T "$DISTIR" model gpt --layers 4 --hidden 48 --heads 6 --seq 8 --vocab 13 --batch 24 \
    -o "$TMP/gpt.pb" || fail "model gpt"
LONG="--devices 2"
SHORT="--devices 8 --recompute none --zero 0 --microbatches 1"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LONG --json >"$TMP/long.local" || fail "local long"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $SHORT --json >"$TMP/short.local" || fail "local short"

start_daemon fair --workers 1 --test-delay-ms 5 || { fail "daemon start"; finish; }
(
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $LONG --json --server "$ADDR" >"$TMP/long.json"
    date +%s%N >"$TMP/long.end"
) &
long=$!
sleep 0.2
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $SHORT --json --server "$ADDR" >"$TMP/short.json"
date +%s%N >"$TMP/short.end"
wait $long
check "both searches answered" [ -s "$TMP/long.json" ] && [ -s "$TMP/short.json" ]
gap=$((($(cat "$TMP/long.end") - $(cat "$TMP/short.end")) / 1000000))
check "the short search, started second, finished first (${gap} ms before the long one)" \
    [ "$gap" -gt 0 ]
check "the long search's answer equals the in-process one" cmp -s "$TMP/long.json" "$TMP/long.local"
check "the short search's answer equals the in-process one" cmp -s "$TMP/short.json" "$TMP/short.local"
stop_daemon
finish
