#!/bin/sh
# test_cli_shard.sh: the global view from the command line (distir shard)
# and through the daemon. Checks: --annotate on the plain seed-003 MLP gives
# the same global module as the annotated file; --lower prints one pmap with
# 128x64 MatMuls and one all_reduce; --mesh declares a mesh that annotations
# use; bad flags fail with a message and exit 1 or 2; `distir run` of the
# annotated module, of its lowering and of the plain module agree; `distir
# simulate` of the annotated module equals the simulation of its lowering;
# the protobuf form keeps the annotation; an imported ONNX Runtime training
# graph shards, lowers and simulates; the daemon simulates an annotated
# module as in-process (bit for bit) and keys its cache on the annotation.
. tests/integration/lib.sh

S3=tests/ir/seed003_annotated.dir
S2=tests/ir/seed002_calls.dir
T="timeout 60"

# The plain MLP: the annotation line dropped, its use renamed.
grep -v 'dist.annotate_sharding' $S3 | sed 's/(%lv2, %weight2)/(%lv1, %weight2)/' >"$TMP/plain.dir"
$T "$DISTIR" shard $S3 -o "$TMP/g_file.dir" || fail "shard the annotated file"
$T "$DISTIR" shard "$TMP/plain.dir" --annotate lv1=mesh0:S[1] -o "$TMP/g_flag.dir"
check "--annotate succeeds" [ $? -eq 0 ]
check "--annotate equals the annotation written in the file" cmp -s "$TMP/g_file.dir" "$TMP/g_flag.dir"
check "the global module has weight2 on S[0]" \
    grep -q '%weight2: !dist.dtensor<128x128xf32, @mesh0, \[S\[0\]\]>' "$TMP/g_file.dir"

$T "$DISTIR" shard $S3 --lower -o "$TMP/low.dir"
check "--lower succeeds" [ $? -eq 0 ]
check "--lower: one pmap" [ "$(grep -c '"dist.pmap"' "$TMP/low.dir")" -eq 1 ]
check "--lower: one all_reduce" [ "$(grep -c '"dist.all_reduce"' "$TMP/low.dir")" -eq 1 ]
check "--lower: a MatMul on 128x64 shards" \
    grep -q '"MatMul".*!dist.tensor<128x128xf32, d>, !dist.tensor<128x64xf32, d>' "$TMP/low.dir"

$T "$DISTIR" shard "$TMP/plain.dir" --mesh grid=2x2@4 --annotate 'lv0=grid:S[0],S[1]' --lower \
    -o "$TMP/grid.dir"
check "--mesh declares a 2x2 mesh for --annotate" [ $? -eq 0 ]
check "--mesh: devices 4.. as given" grep -q 'dist.mesh @grid = <\[2, 2\], devices = \[4, 5, 6, 7\]>' \
    "$TMP/grid.dir"

"$DISTIR" shard "$TMP/plain.dir" --annotate lv1=mesh0:S[7] >/dev/null 2>"$TMP/e1"
check "a placement past the rank fails" [ $? -eq 1 ]
check "... naming the problem" grep -q 'dimension' "$TMP/e1"
"$DISTIR" shard "$TMP/plain.dir" --annotate nosuch=mesh0:R >/dev/null 2>"$TMP/e2"
check "an unknown value fails" [ $? -eq 1 ]
check "... naming it" grep -q 'no value named %nosuch' "$TMP/e2"
"$DISTIR" shard "$TMP/plain.dir" --annotate lv1 >/dev/null 2>"$TMP/e3"
check "a malformed --annotate fails" [ $? -eq 1 ]
check "... showing the form" grep -q 'expected VALUE=MESH:PLACEMENTS' "$TMP/e3"
"$DISTIR" shard "$TMP/plain.dir" --mesh m=0x2 >/dev/null 2>"$TMP/e4"
check "a bad --mesh fails" [ $? -eq 1 ]
"$DISTIR" shard >/dev/null 2>&1
check "no file is a usage error" [ $? -eq 2 ]

# Execution: annotated (sequential semantics), lowered (per device) and plain agree.
$T "$DISTIR" run $S3 --random-seed 4 >"$TMP/run_a.txt" || fail "run annotated"
$T "$DISTIR" run "$TMP/low.dir" --random-seed 4 >"$TMP/run_l.txt" || fail "run lowered"
$T "$DISTIR" run "$TMP/plain.dir" --random-seed 4 >"$TMP/run_p.txt" || fail "run plain"
# The printed summaries (min, max, mean) agree; the names of the results may differ.
cut -c26- "$TMP/run_a.txt" >"$TMP/ra"
cut -c26- "$TMP/run_l.txt" >"$TMP/rl"
cut -c26- "$TMP/run_p.txt" >"$TMP/rp"
check "run: the annotated module computes the plain one" cmp -s "$TMP/ra" "$TMP/rp"
check "run: its lowering too" cmp -s "$TMP/rl" "$TMP/rp"
$T "$DISTIR" run $S2 --random-seed 2 >/dev/null
check "run: seed 002's two meshes" [ $? -eq 0 ]

# Simulation: an annotated module is its lowering.
$T "$DISTIR" simulate $S3 --hw a100-dgx --json >"$TMP/sim_a.json" || fail "simulate annotated"
$T "$DISTIR" simulate "$TMP/low.dir" --hw a100-dgx --json >"$TMP/sim_l.json" || fail "simulate lowered"
# The model name (the file) differs, and the model statistics (counted on the
# module as given: the lowered one hides its MatMuls in a pmap); the rest is equal.
sed 's/"model":"[^"]*"//; s/"attention_flops":[0-9.e+]*//' "$TMP/sim_a.json" >"$TMP/sa"
sed 's/"model":"[^"]*"//; s/"attention_flops":[0-9.e+]*//' "$TMP/sim_l.json" >"$TMP/sl"
check "simulate: the annotated module equals its lowering" cmp -s "$TMP/sa" "$TMP/sl"
"$DISTIR" simulate $S3 --hw a100-dgx --tp 2 >/dev/null 2>"$TMP/e5"
check "a strategy on an annotated module is refused" grep -q 'takes no strategy' "$TMP/e5"

# The protobuf form keeps the annotation.
$T "$DISTIR" convert $S3 -o "$TMP/s3.pb" || fail "convert to protobuf"
$T "$DISTIR" shard "$TMP/s3.pb" -o "$TMP/g_pb.dir"
check "the protobuf form shards as the text form" cmp -s "$TMP/g_pb.dir" "$TMP/g_file.dir"

# An imported ONNX Runtime training graph (on device 0, with opaque loss ops): W1 split by
# columns propagates Megatron-style through the forward and backward pass and the SGD update,
# with one reduction (after the row-parallel W2 Gemm).
ORT=tests/data/onnx/mnist_gemm_bw_running.onnx
$T "$DISTIR" import $ORT -o "$TMP/ort.dir" || fail "import the ORT graph"
$T "$DISTIR" shard "$TMP/ort.dir" --mesh m=2 --annotate W1=m:S[1] -o "$TMP/ort_g.dir"
check "an imported module shards" [ $? -eq 0 ]
check "... W2 comes out row-parallel" grep -q '%W2: !dist.dtensor<128x32xf32, @m, \[S\[0\]\]>' "$TMP/ort_g.dir"
check "... the W1 update stays split" \
    grep -q '%W1_SGD_out = "Sub".*-> !dist.dtensor<784x128xf32, @m, \[S\[1\]\]>' "$TMP/ort_g.dir"
check "... with one redistribution" [ "$(grep -c '"dist.redistribute"' "$TMP/ort_g.dir")" -eq 1 ]
$T "$DISTIR" shard "$TMP/ort.dir" --mesh m=2 --annotate W1=m:S[1] --lower -o "$TMP/ort_l.dir"
check "... and lowers (opaque ops keep their declared shards)" [ $? -eq 0 ]
$T "$DISTIR" simulate "$TMP/ort_l.dir" --hw a100-dgx >/dev/null
check "... and simulates" [ $? -eq 0 ]

# A call without a mesh is refused by the simulator with the way out; with a mesh it lowers.
cat >"$TMP/call.dir" <<'EOF2'
func @main(%x: !dist.tensor<8x8xf32>) -> (!dist.tensor<8x8xf32>) {
  %y = "func.call"(%x) {callee = @f} : (!dist.tensor<8x8xf32>) -> !dist.tensor<8x8xf32>
  return %y : !dist.tensor<8x8xf32>
}
func @f(%x: !dist.tensor<8x8xf32>) -> (!dist.tensor<8x8xf32>) {
  %y = "Relu"(%x) : (!dist.tensor<8x8xf32>) -> !dist.tensor<8x8xf32>
  return %y : !dist.tensor<8x8xf32>
}
EOF2
"$DISTIR" simulate "$TMP/call.dir" --hw a100-dgx >/dev/null 2>"$TMP/e6"
check "a call without a mesh is not simulated" grep -q 'lower the module first' "$TMP/e6"
{ echo 'dist.mesh @m = <[2]>'; cat "$TMP/call.dir"; } >"$TMP/callmesh.dir"
$T "$DISTIR" simulate "$TMP/callmesh.dir" --hw a100-dgx >/dev/null
check "a call on a module with a mesh is lowered and simulated" [ $? -eq 0 ]

# The daemon.
start_daemon shard || { fail "daemon start"; finish; }
$T "$DISTIR" simulate $S3 --hw a100-dgx --server "$ADDR" --json >"$TMP/r1.json"
check "the daemon simulates an annotated module" [ $? -eq 0 ]
strip_cache "$TMP/r1.json" >"$TMP/r1.stripped"
check "... as in-process, bit for bit" cmp -s "$TMP/r1.stripped" "$TMP/sim_a.json"
$T "$DISTIR" simulate $S2 --hw a100-dgx --server "$ADDR" --json >"$TMP/r2.json"
check "the daemon simulates seed 002 (two meshes, calls)" [ $? -eq 0 ]
sed 's/placement = "S\[1\]"/placement = "S[0]"/' $S3 >"$TMP/other.dir"
$T "$DISTIR" simulate "$TMP/other.dir" --hw a100-dgx --server "$ADDR" --json >"$TMP/r3.json" ||
    fail "simulate another annotation"
k1=$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/r1.json")
k3=$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/r3.json")
check "another annotation is another cache key" test -n "$k1" -a "$k1" != "$k3"
stop_daemon
check "distird exits 0" [ $? -eq 0 ]
finish
