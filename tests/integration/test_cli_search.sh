#!/bin/sh
# test_cli_search.sh: `distir search` on a small GPT. Checks: the tables of
# the top K and the Pareto set and the counts are printed; --json is one
# object whose counts add up; --shard i/4 for i = 0..3 merged with --merge
# print exactly the unsharded JSON; the allowed-degree and --fix constraints
# hold in every reported strategy; bad constraints are usage errors (exit 2)
# and too many devices a failure (exit 1), as is a merge of different
# searches; an empty space says so; --help documents --server; --log-candidates writes a line per
# evaluated candidate whose bounds hold, marks one whose composition check
# failed (simulated in full: `distir simulate`'s figures), and
# bench/search_anatomy.py reads it; on a terminal the settled top K is announced before the end (in process and
# from a daemon), never when standard error is not one.
. tests/integration/lib.sh

T="timeout 60"
quiet() { "$@" >/dev/null 2>&1; }
$T "$DISTIR" model gpt --layers 4 --hidden 48 --heads 6 --seq 8 --vocab 13 --batch 24 \
    -o "$TMP/gpt.pb" || fail "model gpt"
LIMITS="--devices 8 --recompute none,full --zero 0,3 --microbatches 1,2,4"

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --top 3 >"$TMP/table.out" 2>"$TMP/table.err"
check "search exits 0" [ $? = 0 ]
check "search prints the top-K table" grep -q '^top 3 by step time on 8 devices' "$TMP/table.out"
check "search prints the Pareto table" grep -q '^pareto set over (step time, peak memory)' \
    "$TMP/table.out"
check "search prints the counts" grep -q '^candidates [0-9]*: ok [0-9]* out_of_memory 0' \
    "$TMP/table.out"
check "the best strategy is on 8 devices" \
    grep -Eq '^ +1 .* dp=[0-9]+ tp=[0-9]+ pp=[0-9]+ m=' "$TMP/table.out"

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --top 3 --json >"$TMP/whole.json" || fail "search --json"
check "--json is one JSON object with 3 top points" /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["top"]) == 3 and r["devices"] == 8
assert sum(r["counts"].values()) == r["enumerated"] > 0
assert all(p["dp"] * p["tp"] * p["pp"] == 8 for p in r["top"] + r["pareto"])
' "$TMP/whole.json"

for i in 0 1 2 3; do
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --top 3 --json --shard "$i/4" \
        >"$TMP/shard$i.json" || fail "search --shard $i/4"
done
$T "$DISTIR" search --merge "$TMP/shard0.json" "$TMP/shard1.json" "$TMP/shard2.json" \
    "$TMP/shard3.json" --json >"$TMP/merged.json"
check "--merge exits 0" [ $? = 0 ]
check "the merged shards print the unsharded result byte for byte" \
    cmp -s "$TMP/whole.json" "$TMP/merged.json"
check "a shard alone differs from the whole" sh -c '! cmp -s "$1" "$2"' sh "$TMP/whole.json" \
    "$TMP/shard1.json"

# Composed candidates (many microbatches): each shard re-simulates its own best in full, and
# the merge is still the whole, byte for byte; the reported top is a full simulation's. (pp 1
# and 2: 192 microbatches, composed from 4, 6 and 8, save more than SEARCH_COMPOSE_SAVES of
# them.)
$T "$DISTIR" model gpt --layers 4 --hidden 48 --heads 6 --seq 8 --vocab 13 --batch 384 \
    -o "$TMP/gpt384.pb" || fail "model gpt --batch 384"
CLIMITS_NODEV="--recompute none --zero 0 --microbatches 16,192 --pp 1,2 --schedule 1f1b"
CLIMITS="--devices 8 $CLIMITS_NODEV"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt384.pb" $CLIMITS --top 3 --json >"$TMP/cwhole.json" ||
    fail "search (composed)"
for i in 0 1 2 3; do
    # shellcheck disable=SC2086
    $T "$DISTIR" search "$TMP/gpt384.pb" $CLIMITS --top 3 --json --shard "$i/4" \
        >"$TMP/cshard$i.json" || fail "search (composed) --shard $i/4"
done
$T "$DISTIR" search --merge "$TMP/cshard0.json" "$TMP/cshard1.json" "$TMP/cshard2.json" \
    "$TMP/cshard3.json" --json >"$TMP/cmerged.json" || fail "--merge (composed)"
check "composed: the merged shards print the unsharded result byte for byte" \
    cmp -s "$TMP/cwhole.json" "$TMP/cmerged.json"
# The top K's composed points carry a full simulation, within 1% of their estimates; a composed
# Pareto point outside the top K reports its estimate alone, unless --refine all.
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt384.pb" $CLIMITS --top 3 --json --refine all >"$TMP/call.json" ||
    fail "search (composed) --refine all"
check "composed: the top K's composed points carry a full simulation; --refine all: all do" \
    /usr/bin/python3 -c '
import json, sys
r, a = (json.load(open(f)) for f in sys.argv[1:3])
assert r["composed"] > 0, r["composed"]
assert "refine" not in r and a["refine"] == "all" and a["search_key"] != r["search_key"]
def check(p):
    assert p["simulated"]["status"] == "ok", p
    assert abs(p["simulated"]["step_time_s"] - p["step_time_s"]) <= 0.01 * p["step_time_s"], p
top = {p["strategy"] for p in r["top"]}
comp = [p for p in r["top"] + r["pareto"] if p["composed"]]
assert comp
for p in comp:
    if p["strategy"] in top:
        check(p)
    else:
        assert "simulated" not in p, p
est = [p for p in r["pareto"] if p["composed"] and p["strategy"] not in top]
assert est, "no composed Pareto point outside the top K: the check would be empty"
comp = [p for p in a["top"] + a["pareto"] if p["composed"]]
assert {p["strategy"] for p in est} <= {p["strategy"] for p in comp}
for p in comp:
    check(p)
assert [p["strategy"] for p in a["pareto"]] == [p["strategy"] for p in r["pareto"]]
' "$TMP/cwhole.json" "$TMP/call.json"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt384.pb" $CLIMITS --top 3 --json --jobs 1 >"$TMP/cj1.json" &&
    $T "$DISTIR" search "$TMP/gpt384.pb" $CLIMITS --top 3 --json --jobs 3 >"$TMP/cj3.json" ||
    fail "search --jobs"
check "--jobs 1 and --jobs 3 print the same JSON byte for byte (and the default's)" \
    sh -c 'cmp -s "$1" "$2" && cmp -s "$1" "$3"' sh "$TMP/cj1.json" "$TMP/cj3.json" \
    "$TMP/cwhole.json"
# --math tf32: f32 GEMMs at the TF32 peak, so a faster best step, and another search key.
$T "$DISTIR" model mlp --layers 4 --hidden 256 --batch 64 -o "$TMP/mlp.pb" || fail "model mlp"
$T "$DISTIR" search "$TMP/mlp.pb" --devices 4 --top 1 --json >"$TMP/ieee.json" &&
    $T "$DISTIR" search "$TMP/mlp.pb" --devices 4 --top 1 --json --math tf32 >"$TMP/tf32.json" ||
    fail "search --math tf32"
check "--math tf32: a faster best step under another search key" /usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["search_key"] != a["search_key"]
assert b["top"][0]["step_time_s"] < 0.8 * a["top"][0]["step_time_s"]
' "$TMP/ieee.json" "$TMP/tf32.json"
quiet "$DISTIR" search "$TMP/gpt384.pb" --jobs 0
check "--jobs 0 is a usage error (exit 2)" [ $? = 2 ]

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt384.pb" $CLIMITS --top 3 --compose 0 --json >"$TMP/cfull.json" ||
    fail "search --compose 0"
check "--compose 0 simulates every candidate in full" /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["composed"] == 0 and not any(p["composed"] for p in r["top"] + r["pareto"])
' "$TMP/cfull.json"

# Several device counts and the devices objective with a target, the price and the tokens.
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt384.pb" --devices 2,4,8 --objective devices --target-step 0.01 \
    --price 2.5 --train-tokens 1e9 $CLIMITS_NODEV --top 3 >"$TMP/dev.out" || fail "--objective devices"
check "--objective devices: the table says so, with devices, training days and cost" \
    sh -c 'grep -q "^top 3 by fewest devices on 2,4,8 devices (target step time 0.010 s)" "$1" &&
           grep -q "devices    train days    train cost" "$1"' sh "$TMP/dev.out"
# shellcheck disable=SC2086
quiet $T "$DISTIR" search "$TMP/gpt384.pb" --devices 2,4 --objective devices $CLIMITS_NODEV
check "--objective devices without --target-step fails (exit 1)" [ $? = 1 ]
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt384.pb" --devices 2,4 --objective devices $CLIMITS_NODEV 2>&1 |
    grep -q "target step time" || fail "... without saying what is missing"

# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --tp 1,2 --fix pp=2 --json >"$TMP/fixed.json" ||
    fail "search --tp --fix"
check "--tp 1,2 --fix pp=2 hold in every reported strategy" /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
pts = r["top"] + r["pareto"]
assert pts and all(p["pp"] == 2 and p["tp"] in (1, 2) for p in pts)
' "$TMP/fixed.json"

$T "$DISTIR" search "$TMP/gpt.pb" --tp 0 >/dev/null 2>"$TMP/bad.err"
check "--tp 0 exits 2" [ $? = 2 ]
check "... saying what is wrong" grep -q 'bad --tp' "$TMP/bad.err"
$T "$DISTIR" search "$TMP/gpt.pb" --fix nonsense >/dev/null 2>&1
check "--fix without NAME=VALUE exits 2" [ $? = 2 ]
$T "$DISTIR" search "$TMP/gpt.pb" --devices 64 >/dev/null 2>"$TMP/many.err"
check "more devices than the hardware has exits 1" [ $? = 1 ]
check "... naming the count" grep -q '64 devices asked for' "$TMP/many.err"
$T "$DISTIR" search --merge "$TMP/whole.json" "$TMP/fixed.json" >/dev/null 2>"$TMP/mix.err"
check "--merge of different searches exits 1" [ $? = 1 ]
check "... saying so" grep -q 'different searches' "$TMP/mix.err"
$T "$DISTIR" search --merge "$TMP/gpt.pb" >/dev/null 2>&1
check "--merge of a non-result exits 1" [ $? = 1 ]
"$DISTIR" search --help >"$TMP/help.out"
check "--help documents --server" grep -q "with --server on distird's workers" "$TMP/help.out"

# --log-candidates: a JSON line per candidate evaluated (as many as the counts say were
# simulated), whose lower bounds hold against its full simulation, and a line per worker
# for the refinement; the same answer as without it; bench/search_anatomy.py reads it.
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --top 3 --json --jobs 2 \
    --log-candidates "$TMP/cand.log" >"$TMP/logged.json"
check "--log-candidates: search exits 0" [ $? = 0 ]
check "--log-candidates: the same answer" cmp -s "$TMP/logged.json" "$TMP/whole.json"
check "--log-candidates: a line per evaluated candidate, bounds below the figures" \
    /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
pts = [l for l in lines if "status" in l]
ref = [l for l in lines if "refine_s" in l]
c = r["counts"]
assert len(pts) == c["ok"] + c["out_of_memory"] + c["failed"] > 0, (len(pts), c)
assert len({p["index"] for p in pts}) == len(pts)
assert sorted(x["worker"] for x in ref) == [0, 1]
full = [p for p in pts if not p["composed"]]
assert len(full) == len(pts) - r["composed"]
for p in full:
    assert 0 < p["time_bound_s"] <= p["step_time_s"], p
    assert 0 < p["memory_bound_bytes"] <= p["peak_memory_bytes"], p
    assert p["eval_s"] >= 0 and p["strategy"].startswith("dp=")
best = min(p["step_time_s"] for p in pts if p["status"] == "ok")
assert best == r["top"][0]["step_time_s"], (best, r["top"][0])
' "$TMP/whole.json" "$TMP/cand.log"
/usr/bin/python3 bench/search_anatomy.py "$TMP/cand.log" "$TMP/whole.json" >"$TMP/anatomy.out"
check "bench/search_anatomy.py reads the log" grep -Eq '^evaluated: [1-9][0-9]* candidates' \
    "$TMP/anatomy.out"
check "... and counts what exact bounds would prune" \
    grep -q '^with both exact: [0-9]* of the [0-9]* evaluated candidates prunable' "$TMP/anatomy.out"
# A composition whose check fails (docs/search.md, Composed estimates): on a GPT of 12 layers
# (hidden size 256, sequence 64, batch 256) on two nodes, dp 1, tp 2, pp 8, 1F1B with 128
# microbatches, the extrapolations from 9 and 11 and from 11 and 13 microbatches disagree; the
# candidate is simulated in full, logged "unsteady" and not composed, with the figures of
# `distir simulate`. (Until 2026-12-07 the case was an 8-layer GPT at tp 8, pp 2, interleaved,
# whose received activations' gathers then held up the tensor-parallel all-reduces until the
# data arrived: Pipeline and assembly in docs/transforms.md. It is steady now.)
$T "$DISTIR" model gpt --layers 12 --hidden 256 --heads 8 --seq 64 --vocab 13 --batch 256 \
    --dropout 0 --dtype bf16 --optimizer adam -o "$TMP/gpt2n.pb" || fail "model gpt (two nodes)"
$T "$DISTIR" search "$TMP/gpt2n.pb" --hw a100-dgx:2 --tp 2 --pp 8 --microbatches 128 \
    --schedule 1f1b --recompute none --json --log-candidates "$TMP/u.log" \
    >"$TMP/u.json" || fail "search (two nodes)"
$T "$DISTIR" simulate "$TMP/gpt2n.pb" --hw a100-dgx:2 --dp 1 --tp 2 --pp 8 --microbatches 128 \
    --schedule 1f1b --recompute none --json >"$TMP/u_sim.json" 2>/dev/null ||
    fail "simulate (two nodes)"
check "a failed composition check: logged unsteady, not composed, a full simulation's figures" \
    /usr/bin/python3 -c '
import json, sys
sim = json.load(open(sys.argv[2]))
u = [json.loads(l) for l in open(sys.argv[1]) if "unsteady" in l]
s = "dp=1 tp=2 pp=8 m=128 schedule=1f1b recompute=none stash=none zero=0"
mine = [p for p in u if p["strategy"] == s]
assert len(mine) == 1 and mine[0]["unsteady"] is True and mine[0]["composed"] is False, u
assert mine[0]["step_time_s"] == sim["step_time_s"], (mine[0], sim["step_time_s"])
assert mine[0]["peak_memory_bytes"] == sim["peak_memory_bytes"]
' "$TMP/u.log" "$TMP/u_sim.json"
"$DISTIR" search --merge "$TMP/whole.json" --log-candidates "$TMP/x.log" \
    >/dev/null 2>"$TMP/logmerge.err"
check "--log-candidates with --merge is a usage error" [ $? = 2 ]
check "... saying why" grep -q 'not --merge' "$TMP/logmerge.err"
# shellcheck disable=SC2086
"$DISTIR" search "$TMP/gpt.pb" $LIMITS --log-candidates "$TMP/no/such/dir/x.log" \
    >/dev/null 2>"$TMP/lognodir.err"
check "an unwritable --log-candidates file fails (exit 1)" [ $? = 1 ]
check "... naming it" grep -q 'cannot write' "$TMP/lognodir.err"

# On a terminal (script(1) gives the command one), the line that says the top K is settled
# before the search ends, in process and from a daemon (its candidates slowed down so
# that progress events flow); never when standard error is not a terminal.
tty_search() { # OUT ARGS...: the search on a terminal, its output with carriage returns as lines
    out=$1
    shift
    script -qec "$(printf '%s ' "$@")" /dev/null </dev/null | tr '\r' '\n' >"$out"
}
tty_search "$TMP/tty.out" timeout 120 "$DISTIR" search --model gpt3-1.3b --batch 64 --dtype bf16 \
    --optimizer adam --hw a100-dgx:1 --jobs 2 --top 3 --kernels eager
check "on a terminal the settled top K is announced before the end" \
    grep -aq '^.*search: the top 3 is settled after [0-9.]* s, best dp=[0-9]* .* per step; the Pareto set continues' \
    "$TMP/tty.out"
check "... and the tables follow" grep -aq '^top 3 by step time on 8 devices' "$TMP/tty.out"
$T "$DISTIR" search --model gpt3-1.3b --batch 64 --dtype bf16 --optimizer adam --hw a100-dgx:1 \
    --jobs 2 --top 3 --kernels eager >/dev/null 2>"$TMP/notty.err"
check "... not when standard error is not a terminal" sh -c "! grep -q settled '$TMP/notty.err'"
# An empty space (pp 3 does not divide 8 devices) says so, rather than "no candidate fits".
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --fix pp=3 >"$TMP/empty.out" || fail "search --fix pp=3"
check "an empty space: the tables say that no strategy uses the devices" \
    sh -c 'grep -q "^candidates 0:" "$1" && [ "$(grep -c "$2" "$1")" = 2 ]' \
    sh "$TMP/empty.out" "(no candidate: no strategy the constraints allow uses these devices)"
start_daemon tty --workers 2 --test-delay-ms 4 || fail "daemon start"
# shellcheck disable=SC2086
tty_search "$TMP/ttyd.out" timeout 120 "$DISTIR" search "$TMP/gpt.pb" $LIMITS --top 3 \
    --server "$ADDR"
check "... from a daemon too" \
    grep -aq '^.*search: the top 3 is settled after [0-9.]* s, best dp=' "$TMP/ttyd.out"
# shellcheck disable=SC2086
$T "$DISTIR" search "$TMP/gpt.pb" $LIMITS --fix pp=3 --server "$ADDR" >"$TMP/emptyd.out" ||
    fail "search --fix pp=3 --server"
check "an empty space on the daemon: the same tables and counts" \
    sh -c 'grep -v "^space: \|^searched in" "$1" >"$1.t" &&
           grep -v "^space: \|^searched in" "$2" >"$2.t" && cmp -s "$1.t" "$2.t"' \
    sh "$TMP/empty.out" "$TMP/emptyd.out"
stop_daemon >/dev/null 2>&1

exit "$failures"
