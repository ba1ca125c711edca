#!/bin/sh
# compare-outputs.sh [REV]: checks that a change to the library leaves what it
# computes byte-identical. It builds REV (default: HEAD, the last commit) in a
# temporary work tree, then runs both that distir and the one in the work tree
# over a fixed set of strategies (uniform, nested, ZeRO, overlap, stashing,
# recomputation, every schedule) on three models, and compares the SHA-256 of
# each transformed module and each simulation result (JSON, memory timelines
# included). It prints one line per case and exits 1 on the first difference
# count above zero. Used for refactors, which must change no output.
set -eu
REV=${1:-HEAD}
NEW=${NEW:-build/release/distir}
top=$(git rev-parse --show-toplevel)
cd "$top"
[ -x "$NEW" ] || { echo "compare-outputs: build $NEW first (make)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach -q "$tmp/old" "$REV"
echo "building $REV ..."
make -C "$tmp/old" -j2 build/release/distir >"$tmp/build.log" 2>&1 ||
    { tail -20 "$tmp/build.log"; exit 2; }
OLD="$tmp/old/build/release/distir"

"$NEW" model gpt --preset gpt3-1.3b --batch 16 --dtype bf16 -o "$tmp/gpt.pb"
"$NEW" model gpt --layers 4 --hidden 64 --heads 4 --seq 16 --vocab 128 --batch 8 \
    --optimizer adam -o "$tmp/small.pb"
"$NEW" model mlp --layers 8 --hidden 256 --batch 64 -o "$tmp/mlp.pb"

# model|hardware|strategy
cat >"$tmp/cases" <<'CASES'
gpt|a100-dgx:2|--dp 16
gpt|a100-dgx:2|--dp 8 --tp 2
gpt|a100-dgx:2|--dp 4 --tp 4
gpt|a100-dgx:2|--dp 4 --tp 2 --pp 2 --microbatches 4
gpt|a100-dgx:2|--dp 2 --tp 2 --pp 4 --microbatches 8 --schedule 1f1b
gpt|a100-dgx:2|--dp 2 --tp 2 --pp 4 --microbatches 8 --schedule interleaved:2
gpt|a100-dgx:2|--dp 1 --tp 2 --pp 4 --microbatches 8 --schedule interleaved:3
gpt|a100-dgx:2|--dp 8 --tp 2 --zero 1
gpt|a100-dgx:2|--dp 8 --tp 2 --zero 2 --microbatches 2
gpt|a100-dgx:2|--dp 8 --zero 3 --microbatches 2
gpt|a100-dgx:2|--dp 8 --tp 2 --zero 1 --overlap-grad-reduce
gpt|a100-dgx:2|--dp 4 --tp 4 --recompute full
gpt|a100-dgx:2|--dp 4 --tp 4 --recompute selective --sequence-parallel
gpt|a100-dgx:2|--dp 16 --microbatches 1 --overlap-grad-reduce
gpt|a100-dgx:2|--dp 8 --microbatches 2 --overlap-grad-reduce --bucket-mb 50
gpt|a100-dgx:2|--dp 4 --pp 2 --microbatches 4 --overlap-grad-reduce --schedule 1f1b
gpt|a100-dgx:2|--stages 2x4,8x1 --microbatches 2
gpt|a100-dgx:2|--stages 4x2:14,2x4:10 --microbatches 4 --schedule 1f1b
gpt|a100-dgx:2|--dp 4 --tp 4 --tp-layers 0-11
gpt|a100-dgx:2|--dp 2 --tp 2 --pp 2 --microbatches 4 --stash pipedream --schedule 1f1b
gpt|a100-dgx:2|--dp 2 --tp 2 --pp 2 --microbatches 4 --stash 2bw --schedule 1f1b
gpt|a100-dgx:2|--dp 2 --tp 4 --pp 2 --microbatches 8 --schedule 1f1b --recompute full --zero 1
small|a100-dgx|--dp 2 --tp 2 --pp 2 --microbatches 2
small|a100-dgx|--dp 2 --pp 2 --microbatches 4 --schedule 1f1b --recompute full
small|a100-dgx|--tp 4 --sequence-parallel
small|a100-dgx|--dp 4 --zero 3 --overlap-grad-reduce
small|a100-dgx|--stages 1x2,2x1 --microbatches 2
small|v100-dgx1|--dp 2 --tp 2 --tp-layers 1-2 --pp 2 --microbatches 2
small|h100-dgx|--pp 2 --microbatches 4 --schedule interleaved:2
mlp|a100-dgx|
mlp|a100-dgx|--dp 8
mlp|a100-dgx|--tp 4
mlp|a100-dgx|--pp 4 --microbatches 8 --schedule gpipe
mlp|a100-dgx|--dp 2 --pp 4 --microbatches 8 --schedule 1f1b
mlp|distir-classic:4|--dp 2 --pp 2 --microbatches 4
CASES

n=0; bad=0
while IFS='|' read -r model hw strat; do
    n=$((n + 1))
    for which in old new; do
        if [ $which = old ]; then D=$OLD; else D=$NEW; fi
        # shellcheck disable=SC2086
        { "$D" transform "$tmp/$model.pb" --hw "$hw" $strat -o - 2>&1 | sha256sum
          "$D" simulate "$tmp/$model.pb" --hw "$hw" $strat --json 2>&1 | sha256sum
          "$D" simulate "$tmp/$model.pb" --hw "$hw" $strat --no-overlap --json 2>&1 | sha256sum
        } >"$tmp/$which.$n"
    done
    if cmp -s "$tmp/old.$n" "$tmp/new.$n"; then
        printf 'same     %-9s %-16s %s\n' "$model" "$hw" "$strat"
    else
        printf 'DIFFERS  %-9s %-16s %s\n' "$model" "$hw" "$strat"; bad=$((bad + 1))
    fi
done <"$tmp/cases"
echo "$n cases (transform, simulate, simulate --no-overlap each), $bad differ"
[ $bad -eq 0 ]
