"""Write the PyTorch-exported test models of tests/test_onnx_models.py to tests/onnx_fixtures/.

    python scripts/make_onnx_fixtures.py      (needs torch; CI does not install it)

Each fixture is NAME.onnx (random weights, seed 0) and NAME.npz (its inputs). tests/test_onnx_fixtures.py
runs them against onnxruntime on every --devices device, so CI checks whole models on the CPU and on
lavapipe without PyTorch.
"""
from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def main() -> None:
    import torch

    import test_onnx_models as tm
    out = os.path.join(ROOT, "tests", "onnx_fixtures")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    resnet = tm.SmallResNet()
    tm._randomize_bn(resnet)
    ids = torch.randint(0, 50, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    models = {
        "mlp": (torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 10)),
                {"x": torch.randn(5, 32)}),
        "resnet_block": (resnet, {"image": torch.randn(1, 3, 32, 32)}),
        "encoder": (tm.Encoder(), {"ids": ids, "mask": mask}),
        "unet": (tm.UNet(), {"x": torch.randn(1, 3, 32, 32)}),
        "lstm": (tm.Tagger(), {"ids": torch.randint(0, 40, (12, 3))}),
        "vit": (tm.ViT(), {"image": torch.randn(2, 3, 32, 32)}),
    }
    for name, (model, inputs) in models.items():
        path = os.path.join(out, name + ".onnx")
        tm.export(model, tuple(inputs.values()), path, list(inputs))
        np.savez(os.path.join(out, name + ".npz"), **{k: v.numpy() for k, v in inputs.items()})
        print(f"{name}: {os.path.getsize(path) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
