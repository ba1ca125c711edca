#!/bin/sh
# test_cli_mixed_precision.sh: model-state memory of a 16-bit model under Adam
# (docs/memory.md). GPT-3 175B in bf16 on 1,024 A100s, tp 8, pp 16, dp 8, no
# ZeRO: with Megatron-LM's mixed precision each GPU of a middle stage holds
# 2 (bf16 weights) + 4 (f32 gradients) + 12 (f32 master weights and moments)
# = 18 bytes per parameter it holds, i.e. 18 x parameters / (tp x pp) within
# 1% (the embedding sits on the first and last stages only); 8 bytes with
# --precision pure. (With mixed-grad16 the peak can fall in the update, where
# the f32 copies of the 16-bit gradients exist too, as in Megatron-LM's
# optimizer.) Every device's and stage's memory classes add up to its peak, and
# the capacity they are judged against is the usable 75 GiB of an 80 GiB A100.
. tests/integration/lib.sh

PY=/usr/bin/python3
run() {
    timeout 120 "$DISTIR" simulate --model gpt3-175b --batch 1536 --dtype bf16 --optimizer adam \
        --hw a100-dgx:128 --tp 8 --pp 16 --dp 8 --microbatches 192 --schedule 1f1b \
        --recompute full "$@" --json
}

# expect PER_PARAM_BYTES [flags]
expect() {
    want=$1
    shift
    if ! run "$@" >"$TMP/r.json"; then
        fail "simulate $* failed"
        return
    fi
    out=$($PY - "$TMP/r.json" "$want" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
want = float(sys.argv[2])
params = d["inputs"]["parameters"]
model = want * params / (8 * 16)
bad = []
for s in d["stages"][1:-1]:
    c = s["peak_by_class"]
    state = c["weights"] + c["gradients"] + c["optimizer_state"]
    err = state / model - 1
    if abs(err) > 0.01:
        bad.append("stage %d: %d bytes of model state, want %.0f (%+.2f%%)"
                   % (s["stage"], state, model, 100 * err))
# Out of memory is judged against the usable memory: 80 GiB less 1 GiB and 5%.
if d["devices"][0]["capacity_bytes"] != 75 * 2**30:
    bad.append("capacity %d, want 75 GiB" % d["devices"][0]["capacity_bytes"])
for x in d["stages"] + d["devices"]:
    if sum(x["peak_by_class"].values()) != x["peak_memory_bytes"]:
        bad.append("classes do not add up to the peak: %s" % x.get("stage", x.get("id")))
        break
print("; ".join(bad) if bad else "ok %.4f GiB" % (model / 2**30))
EOF
)
    case $out in
    ok*) ok "$want bytes per parameter ${*:-(mixed)}: $out" ;;
    *) fail "$want bytes per parameter ${*:-(mixed)}: $out" ;;
    esac
}

expect 18
expect 8 --precision pure
exit $failures
