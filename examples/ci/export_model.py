"""export_model.py: the model a CI job checks, exported from PyTorch to ONNX.

    export_model.py OUT.onnx [--hidden N] [--layers N]

A small MLP regressor (Linear + GELU blocks and an MSE loss), traced with
torch.onnx.export on a fixed batch; the ONNX file is what distir imports.
In a real project this is the team's own model and export script.
"""
import argparse
import warnings

import torch

warnings.filterwarnings("ignore")  # torch.onnx.export's advice is not CI output


class Step(torch.nn.Module):
    def __init__(self, hidden, layers):
        super().__init__()
        blocks = []
        width = 32
        for _ in range(layers):
            blocks += [torch.nn.Linear(width, hidden), torch.nn.GELU()]
            width = hidden
        blocks.append(torch.nn.Linear(width, 8))
        self.net = torch.nn.Sequential(*blocks)

    def forward(self, x, y):
        return ((self.net(x) - y) ** 2).mean()  # MSE, as ops ONNX has


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = Step(a.hidden, a.layers)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    torch.onnx.export(model, (x, y), a.out, opset_version=13, input_names=["x", "y"],
                      output_names=["loss"])


if __name__ == "__main__":
    main()
