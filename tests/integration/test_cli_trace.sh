#!/bin/sh
# test_cli_trace.sh: `distir simulate --trace` streams a Chrome trace-event
# file while simulating.
#   - every op of a small pipelined model is a slice whose args carry its
#     stage, microbatch and phase (forward, backward, recompute, optimizer);
#     each send is linked to its receive by a flow (one "s" and one "f" per
#     id); live memory is a counter per class;
#   - --trace-devices keeps the simulator's symmetry and records, for the
#     devices chosen, exactly the slices the full trace has for them;
#   - GPT-3 175B on 1,024 A100s restricted to one device per stage
#     (first-of-each-stage) is valid JSON with flows, one process per stage,
#     and under 100 MB (each layer's consecutive ops merged);
#   - bad selections are usage errors, and a trace that cannot be written
#     fails the command and leaves no file behind.
. tests/integration/lib.sh

PY=/usr/bin/python3
T="timeout 300"
SMALL="--model gpt --layers 4 --hidden 64 --heads 4 --seq 16 --vocab 64 --batch 8 --dtype bf16 --optimizer adam"
STRAT="--hw a100-dgx:1 --dp 2 --tp 2 --pp 2 --microbatches 4 --recompute full"

# shellcheck disable=SC2086
$T "$DISTIR" simulate $SMALL $STRAT --trace "$TMP/all.json" --trace-detail op >/dev/null \
    2>"$TMP/all.err" || fail "simulate --trace: $(cat "$TMP/all.err")"
check "the command says how many ops it wrote" grep -q "^distir: trace: [0-9]* ops in" "$TMP/all.err"
if $PY - "$TMP/all.json" <<'EOF'; then ok "every op a slice with stage, microbatch and phase; flows pair sends and receives; memory by class"; else fail "small trace content"; fi
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
xs = [e for e in ev if e["ph"] == "X"]
assert xs, "no slices"
phases = collections.Counter(e["cat"] for e in xs)
for p in ("forward", "backward", "recompute", "optimizer"):
    assert phases[p] > 0, (p, phases)
chunked = [e for e in xs if "microbatch" in e["args"]]
# Forward and recomputed ops all run in pipeline chunks; backward ones too, but
# for the once-per-step program's (summing gradients before the optimizer).
assert all("microbatch" in e["args"] for e in xs if e["cat"] in ("forward", "recompute"))
assert sum(1 for e in xs if e["cat"] == "backward" and "microbatch" not in e["args"]) < \
    0.05 * phases["backward"]
assert {e["args"]["microbatch"] for e in chunked} == {0, 1, 2, 3}
assert {e["args"]["stage"] for e in chunked} == {0, 1}
assert {e["pid"] for e in xs} == set(range(8)), {e["pid"] for e in xs}
s = collections.Counter(e["id"] for e in ev if e["ph"] == "s")
f = collections.Counter(e["id"] for e in ev if e["ph"] == "f")
assert s and s == f and max(s.values()) == 1, "flows"
sends = [e for e in xs if e["tid"] == 1]
assert all("to" in e["args"] for e in sends)
mem = [e for e in ev if e["ph"] == "C" and e["name"] == "memory"]
assert mem and all({"weights", "activations", "optimizer_state"} <= set(e["args"]) for e in mem)
EOF

# The same run recording devices 0 and 5 only (symmetry kept) gives their slices exactly.
# shellcheck disable=SC2086
$T "$DISTIR" simulate $SMALL $STRAT --trace "$TMP/sel.json" --trace-detail op \
    --trace-devices 0,5 >/dev/null 2>&1 || fail "simulate --trace-devices 0,5"
if $PY - "$TMP/all.json" "$TMP/sel.json" <<'EOF'; then ok "--trace-devices 0,5: the full trace's slices of devices 0 and 5, exactly"; else fail "selected trace differs"; fi
import json, sys
def slices(path, keep):
    ev = json.load(open(path))["traceEvents"]
    return sorted(json.dumps(e, sort_keys=True) for e in ev if e["ph"] == "X" and e["pid"] in keep)
a, b = slices(sys.argv[1], {0, 5}), slices(sys.argv[2], {0, 5, 1, 2, 3, 4, 6, 7})
assert a and a == b, (len(a), len(b))
EOF

# GPT-3 175B, 1,024 A100s, one device per stage.
$T "$DISTIR" simulate --model gpt3-175b --batch 1536 --dtype bf16 --optimizer adam \
    --hw a100-dgx:128 --dp 8 --tp 8 --pp 16 --microbatches 192 \
    --trace "$TMP/big.json" --trace-devices first-of-each-stage >/dev/null 2>"$TMP/big.err" ||
    fail "simulate gpt3-175b --trace: $(cat "$TMP/big.err")"
size=$(stat -c %s "$TMP/big.json" 2>/dev/null || echo 0)
echo "# 1,024-GPU trace, one device per stage: $size bytes"
check "the 1,024-GPU trace is under 100 MB" [ "$size" -gt 0 ] && [ "$size" -lt 100000000 ]
if $PY - "$TMP/big.json" <<'EOF'; then ok "... valid JSON with flows, one process per stage"; else fail "1,024-GPU trace content"; fi
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
xs = [e for e in ev if e["ph"] == "X"]
assert {e["pid"] for e in xs} == {64 * g for g in range(16)}, sorted({e["pid"] for e in xs})
assert sum(1 for e in ev if e["ph"] == "s") > 0
assert {e["args"]["microbatch"] for e in xs if "microbatch" in e["args"]} == set(range(192)), \
    sorted({e["args"]["microbatch"] for e in xs if "microbatch" in e["args"]})[:5]
names = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
assert any(e["args"]["name"] == "device 64, stage 1" for e in names)
EOF

# shellcheck disable=SC2086
"$DISTIR" simulate $SMALL $STRAT --trace "$TMP/x.json" --trace-devices 0,99 >/dev/null 2>"$TMP/bad.err"
check "a device that does not exist is a usage error (exit 2)" [ $? -eq 2 ]
check "... naming it" grep -q "device 99 does not exist" "$TMP/bad.err"
# shellcheck disable=SC2086
"$DISTIR" simulate $SMALL $STRAT --trace-devices 0 >/dev/null 2>&1
check "--trace-devices without --trace is a usage error (exit 2)" [ $? -eq 2 ]
# shellcheck disable=SC2086
"$DISTIR" simulate $SMALL $STRAT --trace "$TMP/none/t.json" >/dev/null 2>"$TMP/nodir.err"
check "an unwritable trace fails (exit 1)" [ $? -eq 1 ]
check "... and leaves no file" [ -z "$(ls "$TMP/none" 2>/dev/null)" ]
# A module's own dist.phase (any string) is escaped in the trace.
printf 'func @f(%%x: !dist.tensor<4x4xf32, 0>) -> (!dist.tensor<4x4xf32, 0>) {\n  %%y = "Relu"(%%x) {dist.phase = "a\\"b\\\\"} : (!dist.tensor<4x4xf32, 0>) -> !dist.tensor<4x4xf32, 0>\n  return %%y : !dist.tensor<4x4xf32, 0>\n}\n' >"$TMP/q.dir"
"$DISTIR" simulate "$TMP/q.dir" --trace "$TMP/q.json" >/dev/null 2>&1 || fail "simulate q.dir"
check "a phase with quotes and backslashes stays valid JSON" $PY -c '
import json, sys
x = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
assert [e["cat"] for e in x] == ["a\"b\\"], x' "$TMP/q.json"

# A write that fails midway (as on a full disk): a file size limit makes write(2) fail with EFBIG.
# shellcheck disable=SC2086
(ulimit -f 64 && trap '' XFSZ && "$DISTIR" simulate $SMALL $STRAT --trace "$TMP/f.json" \
    --trace-detail op >/dev/null 2>"$TMP/full.err")
rc=$?
check "a write that fails midway fails the command (exit 1)" [ $rc -eq 1 ]
check "... saying why" grep -q "cannot write the trace" "$TMP/full.err"
check "... and leaves no partial file" [ ! -e "$TMP/f.json" ] &&
    [ -z "$(find "$TMP" -name 'f.json.tmp*')" ]
finish
