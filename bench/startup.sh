#!/bin/sh
# startup.sh: what a distir process costs from start to exit when it does
# not talk to a daemon (distir links no gRPC; distir-rpc.so is opened only
# with --server): a small local simulate and --version, best of 5 rounds of
# 100 runs each, and the shared libraries each loads. Target: a local
# simulate of a small module in a few milliseconds.
B=${DISTIR_BUILD:-build/release}
D=$B/distir
run() { # run N COMMAND...: best per-run milliseconds over 5 rounds of N runs
    n=$1
    shift
    best=
    for r in 1 2 3 4 5; do
        t0=$(date +%s%N)
        i=0
        while [ $i -lt "$n" ]; do "$@" >/dev/null 2>&1; i=$((i + 1)); done
        t=$((($(date +%s%N) - t0) / n / 1000))
        if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; fi
    done
    echo "$best"
}
sim=$(run 100 "$D" simulate tests/ir/seed001_mlp.dir --hw a100-dgx)
ver=$(run 100 "$D" --version)
base=$(run 100 /bin/true)
grpc=$(run 100 "$B/distird" --help)
echo "/bin/true (the shell's own cost of a process): $(awk "BEGIN { printf \"%.2f\", $base / 1000 }") ms"
echo "distird --help (a binary that links gRPC): $(awk "BEGIN { printf \"%.2f\", $grpc / 1000 }") ms"
echo "distir --version: $(awk "BEGIN { printf \"%.2f\", $ver / 1000 }") ms per process (best of 5 x 100)"
echo "distir simulate (seed 001 MLP, local): $(awk "BEGIN { printf \"%.2f\", $sim / 1000 }") ms per process (best of 5 x 100)"
echo "shared libraries: distir $(ldd "$D" | wc -l), distir-rpc.so $(ldd "$B/distir-rpc.so" | wc -l) (opened only with --server)"
echo "target: a local simulate of a small module in a few milliseconds"
