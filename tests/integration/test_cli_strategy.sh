#!/bin/sh
# test_cli_strategy.sh: the strategy flags of `distir transform` and
# `distir simulate`, which go through the library's one parser and
# normalizer (lib/strategy). Checks: what no strategy can be is refused with
# exit status 2 and the library's message, before any work (also with
# --server, without contacting it): --dp 0, --schedule interleaved:0 and
# interleaved:1, a schedule without --pp, --tp-layers without --tp;
# --pp together with --stages DPxTP:LAYERS works when the counts agree; the
# same flags as "--name=value" mean the same.
. tests/integration/lib.sh

T="timeout 60"
$T "$DISTIR" model gpt --layers 4 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 \
    -o "$TMP/gpt.pb" || fail "model gpt"

# refused MESSAGE FLAGS...: transform and simulate (in-process and remote) exit 2 saying MESSAGE.
refused() {
    want=$1
    shift
    for how in transform simulate remote; do
        case $how in
        transform) cmd="transform $TMP/gpt.pb -o $TMP/out.dir" ;;
        simulate) cmd="simulate $TMP/gpt.pb" ;;
        remote) cmd="simulate $TMP/gpt.pb --server 127.0.0.1:1" ;;
        esac
        # shellcheck disable=SC2086
        $T "$DISTIR" $cmd "$@" >"$TMP/r.out" 2>"$TMP/r.err"
        rc=$?
        if [ $rc -eq 2 ] && grep -qF -- "$want" "$TMP/r.err"; then
            ok "$how $*: exit 2, '$want'"
        else
            fail "$how $*: exit $rc, $(cat "$TMP/r.err")"
        fi
    done
}

refused "dp=0 is out of range (1 to 1048576)" --dp 0
refused "dp=0 is out of range" --dp=0
refused "needs at least 2 virtual stages per device (interleaved:V), got 0" \
    --pp 2 --schedule interleaved:0
refused "needs at least 2 virtual stages per device (interleaved:V), got 1" \
    --pp 2 --schedule interleaved:1
refused "the gpipe schedule orders pipeline stages and pp=1" --schedule gpipe
refused "the 1f1b schedule orders pipeline stages and pp=1" --dp 2 --schedule 1f1b
refused "tp_layers chooses the tensor-parallel layers and tp=1" --tp-layers 0-1
refused "tp_layers chooses the tensor-parallel layers and tp=1" --dp 2 --tp-layers 0-1
refused "the strategy lists 2 pipeline stages, but pp=4" --pp 4 --stages 1x1:2,1x1:2
refused "zero=4 is out of range (0 to 3)" --zero 4
refused "option '--sequence-parallel' takes no value" --sequence-parallel=1

# --pp with per-stage layer counts, in either order, as the counts say.
for flags in "--pp 4 --stages 1x1:1,1x1:1,2x1:1,1x1:1 --microbatches 4" \
    "--stages 1x1:1,1x1:1,2x1:1,1x1:1 --pp 4 --microbatches 4" \
    "--stages=1x1:1,1x1:1,2x1:1,1x1:1 --pp=4 --microbatches=4"; do
    # shellcheck disable=SC2086
    if $T "$DISTIR" simulate "$TMP/gpt.pb" --hw a100-dgx $flags --json >"$TMP/pp.json"; then
        ok "simulate $flags"
    else
        fail "simulate $flags"
    fi
    # shellcheck disable=SC2086
    $T "$DISTIR" transform "$TMP/gpt.pb" $flags --stats -o "$TMP/pp.dir" 2>"$TMP/pp.err"
    check "transform $flags: per-stage degrees and layers kept" \
        grep -qF "pp=4 m=4 schedule=1f1b" "$TMP/pp.err"
    check "transform $flags: the stages" grep -qF "stages=1x1:1,1x1:1,2x1:1,1x1:1" "$TMP/pp.err"
done

# "--name=value" and "--name value" are the same strategy.
$T "$DISTIR" transform "$TMP/gpt.pb" --dp 2 --tp 2 --tp-layers 0-1 -o "$TMP/a.dir" ||
    fail "transform --dp 2 --tp 2"
$T "$DISTIR" transform "$TMP/gpt.pb" --dp=2 --tp=2 --tp-layers=1,0 -o "$TMP/b.dir" ||
    fail "transform --dp=2 --tp=2"
check "--name=value is --name value (and tp_layers is a set)" cmp -s "$TMP/a.dir" "$TMP/b.dir"

exit $failures
