"""Builds ONNX models of opsets 23 and 24 with Debian's python3-onnx, runs them with
`distir run`, and compares with numpy references of the ONNX definitions.

Usage: onnx_recent.py DISTIR_BINARY

Models: Attention (opset 23) with 4-d inputs, grouped-query heads and a causal mask, and with
3-d inputs, q_num_heads / kv_num_heads and an explicit scale; and a chain of Gelu with
approximate "tanh", Swish with alpha 1.5, RMSNormalization and Split by num_outputs (opset
24). The models are written with onnx.helper (python3-onnx 1.12 knows these opsets by number
only: nothing here relies on its checker). Every output must match its reference within 1e-4
relative plus 1e-5 absolute. Prints one line per model; exits non-zero on any mismatch.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper

RTOL, ATOL = 1e-4, 1e-5
rng = np.random.default_rng(7)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def attention_ref(q, k, v, causal, scale):
    """ONNX Attention on [B, H, S, D] inputs; kv heads shared by H / KV query heads."""
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.tril(np.ones((sq, sk), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def heads(x, h):
    b, s, hd = x.shape
    return x.reshape(b, s, h, hd // h).transpose(0, 2, 1, 3)


def case_attention4():
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((2, 4, 8, 16), (2, 2, 8, 16), (2, 2, 8, 16)))
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
    graph = helper.make_graph([node], "attention4", [vi("q", q.shape), vi("k", k.shape),
                                                     vi("v", v.shape)], [vi("y", (2, 4, 8, 16))])
    ref = attention_ref(q, k, v, True, 1 / np.sqrt(16))
    return 23, graph, {"q": q, "k": k, "v": v}, {"y": ref}


def case_attention3():
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((2, 8, 64), (2, 8, 32), (2, 8, 32)))
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1, q_num_heads=4,
                            kv_num_heads=2, scale=0.25)
    graph = helper.make_graph([node], "attention3", [vi("q", q.shape), vi("k", k.shape),
                                                     vi("v", v.shape)], [vi("y", (2, 8, 64))])
    y = attention_ref(heads(q, 4), heads(k, 2), heads(v, 2), True, 0.25)
    return 23, graph, {"q": q, "k": k, "v": v}, {"y": y.transpose(0, 2, 1, 3).reshape(2, 8, 64)}


def case_chain():
    x = rng.standard_normal((2, 8)).astype(np.float32)
    scale = rng.standard_normal(8).astype(np.float32)
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
        helper.make_node("Swish", ["g"], ["sw"], alpha=1.5),
        helper.make_node("RMSNormalization", ["sw", "scale"], ["r"], epsilon=1e-6),
        helper.make_node("Split", ["r"], ["p0", "p1", "p2"], axis=1, num_outputs=3),
    ]
    graph = helper.make_graph(nodes, "chain", [vi("x", x.shape), vi("scale", scale.shape)],
                              [vi("p0", (2, 3)), vi("p1", (2, 3)), vi("p2", (2, 2))])
    xd = x.astype(np.float64)
    g = 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))
    sw = g / (1 + np.exp(-1.5 * g))
    r = sw / np.sqrt((sw ** 2).mean(-1, keepdims=True) + 1e-6) * scale
    return 24, graph, {"x": x, "scale": scale}, {"p0": r[:, :3], "p1": r[:, 3:6], "p2": r[:, 6:]}


def main():
    distir = sys.argv[1]
    bad = 0
    for case in (case_attention4, case_attention3, case_chain):
        opset, graph, inputs, refs = case()
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="distir-tests")
        model.ir_version = 8
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.onnx")
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
            args = [distir, "run", path, "-o", os.path.join(d, "out")]
            for name, value in inputs.items():
                np.save(os.path.join(d, name + ".npy"), value)
                args += ["--input", "%s=%s" % (name, os.path.join(d, name + ".npy"))]
            run = subprocess.run(args, capture_output=True, text=True)
            if run.returncode != 0:
                print("not ok - %s: distir run failed: %s" % (case.__name__, run.stderr.strip()))
                bad += 1
                continue
            worst = 0.0
            for name, ref in refs.items():
                got = np.load(os.path.join(d, "out", name + ".npy")).astype(np.float64)
                if got.shape != ref.shape:
                    worst = np.inf
                    break
                worst = max(worst, float(np.max(np.abs(got - ref) / (ATOL + RTOL * np.abs(ref)))))
            ok = worst <= 1.0
            bad += not ok
            print("%s - %s (opset %d): worst difference %.3g of the tolerance"
                  % ("ok" if ok else "not ok", case.__name__, opset, worst))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
