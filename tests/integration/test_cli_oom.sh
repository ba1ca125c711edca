#!/bin/sh
# test_cli_oom.sh: `distir simulate --fail-on-oom` exits 1 exactly when a
# device's peak memory exceeds its capacity, naming the device and the
# excess, and 0 otherwise; in-process and against a daemon. The edge is
# taken from the model's own peak: capacity = peak fits, peak - 1 does not.
# Without the flag an out-of-memory result still exits 0 (the table says YES).
. tests/integration/lib.sh

T="timeout 60"
$T "$DISTIR" model gpt --layers 4 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 \
    -o "$TMP/gpt.pb" || fail "model gpt"
$T "$DISTIR" simulate "$TMP/gpt.pb" --pp 2 --json >"$TMP/r.json" || fail "simulate --json"
peak=$(sed -n 's/.*,"step_time_s":[^,]*,"peak_memory_bytes":\([0-9]*\),.*/\1/p' "$TMP/r.json")
[ -n "$peak" ] && [ "$peak" -gt 0 ] || fail "no peak_memory_bytes in the JSON"

# hw_with CAPACITY OUT: a100-dgx with the device memory set to CAPACITY bytes, none reserved.
hw_with() {
    "$DISTIR" hw show a100-dgx |
        sed -e "s/\"memory_bytes\": [0-9]*/\"memory_bytes\": $1/" \
            -e "s/\"memory_reserved\": [0-9.e+]*/\"memory_reserved\": 0/" >"$2"
}
hw_with "$peak" "$TMP/fits.json"
hw_with $((peak - 1)) "$TMP/over.json"
grep -q "\"memory_bytes\": $((peak - 1))," "$TMP/over.json" || fail "hardware file not rewritten"

# expect HOW WANT_RC HWFILE [flags]
expect() {
    how=$1 want=$2 hw=$3
    shift 3
    case $how in
    local) set -- "$@" ;;
    remote) set -- "$@" --server "$ADDR" ;;
    esac
    $T "$DISTIR" simulate "$TMP/gpt.pb" --pp 2 --hw "$hw" "$@" >"$TMP/o.out" 2>"$TMP/o.err"
    rc=$?
    if [ $rc -ne "$want" ]; then
        fail "$how $(basename "$hw") $*: exit $rc, want $want: $(cat "$TMP/o.err")"
        return
    fi
    if [ "$want" -eq 1 ]; then
        if grep -q "out of memory on 1 of 2 devices: device 0 needs $peak bytes" "$TMP/o.err" &&
            grep -q "1 bytes (0.00 GiB) over its capacity" "$TMP/o.err"; then
            ok "$how $(basename "$hw") $*: exit 1 naming device 0 and an excess of 1 byte"
        else
            fail "$how: message: $(cat "$TMP/o.err")"
        fi
    else
        ok "$how $(basename "$hw") $*: exit $rc"
    fi
    grep -q "peak mem" "$TMP/o.out" || fail "$how: the result table is printed too"
}

start_daemon oom || fail "daemon"
for how in local remote; do
    expect $how 0 "$TMP/fits.json" --fail-on-oom
    expect $how 1 "$TMP/over.json" --fail-on-oom
    expect $how 0 "$TMP/over.json"
done
"$DISTIR" simulate --help | grep -q -- "--fail-on-oom" && ok "help lists --fail-on-oom" ||
    fail "help lists --fail-on-oom"
stop_daemon || fail "daemon exit status"
finish
