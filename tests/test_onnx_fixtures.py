"""Whole models exported from PyTorch (tests/onnx_fixtures/, written by scripts/make_onnx_fixtures.py)
against onnxruntime, on every --devices device. Needs onnxruntime (the test extra), not PyTorch,
so CI runs it on the CPU and on lavapipe."""
from __future__ import annotations

import os

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import ggmlpy.onnx as go  # noqa: E402

HERE = os.path.join(os.path.dirname(__file__), "onnx_fixtures")
NAMES = sorted(f[:-5] for f in os.listdir(HERE) if f.endswith(".onnx"))
# rtol, atol: float32 on the CPU; lavapipe's matrix kernels accumulate in f16
DEVICE_TOL = {"cpu": (1e-4, 1e-5), "vulkan": (1e-2, 5e-3), "cuda": (1e-3, 1e-4)}


def test_fixtures_present():
    assert {"mlp", "resnet_block", "encoder", "unet", "lstm", "vit"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_model_matches_onnxruntime(name, device):
    path = os.path.join(HERE, name + ".onnx")
    feeds = dict(np.load(os.path.join(HERE, name + ".npz")))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = go.onnx_run(go.onnx_load(path, device=device), feeds)
    rtol, atol = DEVICE_TOL[device]
    for k, w in want.items():
        assert got[k].shape == w.shape
        np.testing.assert_allclose(got[k], w, rtol=rtol, atol=atol, err_msg=f"{name}: {k}")
