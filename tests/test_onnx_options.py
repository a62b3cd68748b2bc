"""ONNX options beyond the common path, against numpy or onnx's reference implementation, on every
selected device (`--devices cpu,vulkan`): Mod of infinities and NaN, pooling with dilations and
MaxPool's Indices, BatchNormalization in training mode, blocked (De)QuantizeLinear, Resize antialias."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import OnnxError  # noqa: E402

RNG = np.random.default_rng(7)


def one_node(op, inputs, outputs, inits=None, opset=21, **attrs):
    """A one-node model: inputs and outputs as (name, onnx type, shape or None)."""
    g = helper.make_graph([helper.make_node(op, [n for n, _, _ in inputs] + list(inits or {}),
                                            [n for n, _, _ in outputs], **attrs)], "m",
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(proto, feeds, device="cpu"):
    return ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device=device), feeds)


def reference(proto, feeds):
    return ReferenceEvaluator(proto).run(None, feeds)


# -- Mod: infinities and NaN ---------------------------------------------------------------------------------
EDGE_A = np.array([0, -0.0, -3, 3, -1, 1, 5, -5, np.inf, -np.inf, 1, 1, np.nan, 1, 7.5, -7.5, 3e38, -3e38, 2.5],
                  np.float32)
EDGE_B = np.array([-2, 2, np.inf, np.inf, -np.inf, -np.inf, np.inf, -np.inf, 2, 2, 0, -0.0, 2, np.nan, 2, 2,
                   -np.inf, np.inf, -np.inf], np.float32)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_of_infinities_and_nan_follows_numpy_and_c_fmod(device, fmod):
    proto = one_node("Mod", [("a", T.FLOAT, [19]), ("b", T.FLOAT, [19])], [("z", T.FLOAT, [19])], fmod=fmod)
    got = run(proto, {"a": EDGE_A, "b": EDGE_B}, device)["z"]
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.fmod(EDGE_A, EDGE_B) if fmod else np.mod(EDGE_A, EDGE_B)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.isinf(want).sum() == (5 if not fmod else 0)  # the case really has infinite results


def test_mod_broadcasts_with_infinite_divisors(device):
    proto = one_node("Mod", [("a", T.FLOAT, [3, 4]), ("b", T.FLOAT, [4])], [("z", T.FLOAT, [3, 4])])
    a = RNG.standard_normal((3, 4)).astype(np.float32) * 5
    b = np.array([2.0, -np.inf, np.inf, -1.5], np.float32)
    got = run(proto, {"a": a, "b": b}, device)["z"]
    np.testing.assert_allclose(got, np.mod(a, b), rtol=1e-5, atol=1e-6)


def test_mod_rejects_a_bad_fmod():
    proto = one_node("Mod", [("a", T.FLOAT, [2]), ("b", T.FLOAT, [2])], [("z", T.FLOAT, [2])], fmod=2)
    with pytest.raises(OnnxError, match="fmod"):
        ggmlpy.onnx_load(proto, device="cpu")
