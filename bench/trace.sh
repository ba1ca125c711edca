#!/bin/sh
# trace.sh: size, time and peak memory of a streamed trace. GPT-3 175B
# (batch 1,536, bf16, Adam) on 1,024 A100s (a100-dgx:128), dp 8, tp 8,
# pp 16, 192 microbatches: the simulation alone, then with --trace of one
# device per stage (target: valid, under 100 MB), best of 3 runs each.
B=${DISTIR_BUILD:-build/release}
D=$B/distir
OUT=$(mktemp -d /tmp/distir-trace.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
ARGS="--model gpt3-175b --batch 1536 --dtype bf16 --optimizer adam --hw a100-dgx:128 --dp 8 --tp 8 --pp 16 --microbatches 192"
best() { # best COMMAND...: best wall seconds and its peak RSS over 3 runs
    bt= brss=
    for r in 1 2 3; do
        if [ -x /usr/bin/time ]; then # Debian's "time" package: wall time and peak RSS
            /usr/bin/time -f "%e %M" -o "$OUT/time" "$@" >/dev/null 2>"$OUT/err" || { cat "$OUT/err"; exit 1; }
            read -r t rss <"$OUT/time"
        else
            t0=$(date +%s%N)
            "$@" >/dev/null 2>"$OUT/err" || { cat "$OUT/err"; exit 1; }
            t=$(awk "BEGIN { printf \"%.2f\", ($(date +%s%N) - $t0) / 1e9 }") rss=0
        fi
        if [ -z "$bt" ] || awk "BEGIN { exit !($t < $bt) }"; then bt=$t brss=$rss; fi
    done
    echo "$bt s, peak RSS $((brss / 1024)) MiB"
}
# shellcheck disable=SC2086
echo "simulate only:                      $(best "$D" simulate $ARGS)"
# shellcheck disable=SC2086
echo "with --trace first-of-each-stage:   $(best "$D" simulate $ARGS --trace "$OUT/t.json" --trace-devices first-of-each-stage)"
size=$(stat -c %s "$OUT/t.json")
echo "trace: $size bytes ($(awk "BEGIN { printf \"%.1f\", $size / 1e6 }") MB; target under 100 MB): $(tail -n 1 "$OUT/err")"
/usr/bin/python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["traceEvents"]; print("valid JSON:", len(e), "events,", sum(1 for x in e if x["ph"] == "s"), "flows")' "$OUT/t.json"
