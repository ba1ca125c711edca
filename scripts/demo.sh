#!/bin/sh
# demo.sh BUILD_DIR: shows distir working end to end on a bundled model:
# the module in text form, its canonical hash, a text -> protobuf -> text
# round trip, a simulation on an A100 node (table), and then the daemon:
# the same simulation twice over gRPC (the second a cache hit).
set -eu
B=${1:-build/release}
D="$B/distir"
EX=examples/mlp_dp.dir
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== the module ($EX): the seed 001 MLP, data parallel on devices 1 and 2"
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
if [ -x scripts/demo-daemon.sh ] || [ -f scripts/demo-daemon.sh ]; then
    echo
    sh scripts/demo-daemon.sh "$B"
fi
