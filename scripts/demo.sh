#!/bin/sh
# demo.sh BUILD_DIR: shows distir working end to end on a bundled model:
# the module in text form, its canonical hash, a text -> protobuf -> text
# round trip, a simulation on an A100 node (table), strategies of GPT-3 1.3B,
# a GPT-3 175B plan by model name, a Llama plan, the global view (seed
# 003's annotated MLP propagated and lowered), predictions against measured runs, and
# then the daemon: the same simulation twice over gRPC (the second a
# cache hit) and a strategy search on its workers.
set -eu
B=${1:-build/release}
D="$B/distir"
EX=examples/mlp_dp.dir
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== the module ($EX): a small MLP, data parallel on devices 1 and 2"
"$D" print "$EX"
echo
echo "== verify and hash"
"$D" verify "$EX"
"$D" hash "$EX"
echo
echo "== convert to protobuf and back: the hash is unchanged"
"$D" convert "$EX" -o "$tmp/m.pb"
"$D" convert "$tmp/m.pb" -o "$tmp/m.dir"
"$D" hash "$tmp/m.pb"
cmp "$EX" "$tmp/m.dir" && echo "text -> protobuf -> text is byte-identical"
echo
echo "== simulate on a100-dgx (one node, 8 x A100 80 GB)"
"$D" simulate "$EX" --hw a100-dgx --trace "$tmp/trace.json"
echo "(a Chrome/Perfetto trace was written to $tmp/trace.json)"
echo
echo "== strategies: GPT-3 1.3B (bf16, batch 16) on two DGX A100 nodes (16 GPUs)"
"$D" model gpt --preset gpt3-1.3b --batch 16 --dtype bf16 -o "$tmp/gpt.pb"
"$D" print --stats "$tmp/gpt.pb"
printf '%-48s %12s %12s %8s\n' strategy "step time" "peak memory" MFU
for s in "--dp 16" "--dp 8 --tp 2" "--dp 4 --tp 4" "--dp 4 --tp 2 --pp 2 --microbatches 4" \
    "--dp 8 --tp 2 --zero 1" "--dp 4 --tp 4 --recompute full" \
    "--dp 2 --tp 2 --pp 4 --microbatches 8 --schedule 1f1b" \
    "--dp 16 --microbatches 1 --overlap-grad-reduce" \
    "--stages 2x4,8x1 --microbatches 2" "--dp 4 --tp 4 --tp-layers 0-11"; do
    # shellcheck disable=SC2086
    "$D" simulate "$tmp/gpt.pb" --hw a100-dgx:2 $s --json >"$tmp/r.json"
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]));
print("%-48s %10.2f ms %8.2f GiB %7.1f%%" % (sys.argv[2], r["step_time_s"]*1e3,
      r["peak_memory_bytes"]/2**30, r["mfu"]*100))' "$tmp/r.json" "$s"
done
echo
echo "== a plan by model name: GPT-3 175B (batch 1,536, bf16, Adam) on 1,024 A100s (128 DGX nodes), fused element-wise kernels as Megatron-LM runs them"
"$D" simulate --model gpt3-175b --batch 1536 --dtype bf16 --optimizer adam --hw a100-dgx:128 \
    --dp 8 --tp 8 --pp 16 --microbatches 192 --recompute full --kernels fused
echo
echo "== a Llama plan: Llama-3-70B (grouped-query attention, SwiGLU), 8,192 tokens per sequence, on 64 H100s"
"$D" simulate --model llama3-70b --batch 256 --dtype bf16 --optimizer adam --hw h100-dgx:8 \
    --tp 8 --pp 4 --dp 2 --microbatches 64 --recompute full --sequence-parallel --kernels fused |
    sed -n '1,11p'
echo
echo "== a mixture of experts: Mixtral-8x7B (46.7B parameters, 12.9B active) on 64 H100s, without expert parallelism, over groups of 4 of the 8 data ranks, over all 8"
for ep in 1 4 8; do
    echo "-- --ep $ep"
    "$D" simulate --model mixtral-8x7b --batch 256 --dtype bf16 --optimizer adam --hw h100-dgx:8 \
        --tp 2 --pp 4 --dp 8 --ep $ep --microbatches 32 --recompute full --sequence-parallel \
        --zero 1 --kernels fused | grep -E '^(strategy|step time|MFU|exposed comm|peak memory) '
done
echo
echo "== long context: Llama-3-8B at 131,072 tokens on 64 H100s, sequence split over 8 ranks (--cp 8) and within them over the tensor ranks (sequence parallelism), fused attention"
"$D" simulate --model llama3-8b --attention fused --seq 131072 --batch 16 --dtype bf16 --optimizer adam \
    --hw h100-dgx:8 --tp 4 --cp 8 --dp 2 --microbatches 8 --recompute full --zero 1 --sequence-parallel \
    --kernels fused |
    grep -E '^(strategy|step time|MFU|HFU|exposed comm|peak memory) '
echo "(MFU counts attention dense, as PaLM does; the causal kernel does half of it: HFU)"
echo
echo "== the global view: seed 003's MLP with one annotation (lv1 split along columns on mesh0)"
# Types shortened to their placement: !dist.dtensor<128x128xf32, @mesh0, [S[1]]> -> [S[1]].
"$D" shard tests/ir/seed003_annotated.dir | grep -E 'func|MatMul|Gelu|redistribute' |
    sed 's/!dist.dtensor<128x128xf32, @mesh0, \(\[[^]]*\]*\]\)>/\1/g'
echo "-- lowered to each device: 128x64 shards and one all-reduce"
"$D" shard tests/ir/seed003_annotated.dir --lower | grep -E '"(MatMul|Gelu|dist.all_reduce)"' |
    sed 's/!dist.tensor<\([0-9x]*\)xf32, d>/\1/g'
echo
echo "== predictions against measured runs: vTrain's multi-node file (20 of 109 runs, A100s)"
"$D" validate --runs tests/data/vtrain/ground_truth_multi.csv --sample 20 | sed -n '/^size/,/^all/p'
echo "(distir validate: docs/validation.md; the MAPE targets are met, the largest error and the rank correlation within each size not yet)"
echo
sh scripts/demo-daemon.sh "$B"
