#!/bin/sh
# test_cli_opaque.sh: ops the cost model has no rule for. ONNX Runtime's
# real training graph (com.microsoft SoftmaxCrossEntropy and its gradient,
# SGDOptimizer) simulates without measured times, also under --strict, and
# without a warning. An op with no rule at all is priced by its bytes with a
# warning naming it; --strict refuses it (exit 1, naming the op); a measured
# time for its signature silences the warning; --strict with --server is a
# usage error.
. tests/integration/lib.sh

T="timeout 60"
$T "$DISTIR" import tests/data/onnx/mnist_gemm_bw_running.onnx -o "$TMP/ort.dir" ||
    fail "import the ORT graph"
grep -q '"SoftmaxCrossEntropy"' "$TMP/ort.dir" || fail "the ORT graph has its loss as an opaque op"
for flags in "" "--strict"; do
    # shellcheck disable=SC2086
    $T "$DISTIR" simulate "$TMP/ort.dir" $flags >"$TMP/o.out" 2>"$TMP/o.err"
    rc=$?
    if [ $rc -eq 0 ] && [ ! -s "$TMP/o.err" ] && grep -q "^step time" "$TMP/o.out"; then
        ok "ORT graph $flags: simulated, no warning"
    else
        fail "ORT graph $flags: exit $rc: $(cat "$TMP/o.err")"
    fi
done

cat >"$TMP/frob.dir" <<'IR'
func @main(%x: !dist.tensor<256x256xf32, 0>) -> (!dist.tensor<256x256xf32, 0>) {
  %y = "dist.opaque"(%x) {op_type = "FancyConv"} : (!dist.tensor<256x256xf32, 0>) -> !dist.tensor<256x256xf32, 0>
  return %y : !dist.tensor<256x256xf32, 0>
}
IR
$T "$DISTIR" simulate "$TMP/frob.dir" >"$TMP/o.out" 2>"$TMP/o.err"
rc=$?
if [ $rc -eq 0 ] && grep -q "warning: 1 op(s) have no cost model.*FancyConv" "$TMP/o.err"; then
    ok "no rule: priced by its bytes with a warning naming FancyConv"
else
    fail "no rule: exit $rc: $(cat "$TMP/o.err")"
fi
$T "$DISTIR" simulate "$TMP/frob.dir" --strict >"$TMP/o.out" 2>"$TMP/o.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "FancyConv.*has no cost model" "$TMP/o.err"; then
    ok "--strict: refused naming FancyConv"
else
    fail "--strict: exit $rc: $(cat "$TMP/o.err")"
fi
sig=$(sed -n "s/.*signature '\(.*\)' in an op-time.*/\1/p" "$TMP/o.err")
printf 'signature,seconds\n%s,0.25\n' "$sig" >"$TMP/times.csv"
$T "$DISTIR" simulate "$TMP/frob.dir" --op-times "$TMP/times.csv" >"$TMP/o.out" 2>"$TMP/o.err"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$TMP/o.err" ] && grep -q "^step time  *250.0* ms" "$TMP/o.out"; then
    ok "a measured time: used, no warning"
else
    fail "measured time: exit $rc: $(cat "$TMP/o.err" "$TMP/o.out" "$TMP/times.csv")"
fi
$T "$DISTIR" simulate "$TMP/frob.dir" --strict --server 127.0.0.1:1 >/dev/null 2>"$TMP/o.err"
[ $? -eq 2 ] && ok "--strict --server: usage error" || fail "--strict --server: $(cat "$TMP/o.err")"
finish
