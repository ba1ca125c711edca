#!/bin/sh
# test_ci_example.sh: examples/ci/ci_step.sh as a CI system runs it: on
# "main" it exports the PyTorch model to ONNX and sets the baseline; on a
# change that keeps the model it passes (exit 0); on one that widens the
# hidden layers it fails (exit 1) with a JUnit file holding the failure and
# a "::error" annotation line. Once on a database file, once with a daemon.
. tests/integration/lib.sh

if ! /usr/bin/python3 -c 'import torch, onnx' 2>/dev/null; then
    fail "/usr/bin/python3 cannot import torch and onnx (python3-torch, python3-onnx)"
    finish
fi
export DISTIR="$ROOT/$DISTIR"
step() { sh examples/ci/ci_step.sh "$@"; }

run_example() {
    tag=$1
    shift
    step set "$TMP/$tag" --label main-1 "$@" >"$TMP/$tag.set" 2>&1
    check "$tag: on main the baseline is set" [ $? -eq 0 ]
    check "$tag: ... from the exported ONNX model" [ -s "$TMP/$tag/model.onnx" ]
    step check "$TMP/$tag" "$@" >"$TMP/$tag.same" 2>&1
    check "$tag: an unchanged model passes (exit 0)" [ $? -eq 0 ]
    check "$tag: ... its JUnit has no failure" /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
sys.exit(not (len(list(r.iter("testcase"))) == 2 and not list(r.iter("failure"))))' "$TMP/$tag/distir-junit.xml"
    step check "$TMP/$tag" --hidden 128 "$@" >"$TMP/$tag.wide" 2>&1
    check "$tag: wider hidden layers fail the job (exit 1)" [ $? -eq 1 ]
    check "$tag: ... with an annotation naming the metric" \
        grep -q "^::error title=distir regression::peak memory grew by" "$TMP/$tag.wide"
    check "$tag: ... and a JUnit failure for peak memory" /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
f = [c.get("name") for c in r.iter("testcase") if c.find("failure") is not None]
sys.exit("peak_memory_bytes" not in f)' "$TMP/$tag/distir-junit.xml"
}

run_example db
start_daemon ci || { fail "daemon start"; finish; }
run_example server --server "$ADDR"
stop_daemon
finish
