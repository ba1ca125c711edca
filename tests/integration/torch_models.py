"""Exports PyTorch models to ONNX, runs them with `distir run`, and compares.

Usage: torch_models.py DISTIR_BINARY

For each model (an MLP and small torch.nn.TransformerEncoder stacks), the
script exports the model with torch.onnx.export into a temporary directory,
writes a random input as .npy, runs `distir run model.onnx --input x=x.npy
-o DIR`, and compares DIR/y.npy with PyTorch's own output: the largest
difference must be within 1e-4 of the largest magnitude of the reference
(relative, as a norm), and every element within 1e-4 relative plus 1e-5
absolute. Prints one line per model and exits non-zero on any mismatch.
If torch is not installed it prints "skipped: ..." and exits 0.
"""
import os
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
    import torch
except ImportError as exc:  # the only reason to skip
    print(f"skipped: python3-torch is not installed ({exc})")
    sys.exit(0)

REL = 1e-4
warnings.filterwarnings("ignore")  # torch.onnx.export's advice is not test output


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 8), torch.nn.Sigmoid()), torch.randn(4, 16)


def transformer(activation="relu", norm_first=False):
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, activation=activation,
        batch_first=True, norm_first=norm_first)
    return torch.nn.TransformerEncoder(layer, num_layers=2,
                                       enable_nested_tensor=False), torch.randn(2, 6, 32)


class Causal(torch.nn.Module):
    """A transformer stack with a causal mask built inside the graph (Trilu, Where...)."""

    def __init__(self):
        super().__init__()
        self.enc, _ = transformer("gelu", norm_first=True)

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.enc(x, mask=mask)


CASES = [
    ("mlp", mlp, 17),
    ("transformer", lambda: transformer(), 17),
    ("transformer_opset13", lambda: transformer(), 13),
    ("transformer_gelu_causal", lambda: (Causal(), torch.randn(2, 6, 32)), 17),
]


def run_case(distir, tmp, name, make, opset):
    torch.manual_seed(0)
    model, x = make()
    model.eval()
    path = os.path.join(tmp, name + ".onnx")
    # Outside torch.no_grad(): under it PyTorch takes the fused transformer fast path,
    # which torch.onnx.export cannot export.
    ref = model(x).detach().numpy()
    torch.onnx.export(model, (x,), path, opset_version=opset, input_names=["x"],
                      output_names=["y"])
    xin = os.path.join(tmp, name + "_x.npy")
    np.save(xin, x.numpy())
    out = os.path.join(tmp, name + "_out")
    proc = subprocess.run([distir, "run", path, "--input", "x=" + xin, "-o", out],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAIL {name}: distir run exited {proc.returncode}: {proc.stderr.strip()}")
        return False
    got = np.load(os.path.join(out, "y.npy"))
    if got.shape != ref.shape:
        print(f"FAIL {name}: shape {got.shape}, PyTorch gives {ref.shape}")
        return False
    diff = float(np.max(np.abs(got - ref)))
    scale = float(np.max(np.abs(ref)))
    ok = diff <= REL * scale and np.allclose(got, ref, rtol=REL, atol=1e-5)
    print(f"{'ok  ' if ok else 'FAIL'} {name} (opset {opset}): max |distir - torch| = {diff:.3g}, "
          f"max |torch| = {scale:.3g}")
    return ok


def main():
    distir = os.path.abspath(sys.argv[1])
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = [run_case(distir, tmp, *case) for case in CASES]
    print(f"{sum(results)} of {len(results)} PyTorch models match")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
