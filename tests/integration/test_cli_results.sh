#!/bin/sh
# test_cli_results.sh: what `distir simulate` says about a result.
#   - the text starts with the model, hardware and strategy simulated, then
#     step time, tokens/s, MFU, HFU, bubble fraction, exposed communication
#     and peak memory against capacity, and a table per pipeline stage;
#   - --json carries the same inputs and per-stage records beside the
#     per-device ones, and the stages add up to the devices (devices, compute,
#     exposed communication, idle time, FLOPs, layers; the largest stage peak
#     is the result's peak);
#   - the stages are their own devices under context parallelism and the
#     tp-pp-dp rank order;
#   - MFU of GPT-3 175B on 1,024 A100s equals the hand computation
#     (72 l h^2 + 12 l h s + 6 V h) T / (step x 1024 x 312 TFLOP/s),
#     Megatron-LM's model FLOPs;
#   - --model with the generator's defaults warns about f32, SGD and
#     unfused element-wise kernels, and does not once --dtype, --optimizer
#     and --kernels are given.
. tests/integration/lib.sh

PY=/usr/bin/python3
T="timeout 120"
SMALL="--model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 --batch 16 --dtype bf16 --optimizer adam"

# shellcheck disable=SC2086
$T "$DISTIR" simulate $SMALL --hw a100-dgx:1 --dp 2 --tp 2 --pp 2 --microbatches 4 \
    >"$TMP/t.out" 2>"$TMP/t.err" || fail "simulate (text): $(cat "$TMP/t.err")"
check "the text names the model first" sh -c "head -1 '$TMP/t.out' | grep -q '^model  *gpt ('"
check "... the hardware" grep -q '^hardware  *a100-dgx:1: 8 devices, 8 per node' "$TMP/t.out"
check "... and the strategy" grep -q '^strategy  *dp=2 tp=2 pp=2 m=4' "$TMP/t.out"
for k in "step time" "tokens/s" "MFU" "HFU" "bubble fraction" "exposed comm" "peak memory"; do
    check "... then '$k'" grep -q "^$k " "$TMP/t.out"
done
check "a table per pipeline stage, with its layers" \
    grep -q '^stage devices layers  *compute  *exposed  *idle' "$TMP/t.out"
check "no warning about the dtype or the optimizer when --dtype and --optimizer are given" \
    test -z "$(grep -E 'f32 \(the default\)|SGD \(the default\)' "$TMP/t.err")"

# shellcheck disable=SC2086
$T "$DISTIR" simulate $SMALL --hw a100-dgx:1 --dp 2 --tp 2 --pp 2 --microbatches 4 --json \
    >"$TMP/r.json" || fail "simulate --json"
if $PY - "$TMP/r.json" <<'EOF'; then ok "JSON: inputs, and stages that add up to the devices"; else fail "JSON stages and inputs"; fi
import json, math, sys
r = json.load(open(sys.argv[1]))
i = r["inputs"]
assert i["model"] == "gpt" and i["hardware"] == "a100-dgx:1" and i["devices"] == 8, i
assert i["strategy"].startswith("dp=2 tp=2 pp=2 m=4"), i
assert i["parameters"] > 0 and i["tokens"] == 16 * 32, i
st, dev = r["stages"], r["devices"]
assert len(st) == 2 and sum(s["devices"] for s in st) == len(dev) == 8, st
assert sum(s["layers"] for s in st) == 8, st
for k in ("compute_s", "exposed_comm_s", "idle_s", "flops"):
    a = sum(s[k] * s["devices"] for s in st)
    b = sum(d[k] for d in dev)
    assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (k, a, b)
assert max(s["peak_memory_bytes"] for s in st) == r["peak_memory_bytes"]
for s in st:
    d = next(d for d in dev if d["id"] == s["peak_device"])
    assert d["peak_memory_bytes"] == s["peak_memory_bytes"]
assert math.isclose(sum(d["flops"] for d in dev), r["flops"], rel_tol=1e-12)
assert 0 < r["mfu"] < 1 and 0 < r["hfu"] < 1, r
assert math.isclose(r["tokens_per_s"], 16 * 32 / r["step_time_s"], rel_tol=1e-12)
EOF

# The stages' devices as the transforms place the ranks: dp x cp x tp a stage (context between
# tensor and data), and under tp-pp-dp a replica's stages together (rank ((d cp + k) pp + g) tp
# + t on device). Until 2026-12-07 the table took dp x tp devices a stage in the default order.
for opts in "--dp 1 --tp 2 --pp 2 --cp 2:0 1 2 3|4 5 6 7" \
    "--dp 2 --tp 2 --pp 2 --order tp-pp-dp:0 1 4 5|2 3 6 7"; do
    # shellcheck disable=SC2086
    $T "$DISTIR" simulate $SMALL --hw a100-dgx:1 ${opts%%:*} --microbatches 4 --json \
        >"$TMP/o.json" || fail "simulate ${opts%%:*}"
    if $PY - "$TMP/o.json" "${opts#*:}" <<'EOF'; then ok "stages of ${opts%%:*}: their own devices"; else fail "stages of ${opts%%:*}"; fi
import json, math, sys
r = json.load(open(sys.argv[1]))
want = [[int(x) for x in g.split()] for g in sys.argv[2].split("|")]
st, dev = r["stages"], {d["id"]: d for d in r["devices"]}
assert [s["devices"] for s in st] == [len(g) for g in want], st
for s, g in zip(st, want):
    for k in ("compute_s", "exposed_comm_s", "idle_s", "flops"):
        mean = sum(dev[i][k] for i in g) / len(g)
        assert math.isclose(s[k], mean, rel_tol=1e-12, abs_tol=1e-15), (k, s, g)
    assert s["peak_device"] in g and s["peak_memory_bytes"] == max(
        dev[i]["peak_memory_bytes"] for i in g), (s, g)
# The two stages differ (the head is on the last), so the check above tells them apart.
assert st[0]["compute_s"] != st[1]["compute_s"], st
EOF
done

# GPT-3 175B, global batch 1,536 of 2,048 tokens, bf16, Adam, 1,024 A100s.
$T "$DISTIR" simulate --model gpt3-175b --batch 1536 --dtype bf16 --optimizer adam \
    --hw a100-dgx:128 --dp 8 --tp 8 --pp 16 --microbatches 192 --json >"$TMP/g.json" ||
    fail "simulate gpt3-175b"
if $PY - "$TMP/g.json" <<'EOF'; then ok "GPT-3 175B: MFU equals Megatron-LM's model FLOPs by hand"; else fail "GPT-3 175B MFU"; fi
import json, sys
r = json.load(open(sys.argv[1]))
l, h, V, s, T = 96, 12288, 51200, 2048, 1536 * 2048
N = 12 * l * h * h + 13 * l * h + (V + s) * h
# Megatron-LM's model FLOPs: 72 l h^2 + 12 l h s + 6 V h per token (the weights a matmul reads).
hand = (72 * l * h * h + 12 * l * h * s + 6 * V * h) * T / (r["step_time_s"] * 1024 * 312e12)
print("# MFU %.4f%%, hand %.4f%%, HFU %.4f%%" % (100 * r["mfu"], 100 * hand, 100 * r["hfu"]))
assert abs(r["mfu"] / hand - 1) < 1e-9, (r["mfu"], hand)
assert r["inputs"]["parameters"] == N
EOF

$T "$DISTIR" simulate --model gpt3-125m --hw a100-dgx:1 >/dev/null 2>"$TMP/w.err" ||
    fail "simulate with defaults"
check "defaults: a warning about f32 on a bf16 device" grep -q "computes in f32 (the default)" "$TMP/w.err"
check "defaults: a warning about SGD" grep -q "trains with SGD (the default)" "$TMP/w.err"
check "defaults: a warning about unfused element-wise kernels" \
    grep -q "kernel of its own (--kernels eager, the default)" "$TMP/w.err"
$T "$DISTIR" simulate --model gpt3-125m --dtype bf16 --optimizer adam --kernels eager \
    --hw a100-dgx:1 >/dev/null 2>"$TMP/w2.err" || fail "simulate with the defaults given"
check "defaults given: no warning" [ ! -s "$TMP/w2.err" ]

# --math tf32: the f32 model's matrix products run at A100's TF32 peak (156 vs 19.5 TFLOP/s).
step() {
    $T "$DISTIR" simulate --model gpt3-125m --batch 8 --optimizer adam --hw a100-dgx:1 --dp 8 "$@" --json \
        2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["step_time_s"])'
}
ieee=$(step) tf32=$(step --math tf32) ieee2=$(step --math ieee)
echo "# gpt3-125m f32 on 8 A100s: $ieee s, $tf32 s with --math tf32"
check "--math tf32 is faster, --math ieee is the default" \
    $PY -c "import sys; sys.exit(0 if $tf32 < 0.5 * $ieee and $ieee2 == $ieee else 1)"
"$DISTIR" simulate --model gpt3-125m --math fp8 >/dev/null 2>"$TMP/m.err"
check "--math fp8 is a usage error (exit 2)" [ $? -eq 2 ]
check "... naming the choices" grep -q "math takes tf32 or ieee" "$TMP/m.err"

# --kernels fused: element-wise chains as one kernel each (Megatron-LM's fused kernels): fewer
# bytes and launches, so a faster step, and never a higher peak (values only a fused kernel
# reads are never stored; this GPT's peak, at the start of its backward, is the activations
# saved for it, which fusion keeps: the same peak; test_sim.c's test_fusion pins a lower one);
# eager (one kernel per op) is the default.
peak() {
    $T "$DISTIR" simulate --model gpt3-125m --batch 8 --optimizer adam --hw a100-dgx:1 --dp 8 "$@" --json \
        2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["peak_memory_bytes"])'
}
fused=$(step --kernels fused) eager=$(step --kernels eager)
echo "# gpt3-125m f32 on 8 A100s: $ieee s eager, $fused s with --kernels fused"
check "--kernels fused is faster, --kernels eager is the default" \
    $PY -c "import sys; sys.exit(0 if $fused < $ieee and $eager == $ieee else 1)"
check "--kernels fused: no higher a peak" \
    $PY -c "import sys; sys.exit(0 if $(peak --kernels fused) <= $(peak) else 1)"
"$DISTIR" simulate --model gpt3-125m --kernels jit >/dev/null 2>"$TMP/k.err"
check "--kernels jit is a usage error (exit 2) naming the choices" \
    sh -c "[ $? -eq 2 ] && grep -q 'kernels takes fused or eager' '$TMP/k.err'"

# --grad-accum-fusion off (with fused kernels): each weight gradient's cast to the f32 buffer
# and its accumulation there run as kernels of their own (frameworks without Megatron-LM's
# gradient accumulation fusion), a slower step; on is the default.
gstep() {
    $T "$DISTIR" simulate --model gpt3-125m --batch 16 --dtype bf16 --optimizer adam \
        --hw a100-dgx:1 --dp 8 --microbatches 2 --kernels fused "$@" --json \
        2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["step_time_s"])'
}
gon=$(gstep) goff=$(gstep --grad-accum-fusion off) gon2=$(gstep --grad-accum-fusion on)
echo "# gpt3-125m bf16, 2 microbatches on 8 A100s, fused: $gon s, $goff s with --grad-accum-fusion off"
check "--grad-accum-fusion off is slower, on is the default" \
    $PY -c "import sys; sys.exit(0 if $goff > $gon and $gon2 == $gon else 1)"
"$DISTIR" simulate --model gpt3-125m --grad-accum-fusion later >/dev/null 2>"$TMP/g.err"
check "--grad-accum-fusion later is a usage error (exit 2) naming the choices" \
    sh -c "[ $? -eq 2 ] && grep -q 'grad-accum-fusion takes on or off' '$TMP/g.err'"
start_daemon results || { fail "daemon start"; finish; }
remote=$(gstep --grad-accum-fusion off --server "$ADDR")
check "--grad-accum-fusion off reaches the daemon (SimOptions.no_grad_accum_fusion)" \
    [ "$remote" = "$goff" ]
remote=$(gstep --server "$ADDR")
check "... and is part of the cache key (the default's step is not that one)" [ "$remote" = "$gon" ]
remote=$(step --kernels fused --server "$ADDR")
check "--kernels fused reaches the daemon (SimOptions.fuse): its step equals the local one" \
    [ "$remote" = "$fused" ]
remote_eager=$(step --server "$ADDR")
check "... and is part of the cache key (the eager step is not the fused one)" \
    [ "$remote_eager" = "$ieee" ]
stop_daemon
finish
