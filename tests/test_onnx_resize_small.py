"""Resize of planes with size-one axes against onnxruntime.

With N*C = 1, growing both spatial axes while one of them is 1 (1x1 -> 2x2, 1x2 -> 2x4...) passes
through views whose size-one axes carry permuted strides: ggml counts them contiguous, but its matrix
product asserts a packed first stride (GGML_ASSERT nb10 == type size, a process abort). Each case
runs first in a child process, so a regression is a failed test, not a dead test run."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [((1, 1, 1, 1), (2, 2)), ((1, 1, 1, 1), (3, 3)), ((1, 1, 1, 2), (2, 4)), ((1, 1, 2, 1), (4, 2)),
         ((1, 1, 1, 3), (3, 6)), ((1, 2, 1, 1), (2, 2)), ((2, 1, 1, 2), (3, 4))]
MODES = ["nearest", "linear", "cubic"]


def resize_model(shape, out_hw, mode):
    sizes = np.array(list(shape[:2]) + list(out_hw), np.int64)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode)
    g = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, [int(s) for s in sizes])],
                          [numpy_helper.from_array(sizes, "sizes")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("shape,out_hw", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_resize_of_small_planes_matches_onnxruntime(shape, out_hw, mode):
    proto = resize_model(shape, out_hw, mode)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import numpy as np, onnx, ggmlpy
        proto = onnx.load_from_string(bytes.fromhex("{proto.SerializeToString().hex()}"))
        x = np.random.default_rng(0).normal(size={shape}).astype(np.float32)
        print(ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), {{"x": x}})["y"].shape)
    """)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert child.returncode == 0, f"the process died ({child.returncode}): {child.stderr[-1500:]}"
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), {"x": x})["y"]
    assert got.shape == want.shape == tuple(shape[:2]) + out_hw
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
