#!/bin/sh
# test_cli_model.sh: the text result names what was simulated and has a row
# per pipeline stage (--devices: per device); and
# `distir simulate --model NAME [model options]` simulates
# a built-in model with no file: the same result, bit for bit, as the file
# `distir model` writes with the same options, in-process and through the
# daemon, where it has the same cache key (the second request is a hit): the CLI
# sends a ModelSpec and the daemon generates the module. `distir search
# --model` answers as the search of the file, in-process and through the daemon.
. tests/integration/lib.sh

T="timeout 120"
OPTS="--batch 16 --dtype bf16"
$T "$DISTIR" model gpt --preset gpt3-125m $OPTS -o "$TMP/g.pb" || fail "model gpt"
$T "$DISTIR" simulate "$TMP/g.pb" --hw a100-dgx:8 --dp 8 --json >"$TMP/file.json" || fail "file"
$T "$DISTIR" simulate --model gpt3-125m $OPTS --hw a100-dgx:8 --dp 8 --json >"$TMP/model.json"
check "--model gpt3-125m simulates (exit 0)" [ $? -eq 0 ]
# The inputs name the file or the model; everything after them is the result.
after_inputs() { sed 's/^{"inputs":{"model":"[^"]*",/{/' "$1"; }
after_inputs "$TMP/file.json" >"$TMP/file.rest"
after_inputs "$TMP/model.json" >"$TMP/model.rest"
check "... equal to the file's result bit for bit" cmp -s "$TMP/file.rest" "$TMP/model.rest"
check "... whose inputs name the model" grep -q '^{"inputs":{"model":"gpt3-125m",' "$TMP/model.json"
$T "$DISTIR" simulate --model gpt --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 64 --batch 8 \
    --json >"$TMP/gpt.json"
check "--model gpt with generator options" grep -q '"step_time_s"' "$TMP/gpt.json"
$T "$DISTIR" simulate --model mlp --batch=8 --hidden 32 --json >"$TMP/mlp.json"
check "--model mlp with --batch=8" grep -q '"step_time_s"' "$TMP/mlp.json"
"$DISTIR" simulate --model nope 2>"$TMP/nope.err"
check "an unknown model is a usage error (exit 2)" [ $? -eq 2 ]
check "... naming the presets" grep -q 'known: gpt3-125m' "$TMP/nope.err"
"$DISTIR" simulate "$TMP/g.pb" --batch 4 >/dev/null 2>"$TMP/opt.err"
check "a model option without --model is a usage error (exit 2)" [ $? -eq 2 ]

# Llama: a preset by name, its parameter count, a plan, and a bad grouping refused.
$T "$DISTIR" model llama --preset llama3-8b --batch 8 -o "$TMP/l8.pb" || fail "model llama"
check "llama3-8b has 8,030,261,248 parameters" \
    sh -c "'$DISTIR' print --stats '$TMP/l8.pb' | grep -q '^parameters  *8030261248$'"
# Per token: 6N, and 6N plus attention 12 l h s (l 32, h 4096, s 8192); N the weights a matmul
# reads: not the untied token embedding (128,256 x 4,096, only looked up) nor the 65 RMSNorms.
"$DISTIR" print --stats --json "$TMP/l8.pb" >"$TMP/l8.stats"
check "print --stats: FLOPs per token by 6N and with attention" /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["active_parameters"] == s["parameters"] == 8030261248 and s["tokens"] == 8 * 8192, s
N = 8030261248 - 128256 * 4096 - 65 * 4096
assert s["matmul_parameters"] == N == 7504658432, s
assert s["flops_per_token_6n"] == 6 * N, s
assert abs(s["model_flops_per_token"] - (6 * N + 12 * 32 * 4096 * 8192)) < 1, s' "$TMP/l8.stats"
$T "$DISTIR" simulate --model llama3-8b --batch 8 --dtype bf16 --optimizer adam --hw h100-dgx:1 \
    --tp 8 --json >"$TMP/l8.json"
check "simulate --model llama3-8b --tp 8 (exit 0)" [ $? -eq 0 ]
check "... names it in its inputs" grep -q '"inputs":{"model":"llama3-8b","parameters":8030261248,' \
    "$TMP/l8.json"
"$DISTIR" model llama --heads 8 --kv-heads 3 >/dev/null 2>"$TMP/kv.err"
check "--kv-heads that does not divide --heads is a usage error (exit 2)" [ $? -eq 2 ]
check "... naming the option" grep -q "not a multiple of --kv-heads 3" "$TMP/kv.err"

# The text result: what was simulated first, then one row per pipeline stage (--devices: per device).
$T "$DISTIR" simulate --model gpt3-125m $OPTS --hw a100-dgx:2 --dp 2 --tp 2 --pp 4 \
    --microbatches 8 >"$TMP/text.txt"
check "the text names the model and its parameters" grep -q '^model  *gpt3-125m (1\.2[0-9]*e+08 parameters, ' "$TMP/text.txt"
check "... the hardware" grep -q '^hardware  *a100-dgx:2: 16 devices, 8 per node' "$TMP/text.txt"
check "... the strategy" grep -q '^strategy  *dp=2 tp=2 pp=4 m=8 schedule=1f1b' "$TMP/text.txt"
check "... one row per stage, each of dp x tp = 4 devices" \
    [ "$(grep -c '^ *[0-3]  *4 ' "$TMP/text.txt")" -eq 4 ]
$T "$DISTIR" simulate --model gpt3-125m $OPTS --hw a100-dgx:2 --dp 2 --tp 2 --pp 4 \
    --microbatches 8 --devices >"$TMP/devices.txt"
check "--devices: one row per device (16)" [ "$(grep -c '^ *[0-9][0-9]*  *[0-9.]* [mu]*s ' "$TMP/devices.txt")" -eq 16 ]

start_daemon model || { fail "daemon start"; finish; }
$T "$DISTIR" simulate "$TMP/g.pb" --hw a100-dgx:8 --dp 8 --server "$ADDR" --json >"$TMP/s1.json"
$T "$DISTIR" simulate --model gpt3-125m $OPTS --hw a100-dgx:8 --dp 8 --server "$ADDR" --json \
    >"$TMP/s2.json"
k1=$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/s1.json")
k2=$(sed -n 's/.*"cache_key":"\([0-9a-f]*\)".*/\1/p' "$TMP/s2.json")
check "through the daemon --model has the file's cache key" [ -n "$k1" ] && [ "$k1" = "$k2" ]
check "... and is answered from the cache" grep -q '^{"cache":"hit"' "$TMP/s2.json"

# search --model: the same answer as the file's, in-process and through the daemon (which
# generates the module from the ModelSpec the CLI sends).
SM="--layers 2 --hidden 64 --heads 4 --seq 16 --vocab 64 --batch 8"
# shellcheck disable=SC2086
$T "$DISTIR" model gpt $SM -o "$TMP/s.pb" || fail "model gpt (search)"
$T "$DISTIR" search "$TMP/s.pb" --hw a100-dgx:1 --devices 4 --json >"$TMP/sf.json"
# shellcheck disable=SC2086
$T "$DISTIR" search --model gpt $SM --hw a100-dgx:1 --devices 4 --json >"$TMP/sm.json" \
    2>"$TMP/sm.err"
check "search --model equals the search of the file" cmp -s "$TMP/sf.json" "$TMP/sm.json"
check "search --model with the generator's defaults warns as simulate does" \
    grep -q "kernel of its own (--kernels eager, the default)" "$TMP/sm.err"
# shellcheck disable=SC2086
$T "$DISTIR" search --model gpt $SM --dtype f32 --optimizer sgd --kernels eager --hw a100-dgx:1 \
    --devices 4 --json >"$TMP/sm2.json" 2>"$TMP/sm2.err"
check "... and not once --dtype, --optimizer and --kernels are given" [ ! -s "$TMP/sm2.err" ]
# shellcheck disable=SC2086
$T "$DISTIR" search --model gpt $SM --hw a100-dgx:1 --devices 4 --json --server "$ADDR" \
    >"$TMP/sr.json"
check "... and through the daemon" cmp -s "$TMP/sf.json" "$TMP/sr.json"
"$DISTIR" search --model gpt --wings 3 --hw a100-dgx:1 >/dev/null 2>"$TMP/sw.err"
check "search: an unknown model option is a usage error (exit 2)" [ $? -eq 2 ]
"$DISTIR" search "$TMP/s.pb" --batch 3 >/dev/null 2>"$TMP/sb.err"
check "search: a model option without --model is a usage error (exit 2)" [ $? -eq 2 ]
stop_daemon
finish
