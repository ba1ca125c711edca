#!/bin/sh
# test_daemon_search.sh: the Search RPC through the C client (distir search
# --server). Checks: the daemon's JSON equals the in-process search byte for
# byte with 1 and with 2 workers, also for a throughput objective with
# constraints (a Pareto set within 1.5x the fastest step among them) and for the four shards of --shard i/4 (whose merge is the
# whole); the tables print; a space above --max-search-candidates is
# RESOURCE_EXHAUSTED and a bad request INVALID_ARGUMENT; a search whose
# deadline passes ends DEADLINE_EXCEEDED, its workers stop early (the log's
# search_end has done < total) and the daemon then answers the next search;
# SIGTERM during a search cancels it after the grace period (the workers
# stop early, the client's call fails) and distird exits 0. A later search of the same
# module and hardware takes the figures an earlier one simulated (also after a restart,
# and after a SIGKILL what the killed search stored as it went) and answers as the
# in-process search.
. tests/integration/lib.sh

T="timeout 60"
$T "$DISTIR" model gpt --layers 4 --hidden 48 --heads 6 --seq 8 --vocab 13 --batch 24 \
    -o "$TMP/gpt.pb" || fail "model gpt"
LIMITS="--devices 8 --recompute none,full --zero 0,3 --microbatches 1,2,4 --top 3"
OTHER="--devices 4 --objective throughput --tp 1,2 --schedule 1f1b,interleaved:2 --headroom 0.5 --top 2
    --pareto-within 1.5 --refine all"

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --log-candidates "$TMP/local.log" \
    >"$TMP/local.json" || fail "local search"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $OTHER --json >"$TMP/local_other.json" || fail "local search 2"
for i in 0 1 2 3; do
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --shard "$i/4" >"$TMP/local_shard$i.json" ||
        fail "local shard $i"
done

# Two nodes: the rank order is an axis (SearchConstraints.orders; docs/search.md).
ORDER="--hw a100-dgx:2 --devices 16 --tp 1,2 --pp 2 --recompute none --zero 0 --microbatches 2,4
    --order tp-pp-dp --top 3"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $ORDER --json >"$TMP/local_order.json" || fail "local search 3"
# Nested pipelines (SearchConstraints.nested): stages of their own degrees.
NESTED="--devices 6 --nested --pp 2 --recompute none --zero 0 --microbatches 1,2 --top 3"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $NESTED --json >"$TMP/local_nested.json" || fail "local search 4"
check "--nested: the answer holds nested points" grep -q '"stages":\[\[' "$TMP/local_nested.json"
check "--order tp-pp-dp: its points say so" grep -q '"order":"tp-pp-dp"' "$TMP/local_order.json"
check "--order tp-pp-dp: no point in the default order where it matters" \
    /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
pts = r["top"] + r["pareto"]
assert pts and all(p.get("order") == "tp-pp-dp" for p in pts if p["dp"] > 1 and p["tp"] < 8), pts
' "$TMP/local_order.json"
check "--pareto-within reaches the result" grep -q '"pareto_within":1.5' "$TMP/local_other.json"
check "--refine all reaches the result" grep -q '"refine":"all"' "$TMP/local_other.json"

for w in 1 2; do
    start_daemon "w$w" --workers "$w" || { fail "daemon start ($w workers)"; continue; }
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --server "$ADDR" \
        --log-candidates "$TMP/remote$w.log" >"$TMP/remote$w.json"
    check "$w worker(s): remote search exits 0" [ $? -eq 0 ]
    check "$w worker(s): the daemon's JSON equals the local JSON byte for byte" \
        cmp -s "$TMP/local.json" "$TMP/remote$w.json"
    check "$w worker(s): --log-candidates: the daemon's log has the in-process log's lines" \
        /usr/bin/python3 -c '
import json, sys
def lines(path):
    ls = [json.loads(l) for l in open(path)]
    cand = sorted(tuple(sorted((k, v) for k, v in l.items() if k not in ("eval_s", "worker")))
                  for l in ls if "status" in l)
    return cand, [l for l in ls if "refine_s" in l]
local, _ = lines(sys.argv[1])
remote, refines = lines(sys.argv[2])
assert local == remote and len(local) > 0, (len(local), len(remote))
assert sorted(r["worker"] for r in refines) == list(range(int(sys.argv[3]))), refines
' "$TMP/local.log" "$TMP/remote$w.log" "$w"
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $OTHER --json --server "$ADDR" >"$TMP/remote_other$w.json"
    check "$w worker(s): throughput objective and constraints give the local JSON" \
        cmp -s "$TMP/local_other.json" "$TMP/remote_other$w.json"
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $ORDER --json --server "$ADDR" >"$TMP/remote_order$w.json"
    check "$w worker(s): the rank order constraint gives the local JSON" \
        cmp -s "$TMP/local_order.json" "$TMP/remote_order$w.json"
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $NESTED --json --server "$ADDR" >"$TMP/remote_nested$w.json"
    check "$w worker(s): --nested gives the local JSON" \
        cmp -s "$TMP/local_nested.json" "$TMP/remote_nested$w.json"
    for i in 0 1 2 3; do
        # shellcheck disable=SC2086
        $T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --json --shard "$i/4" --server "$ADDR" \
            >"$TMP/remote_shard$i.json" || fail "remote shard $i"
    done
    check "$w worker(s): every remote shard equals the local shard" sh -c '
        for i in 0 1 2 3; do cmp -s "$1/local_shard$i.json" "$1/remote_shard$i.json" || exit 1; done' \
        sh "$TMP"
    $T "$DISTIR" search --merge "$TMP/remote_shard0.json" "$TMP/remote_shard1.json" \
        "$TMP/remote_shard2.json" "$TMP/remote_shard3.json" --json >"$TMP/merged$w.json"
    check "$w worker(s): the merged remote shards equal the whole" \
        cmp -s "$TMP/local.json" "$TMP/merged$w.json"
    stop_daemon
    check "$w worker(s): distird exits 0" [ $? -eq 0 ]
done

start_daemon main --workers 2 --max-search-candidates 1000 || { fail "daemon start"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --server "$ADDR" >"$TMP/table.out"
check "the table form works remotely" grep -q '^top 3 by step time on 8 devices' "$TMP/table.out"
check "the remote table names the daemon" grep -q "searched by $ADDR" "$TMP/table.out"
grep -v '^space:\|^searched in' "$TMP/table.out" >"$TMP/table.remote"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS | grep -v '^space:\|^searched in' >"$TMP/table.local"
check "the remote tables equal the local tables" cmp -s "$TMP/table.local" "$TMP/table.remote"
# Another search of the same module and hardware (a larger K) takes the figures the first
# simulated, answers as the in-process search, and says so; they survive a restart.
check "the daemon stored the search's simulations" \
    grep -q 'event=search_evals_stored entries=[1-9]' "$TMP/main.log"
KEPT="--devices 8 --recompute none,full --zero 0,3 --microbatches 1,2,4"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 5 --json >"$TMP/top5.local"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 5 --json --server "$ADDR" >"$TMP/top5.remote"
check "a search taking kept figures answers as the in-process search" \
    cmp -s "$TMP/top5.local" "$TMP/top5.remote"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 4 --server "$ADDR" >"$TMP/top4.remote"
check "... and says how many candidates' figures it kept" \
    grep -Eq "^searched in .* \([1-9][0-9]* candidates' figures kept from earlier searches\)" \
    "$TMP/top4.remote"
$T "$DISTIR" search "$TMP/gpt.pb" --devices 8 --server "$ADDR" >/dev/null 2>"$TMP/big.err"
check "a space above --max-search-candidates fails" [ $? -eq 1 ]
check "... with RESOURCE_EXHAUSTED naming the limit" \
    grep -q 'RESOURCE_EXHAUSTED: .*--max-search-candidates' "$TMP/big.err"
$T "$DISTIR" search "$TMP/gpt.pb" --devices 4096 --server "$ADDR" >/dev/null 2>"$TMP/bad.err"
check "too many devices is INVALID_ARGUMENT" grep -q 'INVALID_ARGUMENT: .*4096 devices' "$TMP/bad.err"
stop_daemon
start_daemon main --workers 2 || { fail "daemon restart"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 6 --json >"$TMP/top6.local"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 6 --server "$ADDR" >"$TMP/top6.remote"
check "after a restart the kept figures are taken" \
    grep -q "candidates' figures kept from earlier searches" "$TMP/top6.remote"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 6 --json --server "$ADDR" >"$TMP/top6.json"
check "... with the in-process answer" cmp -s "$TMP/top6.local" "$TMP/top6.json"
stop_daemon

# Every candidate waits 20 ms: the space's 400 candidates take about 4 s on 2 workers.
start_daemon slow --workers 2 --test-delay-ms 20 || { fail "daemon start (slow)"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --server "$ADDR" --timeout-ms 400 >/dev/null \
    2>"$TMP/deadline.err"
check "a search past its deadline fails" [ $? -eq 1 ]
check "... with DEADLINE_EXCEEDED" grep -q 'DEADLINE_EXCEEDED' "$TMP/deadline.err"
# The workers' search_end and the call's call_cancelled are logged by different events
# (the last worker stopping, the completion queue seeing the call end), in either order:
# wait for both (at most 10 s).
wait_log "$TMP/slow.log" 10 'event=search_end' 'event=call_cancelled method=Search'
# Deadline or cancel: on a loaded machine the client may give up just before the
# daemon's copy of the deadline (a relative timeout from the request's arrival) passes.
check "the daemon logs the cancelled call" grep -Eq 'event=call_cancelled method=Search reason=(deadline|cancelled)' "$TMP/slow.log"
check "the workers stopped early" awk '
    /event=search_end/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                         found = 1; ok = v["cancelled"] == 1 && v["done"] + 0 < v["total"] / 2 }
    END { exit !(found && ok) }' "$TMP/slow.log"
$T "$DISTIR" search "$TMP/gpt.pb" --devices 2 --fix pp=1 --fix tp=1 --recompute none \
    --server "$ADDR" --json >"$TMP/after.json"
check "the daemon answers the next search" [ $? -eq 0 ]
check "... with a result" grep -q '"enumerated":' "$TMP/after.json"
stop_daemon
check "slow daemon exits 0" [ $? -eq 0 ]

# SIGKILL during a long search: what its parts stored between slices (every 10 s) survives,
# and the same search after a restart takes it and answers as the in-process search.
start_daemon killed --workers 2 --test-delay-ms 50 || { fail "daemon start (killed)"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 3 --server "$ADDR" >/dev/null 2>&1 &
client=$!
check "a long search stores its simulations as it goes" \
    wait_log "$TMP/killed.log" 20 'event=search_evals_stored .*part='
kill -KILL "$PID"
wait "$PID" 2>/dev/null
wait "$client" 2>/dev/null
start_daemon killed --workers 2 || { fail "daemon restart (killed)"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 3 --server "$ADDR" >"$TMP/after_kill.out"
check "after SIGKILL the search takes what was stored before it" \
    grep -q "candidates' figures kept from earlier searches" "$TMP/after_kill.out"
grep -v '^space:\|^searched in' "$TMP/after_kill.out" >"$TMP/after_kill.table"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $KEPT --top 3 | grep -v '^space:\|^searched in' \
    >"$TMP/after_kill.local"
check "... and answers as the in-process search" cmp -s "$TMP/after_kill.local" "$TMP/after_kill.table"
stop_daemon

# SIGTERM during a search: after --grace-ms the search is cancelled and distird exits 0.
start_daemon term --workers 2 --test-delay-ms 20 --grace-ms 200 || { fail "daemon start (term)"; finish; }
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --server "$ADDR" >/dev/null 2>"$TMP/term.err" &
CLIENT=$!
wait_log "$TMP/term.log" 5 'event=search_started'
stop_daemon
check "SIGTERM during a search: distird exits 0" [ $? -eq 0 ]
wait "$CLIENT"
check "... the client fails" [ $? -eq 1 ]
# gRPC's cancel_all_calls ends the call first: the client sees UNAVAILABLE.
check "... with UNAVAILABLE or CANCELLED" grep -Eq 'failed: (UNAVAILABLE|CANCELLED): ' "$TMP/term.err"
check "... after stopping the workers early" grep -q 'event=search_end .* cancelled=1' "$TMP/term.log"

finish
