"""Empty values anywhere in a plan (ggml has no empty tensors): a NonZero with no hit feeding Split,
whether the NonZero is folded when planning (its mask a constant) or runs on the host between graphs
(its mask computed from the input); the rest of the branch is computed on the host. Against
onnxruntime, with and without hits."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402

RNG = np.random.default_rng(9)


def detection_like(mask_const=None):
    """mask [3, 4] -> NonZero [2, K] -> Transpose [K, 2] -> Split -> rows * 4 + cols -> Gather of the
    input's [12, 5] cells -> ReduceSum over the K picks -> + bias: an FPN level's regions, K = 0 when
    the level has none."""
    nodes = [] if mask_const is not None else [helper.make_node("Greater", ["score", "thr"], ["mask"])]
    nodes += [helper.make_node("NonZero", ["mask"], ["nz"]), helper.make_node("Transpose", ["nz"], ["pairs"]),
              helper.make_node("Split", ["pairs", "two"], ["r", "c"], axis=1),
              helper.make_node("Squeeze", ["r", "ax1"], ["r1"]), helper.make_node("Squeeze", ["c", "ax1"], ["c1"]),
              helper.make_node("Mul", ["r1", "four"], ["r4"]), helper.make_node("Add", ["r4", "c1"], ["flat"]),
              helper.make_node("Reshape", ["x", "cells"], ["xc"]), helper.make_node("Relu", ["xc"], ["xr"]),
              helper.make_node("Gather", ["xr", "flat"], ["picked"], axis=0),
              helper.make_node("ReduceSum", ["picked", "ax0"], ["s"], keepdims=1),
              helper.make_node("Add", ["s", "bias"], ["y"])]
    inits = {"two": np.array([1, 1], np.int64), "ax1": np.array([1], np.int64), "ax0": np.array([0], np.int64),
             "four": np.array(4, np.int64), "cells": np.array([12, 5], np.int64), "thr": np.array(0.5, np.float32),
             "bias": RNG.normal(size=(1, 5)).astype(np.float32)}
    inputs = [("x", T.FLOAT, [3, 4, 5])]
    if mask_const is None:
        inputs.append(("score", T.FLOAT, [3, 4]))
    else:
        inits["mask"] = mask_const
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 5])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def compare(proto, feeds, model=None):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    model = model or ggmlpy.onnx_load(proto, device="cpu")
    np.testing.assert_allclose(ggmlpy.onnx_run(model, feeds)["y"], want, rtol=1e-5, atol=1e-6)
    return model


@pytest.mark.parametrize("hits", [0, 1, 5])
def test_a_constant_nonzero_with_or_without_hits(hits):
    mask = np.zeros((3, 4), bool)
    mask.reshape(-1)[RNG.permutation(12)[:hits]] = True
    compare(detection_like(mask), {"x": RNG.normal(size=(3, 4, 5)).astype(np.float32)})


def test_a_nonzero_on_the_host_without_hits_then_with_them():
    proto = detection_like()
    model = None
    for hits in (0, 3, 0, 12):
        score = np.zeros((3, 4), np.float32)
        score.reshape(-1)[RNG.permutation(12)[:hits]] = 1.0
        model = compare(proto, {"x": RNG.normal(size=(3, 4, 5)).astype(np.float32), "score": score}, model)


def test_a_slice_to_nothing_of_a_computed_value():
    """An empty slice is a constant of its shape: a ReduceSum of it folds when planning; a Concat of it
    with a computed value runs on the host after the graph."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Slice", ["r", "s", "s", "ax"], ["e"]),
             helper.make_node("ReduceSum", ["e", "ax"], ["z"], keepdims=1), helper.make_node("Add", ["r", "z"], ["y"]),
             helper.make_node("Concat", ["r", "e"], ["c"], axis=1), helper.make_node("Neg", ["c"], ["y2"])]
    inits = {"s": np.array([3], np.int64), "ax": np.array([1], np.int64)}
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("y2", T.FLOAT, [2, 3])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.normal(size=(2, 3)).astype(np.float32)}
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), feeds)
    for w, name in zip(want, ("y", "y2")):
        np.testing.assert_allclose(got[name], w, rtol=1e-6)


def test_a_split_with_an_empty_part_of_a_computed_value():
    """Split's zero-size part is a constant; the Concat reading it beside a computed value runs on the
    host (as the rotary embedding ONNX writes with rotary_dim equal to the head size)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Split", ["r", "sizes"], ["a", "e"], axis=1),
             helper.make_node("Concat", ["a", "e"], ["c"], axis=1), helper.make_node("Neg", ["c"], ["y"]),
             helper.make_node("Shape", ["e"], ["y2"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("y2", T.INT64, [2])],
                          [numpy_helper.from_array(np.array([3, 0], np.int64), "sizes")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.normal(size=(2, 3)).astype(np.float32)}
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), feeds)
    for w, name in zip(want, ("y", "y2")):
        np.testing.assert_array_equal(got[name], w)


def test_an_empty_parameter_after_a_host_step_stays_in_the_graph():
    """A Resize's empty roi is a parameter, not data: the stage after the NonZero is planned as a graph,
    not computed on the host."""
    nodes = [helper.make_node("Greater", ["s", "zero"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["nzf"], to=T.FLOAT),
             helper.make_node("ReduceSum", ["nzf"], ["n"], keepdims=0), helper.make_node("Add", ["x", "n"], ["x2"]),
             helper.make_node("Resize", ["x2", "roi", "scales"], ["y"], mode="linear")]
    inits = {"zero": np.array(0.0, np.float32), "roi": np.zeros(0, np.float32),
             "scales": np.array([1, 1, 2, 2], np.float32)}
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 3, 3]),
                                       helper.make_tensor_value_info("s", T.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 1, 6, 6])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.normal(size=(1, 1, 3, 3)).astype(np.float32), "s": np.array([1, -1, 2, 0], np.float32)}
    model = compare_named(proto, feeds)
    assert ggmlpy.onnx_summary(model)["plans_built"] == 2  # the first graph, then the one after the NonZero


def compare_named(proto, feeds):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    model = ggmlpy.onnx_load(proto, device="cpu")
    got = ggmlpy.onnx_run(model, feeds)
    for w, o in zip(want, proto.graph.output):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-6)
    return model


def two_levels():
    """Rows of relu(x) [6, 4] split by score into two levels (NonZero of score > 0.5 and of its
    negation), each level's rows doubled or negated and scattered back into zeros of x's shape (a
    detection's multi-level RoI pooling), then the levels' sum times W: a level with no row is an
    empty value in the middle of the graph, and the product after the scatter reads none."""
    nodes = [helper.make_node("Relu", ["x"], ["f"]), helper.make_node("Greater", ["score", "half"], ["hi"]),
             helper.make_node("Not", ["hi"], ["lo"]), helper.make_node("Shape", ["f"], ["fs"]),
             helper.make_node("ConstantOfShape", ["fs"], ["zeros"], value=helper.make_tensor("v", T.FLOAT, [1], [0.0]))]
    for lv, op in (("hi", "Mul"), ("lo", "Sub")):
        nodes += [helper.make_node("NonZero", [lv], [lv + "_nz"]),
                  helper.make_node("Transpose", [lv + "_nz"], [lv + "_idx"]),  # [K, 1]
                  helper.make_node("GatherND", ["f", lv + "_idx"], [lv + "_rows"]),
                  helper.make_node(op, [lv + "_rows", "two"], [lv + "_upd"]),
                  helper.make_node("ScatterND", ["zeros", lv + "_idx", lv + "_upd"], [lv + "_out"])]
    nodes += [helper.make_node("Add", ["hi_out", "lo_out"], ["both"]), helper.make_node("MatMul", ["both", "w"], ["y"])]
    inits = {"half": np.array(0.5, np.float32), "two": np.array(2.0, np.float32),
             "w": RNG.normal(size=(4, 3)).astype(np.float32)}
    g = helper.make_graph(nodes, "levels", [helper.make_tensor_value_info("x", T.FLOAT, [6, 4]),
                                            helper.make_tensor_value_info("score", T.FLOAT, [6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [6, 3])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_empty_level_is_computed_on_the_host_and_the_rest_in_the_graph(monkeypatch):
    """Only the nodes that read the empty level run on the host (numpy); the product after the
    scatter stays in the ggml graph, whichever level is empty."""
    from ggmlpy.onnx import empty_branches
    on_host = []
    real = empty_branches.evaluate_on_host

    def spy(model, nodes, *args, **kw):
        on_host.extend(n.op_type for n in nodes)
        return real(model, nodes, *args, **kw)
    monkeypatch.setattr(empty_branches, "evaluate_on_host", spy)
    proto = two_levels()
    model = ggmlpy.onnx_load(proto, device="cpu")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for score in ([0.9] * 6, [0.1] * 6, [0.9, 0.1, 0.9, 0.1, 0.1, 0.1], [0.1] * 6):
        feeds = {"x": RNG.normal(size=(6, 4)).astype(np.float32), "score": np.array(score, np.float32)}
        on_host.clear()
        got = ggmlpy.onnx_run(model, feeds)["y"]
        np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
        empty = min(sum(s > 0.5 for s in score), sum(s <= 0.5 for s in score)) == 0
        assert ("ScatterND" in on_host) == empty and "MatMul" not in on_host, on_host
