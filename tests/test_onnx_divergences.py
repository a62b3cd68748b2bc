"""Where the ONNX importer departs from ggmlR on purpose (docs/divergences.md, ONNX), pinned: a
Reshape to another element count is refused at load, and broadcasting is ONNX's (numpy's) rule,
not ggml's tiling."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy as g  # noqa: E402


def _model(nodes, inputs, outputs, inits=()):
    vi = [helper.make_tensor_value_info(n, T.FLOAT, list(d)) for n, d in inputs]
    vo = [helper.make_tensor_value_info(n, T.FLOAT, list(d)) for n, d in outputs]
    graph = helper.make_graph(nodes, "divergence", vi, vo, list(inits))
    return helper.make_model(graph, ir_version=7, opset_imports=[helper.make_opsetid("", 13)])


def test_reshape_to_another_element_count_is_refused_at_load():
    """ggmlR loads this and its run returns NULL; onnxruntime refuses it too."""
    shape = numpy_helper.from_array(np.array([4, 2], np.int64), "S")
    m = _model([helper.make_node("Reshape", ["X", "S"], ["Y"])], [("X", (2, 3))], [("Y", (4, 2))], [shape])
    with pytest.raises(g.OnnxError, match=r"node 'Y' \(Reshape\): cannot reshape \[2, 3\] to \[4, 2\]"):
        g.onnx_load(m)


@pytest.mark.parametrize("a_shape, b_shape", [((7, 7), (14, 14)), ((1, 1, 7, 7), (1, 1, 14, 14)), ((2, 3), (4, 3))])
def test_shapes_onnx_does_not_broadcast_are_refused_at_load(a_shape, b_shape):
    """ggmlR tiles a [7, 7] plane into a [14, 14] one (ggml repeats what divides); ONNX has no such
    broadcast."""
    with pytest.raises(ValueError):
        np.broadcast_shapes(a_shape, b_shape)  # ONNX's multidirectional rule is numpy's
    m = _model([helper.make_node("Add", ["A", "B"], ["Y"])], [("A", a_shape), ("B", b_shape)], [("Y", b_shape)])
    with pytest.raises(g.OnnxError, match=r"node 'Y' \(Add\): shapes .* do not broadcast"):
        g.onnx_load(m)


@pytest.mark.parametrize("a_shape, b_shape", [((1, 7), (7, 7)), ((7, 1), (1, 7)), ((2, 1, 7, 7), (3, 1, 1)),
                                              ((7,), (2, 3, 7))])
def test_shapes_onnx_broadcasts_match_numpy(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out = np.broadcast_shapes(a_shape, b_shape)
    m = _model([helper.make_node("Add", ["A", "B"], ["Y"])], [("A", a_shape), ("B", b_shape)], [("Y", out)])
    y = g.onnx_run(g.onnx_load(m), {"A": a, "B": b})["Y"]
    np.testing.assert_array_equal(np.asarray(y).reshape(out), a + b)
