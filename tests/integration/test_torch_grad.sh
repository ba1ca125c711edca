#!/bin/sh
# test_torch_grad.sh: the gradients and the SGD step of `distir model mlp`
# against PyTorch's autograd on the same MLP with the same weights. For each
# variant (ReLU + cross-entropy, GeLU + MSE) a Python script writes random
# weights and data as .npy, computes PyTorch's loss and gradients, then
# `distir run` executes the generated module (--optimizer none: the
# gradients are the results; --optimizer sgd: the updated weights) and the
# script compares within 1e-9 relative (f64). Skips, saying why, when
# python3-torch or `distir run` is missing. Exits with the number of
# failures. The modules are generated with --no-annotations because `distir run`
# verifies its input and the verifier does not skip dist.* attributes yet.
B=${DISTIR_BUILD:-build/release}
DISTIR=$B/distir
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/distir-torch.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
failures=0

if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "skip - python3-torch (or numpy) is not installed: apt-get install python3-torch"
    exit 0
fi
if "$DISTIR" run 2>&1 | grep -q 'not available'; then
    echo "skip - 'distir run' is not available in this build"
    exit 0
fi

cat >"$TMP/mlp.py" <<'EOF'
# mlp.py MODE DIR LAYERS HIDDEN INPUT CLASSES BATCH ACT LOSS LR
#   MODE gen: write weights and data; MODE check: compare DIR/out* with torch.
import sys, os
import numpy as np
import torch

mode, d = sys.argv[1], sys.argv[2]
L, H, F, C, B = (int(v) for v in sys.argv[3:8])
act, loss_kind, lr = sys.argv[8], sys.argv[9], float(sys.argv[10])
rng = np.random.default_rng(1234)
dims = [F] + [H] * (L - 1) + [C]
ws = [rng.uniform(-1, 1, (dims[i], dims[i + 1])) for i in range(L)]
bs = [rng.uniform(-1, 1, (dims[i + 1],)) for i in range(L)]
x = rng.uniform(-1, 1, (B, F))
labels = rng.integers(0, C, (B,), dtype=np.int64)
targets = rng.uniform(-1, 1, (B, C))

if mode == "gen":
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "labels.npy"), labels)
    np.save(os.path.join(d, "targets.npy"), targets)
    for i in range(L):
        np.save(os.path.join(d, "l%d.w.npy" % i), ws[i])
        np.save(os.path.join(d, "l%d.b.npy" % i), bs[i])
    sys.exit(0)

tw = [torch.tensor(w, dtype=torch.float64, requires_grad=True) for w in ws]
tb = [torch.tensor(b, dtype=torch.float64, requires_grad=True) for b in bs]
h = torch.tensor(x, dtype=torch.float64)
for i in range(L):
    h = h @ tw[i] + tb[i]
    if i + 1 < L:
        h = torch.relu(h) if act == "relu" else torch.nn.functional.gelu(h)
if loss_kind == "sce":
    loss = torch.nn.functional.cross_entropy(h, torch.tensor(labels))
else:
    loss = torch.nn.functional.mse_loss(h, torch.tensor(targets, dtype=torch.float64))
loss.backward()

bad = 0
def compare(name, got, want):
    global bad
    err = np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-6))
    ok = got.shape == want.shape and err < 1e-9
    print("%s - %s: max relative difference %.2g" % ("ok" if ok else "FAIL", name, err))
    bad += 0 if ok else 1

grads = os.path.join(d, "out_grad")
sgd = os.path.join(d, "out_sgd")
compare("loss (gradient module)", np.load(os.path.join(grads, "loss.npy")),
        loss.detach().numpy())
for i in range(L):
    for p, t in (("w", tw[i]), ("b", tb[i])):
        name = "l%d.%s" % (i, p)
        compare(name + " gradient", np.load(os.path.join(grads, name + ".grad.npy")),
                t.grad.numpy())
        compare(name + " after one SGD step", np.load(os.path.join(sgd, name + ".new.npy")),
                (t - lr * t.grad).detach().numpy())
sys.exit(bad)
EOF

run_variant() {
    act=$1
    loss=$2
    dir=$TMP/$act-$loss
    mkdir -p "$dir"
    set -- 3 16 8 4 8
    if ! "$PY" "$TMP/mlp.py" gen "$dir" "$@" "$act" "$loss" 0.1; then
        echo "FAIL - $act/$loss: generating the data"
        failures=$((failures + 1))
        return
    fi
    if [ "$loss" = sce ]; then target=labels; else target=targets; fi
    inputs="--input x=$dir/x.npy --input $target=$dir/$target.npy"
    for i in 0 1 2; do
        inputs="$inputs --input l$i.w=$dir/l$i.w.npy --input l$i.b=$dir/l$i.b.npy"
    done
    for opt in none sgd; do
        out=$dir/out_grad
        [ "$opt" = sgd ] && out=$dir/out_sgd
        if ! "$DISTIR" model mlp --layers 3 --hidden 16 --input 8 --classes 4 --batch 8 \
            --dtype f64 --activation "$act" --loss "$loss" --optimizer "$opt" --lr 0.1 \
            --no-annotations -o "$dir/mlp-$opt.dir" ||
            ! "$DISTIR" run "$dir/mlp-$opt.dir" $inputs -o "$out" >"$dir/run-$opt.log" 2>&1; then
            echo "FAIL - $act/$loss: distir model/run with --optimizer $opt"
            cat "$dir/run-$opt.log"
            failures=$((failures + 1))
            return
        fi
    done
    echo "# $act + $loss"
    "$PY" "$TMP/mlp.py" check "$dir" "$@" "$act" "$loss" 0.1 || failures=$((failures + $?))
}

run_variant relu sce
run_variant gelu mse
[ "$failures" = 0 ] && echo "ok - the MLP's gradients and SGD step match PyTorch's"
exit "$failures"
