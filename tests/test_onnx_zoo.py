"""Small versions of the ONNX Model Zoo's architectures (tests/onnx_zoo.py) exported by torch and
compared with onnxruntime. Those built from transformers or torchvision are skipped, with the
reason, where that library is not installed."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="exports the models with PyTorch: pip install torch==2.13.0 "
                                    "--index-url https://download.pytorch.org/whl/cpu")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import ggmlpy  # noqa: E402
from onnx_zoo import ZOO, Unavailable, build, torch_outputs  # noqa: E402


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_architecture_matches_onnxruntime(name, tmp_path):
    try:
        path, feeds = build(name, torch, str(tmp_path))
    except Unavailable as e:
        pytest.skip(f"{name}: {e}")
    rtol, atol = ZOO[name][1]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(path, device="cpu"), feeds)
    reference = torch_outputs(path)
    for k, w in want.items():
        assert got[k].shape == w.shape, k
        # an output on which torch and onnxruntime themselves differ by more than the tolerance (a deep
        # network's float32 rounding) gets the tolerance scaled by that difference, and only that
        scale = 1.0
        if k in reference:
            scale = max(1.0, float(np.max(np.abs(reference[k] - w) / (atol + rtol * np.abs(w)))))
        np.testing.assert_allclose(got[k], w, rtol=rtol * scale, atol=atol * scale,
                                   err_msg=f"{k} (tolerance x{scale:.2f}: torch vs onnxruntime)")
