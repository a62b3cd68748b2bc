"""Parameters ONNX declares as scalars (Clip's bounds, TopK's K, CumSum's axis, Pad's value, Dropout's
ratio) given as one-element 1-D constants, as exporters often write them: numpy 2 refuses float() of
such an array, and the model must still load and match onnxruntime. Passes on numpy 1.24 and 2.x."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import OnnxError  # noqa: E402

X = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(np.float32)


def model(op, inits, out_shape, opset=17, n_out=1, **attrs):
    names = ["x"] + [n if a is not None else "" for n, a in inits.items()]
    outs = ["y"] + [f"y{k}" for k in range(1, n_out)]
    g = helper.make_graph([helper.make_node(op, names, outs, **attrs)], "m",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(X.shape))],
                          [helper.make_tensor_value_info(o, T.FLOAT if k == 0 else T.INT64, out_shape)
                           for k, o in enumerate(outs)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items() if a is not None])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def compare(proto):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), {"x": X})
    for w, name in zip(want, [o.name for o in proto.graph.output]):
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lo,hi", [(np.array([-0.5], np.float32), np.array([0.7], np.float32)),
                                   (np.array([-0.5], np.float32), None), (None, np.array([0.2], np.float32)),
                                   (np.array(-0.5, np.float32), np.array([0.7], np.float32))])
def test_clip_with_one_element_bounds(lo, hi):
    compare(model("Clip", {"lo": lo, "hi": hi}, list(X.shape)))


def test_clip_with_bounds_of_more_than_one_element_is_an_error():
    proto = model("Clip", {"lo": np.array([-0.5, 0.0], np.float32)}, list(X.shape))
    with pytest.raises(OnnxError, match="must hold one value"):
        ggmlpy.onnx_load(proto, device="cpu")


def test_topk_cumsum_pad_with_one_element_parameters():
    compare(model("TopK", {"k": np.array([2], np.int64)}, [2, 3, 2], n_out=2))
    compare(model("CumSum", {"axis": np.array([1], np.int64)}, list(X.shape)))
    compare(model("Pad", {"pads": np.array([0, 1, 0, 0, 1, 0], np.int64), "v": np.array([2.5], np.float32)},
                  [2, 5, 4]))


def test_dropout_with_a_one_element_ratio():
    """onnxruntime refuses a non-scalar ratio; ggmlpy reads its one value (0 in training mode: the identity)."""
    proto = model("Dropout", {"ratio": np.array([0.0], np.float32), "train": np.array([True])}, list(X.shape))
    np.testing.assert_array_equal(ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), {"x": X})["y"], X)
