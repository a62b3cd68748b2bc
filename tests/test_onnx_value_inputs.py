"""Graph inputs that fix shapes or op parameters, fed at run time: the graph is planned for their
values (ggmlpy.onnx.shaping), plans are cached by shapes and those values, bounded by bytes."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper  # noqa: E402

import ggmlpy.onnx as go  # noqa: E402
from ggmlpy.onnx import model as onnx_model  # noqa: E402
from ggmlpy.onnx.shaping import upstream, value_inputs  # noqa: E402


def _reshape_model():
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["r"], name="rs"),
                           helper.make_node("Sigmoid", ["r"], ["y"])], "r",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("s", T.INT64, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["a", "b"])])
    return helper.make_model(g)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def test_shape_fed_at_run_time_plans_for_its_value():
    model = go.onnx_load(_reshape_model(), device="cpu")
    s = go.onnx_summary(model)  # answers before the first run, saying what is not known yet
    assert s["value_inputs"] == ["s"] and s["planned"] is False and s["ggml_nodes"] is None
    assert s["outputs"] == {"y": None} and go.onnx_inputs(model) == {"x": [2, 3], "s": [2]}
    assert go.onnx_device_info(model)["planned"] is False
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    for shape in ([3, 2], [3, 2], [1, 6], [3, 2], [-1, 2]):
        y = go.onnx_run(model, {"x": x, "s": np.array(shape, dtype=np.int64)})["y"]
        np.testing.assert_allclose(y, _sig(x.reshape(shape)), rtol=1e-6)
    s = go.onnx_summary(model)
    assert s["planned"] and s["plans"] == 3 and s["plans_built"] == 3 and s["replans"] == 2
    assert s["outputs"]["y"] is not None and go.onnx_device_info(model)["planned"]


def test_bad_shape_value_is_an_error_naming_the_node():
    model = go.onnx_load(_reshape_model(), device="cpu")
    with pytest.raises(go.OnnxError, match="node 'rs'"):
        go.onnx_run(model, {"x": np.zeros((2, 3), np.float32), "s": np.array([4, 2], dtype=np.int64)})


def test_plans_are_bounded_by_bytes(monkeypatch):
    monkeypatch.setattr(onnx_model, "PLAN_CACHE_BYTES", 1)  # every plan is over: only the newest stays
    model = go.onnx_load(_reshape_model(), device="cpu")
    x = np.ones((2, 3), np.float32)
    for shape in ([3, 2], [1, 6], [6, 1]):
        go.onnx_run(model, {"x": x, "s": np.array(shape)})
    assert len(model._plans) == 1 and model.plans_built == 3


def test_profile_reports_replans():
    model = go.onnx_load(_reshape_model(), device="cpu")
    x = np.ones((2, 3), np.float32)
    go.onnx_run(model, {"x": x, "s": np.array([3, 2])})
    assert not any(r[0] == "onnx.replan" for r in go.onnx_profile(model, {"x": x, "s": np.array([3, 2])}, runs=1))
    rows = go.onnx_profile(model, {"x": x, "s": np.array([6, 1])}, runs=1)
    assert rows[-1][0] == "onnx.replan" and rows[-1][2] == 1 and rows[-1][1] > 0


def test_value_found_by_a_builder_joins_the_key():
    """QLinearConv's bias is rescaled on the host by the input's scale (not declared in CONST_INPUTS): fed
    at run time, the builder asks for it and the model plans for its value."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("xz", np.array(3, np.uint8)), ("w", rng.integers(0, 255, (2, 1, 3, 3)).astype(np.uint8)),
        ("ws", np.array(0.02, np.float32)), ("wz", np.array(128, np.uint8)), ("ys", np.array(0.5, np.float32)),
        ("yz", np.array(10, np.uint8)), ("bias", np.array([300, -200], np.int32)))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"])
    g = helper.make_graph([node], "qc", [helper.make_tensor_value_info("x", T.UINT8, [1, 1, 5, 5]),
                                         helper.make_tensor_value_info("xs", T.FLOAT, [])],
                          [helper.make_tensor_value_info("y", T.UINT8, [1, 2, 3, 3])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model = go.onnx_load(m, device="cpu")
    assert model.value_inputs == {"xs"}  # found by the build at load, which then waits for the first run
    assert go.onnx_summary(model)["planned"] is False
    x = rng.integers(0, 255, (1, 1, 5, 5)).astype(np.uint8)
    ref = ReferenceEvaluator(m)
    for xs in (0.05, 0.08):
        feeds = {"x": x, "xs": np.array(xs, np.float32)}
        got, want = go.onnx_run(model, feeds)["y"], ref.run(None, feeds)[0]
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert model.plans_built == 2 and model.replans == 1  # one plan per value


def test_value_inputs_analysis():
    nodes = [helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Concat", ["ab", "sx"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    assert value_inputs(nodes, {"a", "b", "x"}) == {"a", "b"}  # x reaches the shape only through Shape
    assert upstream(nodes, ["shape"], {"a", "x"}) == {"a"}


def test_clip_bounds_fed_at_run_time_are_computed_in_the_graph():
    g = helper.make_graph([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "c",
                          [helper.make_tensor_value_info("x", T.FLOAT, [5]),
                           helper.make_tensor_value_info("lo", T.FLOAT, []),
                           helper.make_tensor_value_info("hi", T.FLOAT, [])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [5])])
    model = go.onnx_load(helper.make_model(g), device="cpu")
    assert model.value_inputs == set()  # data, not parameters: one plan for every value
    x = np.array([-3, -0.5, 0.25, 2, np.nan], np.float32)
    for lo, hi in ((-1, 1), (0, 0.5), (1, -1)):
        y = go.onnx_run(model, {"x": x, "lo": np.float32(lo), "hi": np.float32(hi)})["y"]
        want = np.minimum(np.maximum(x, np.float32(lo)), np.float32(hi))
        np.testing.assert_array_equal(y, want)
    assert model.plans_built == 1


def test_nonzero_of_a_fed_input_runs_on_the_host_between_graphs():
    """NonZero's output shape depends on the values: the graph is split at it, as at NonMaxSuppression."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"]),
                           helper.make_node("Cast", ["nz"], ["nzf"], to=T.FLOAT),
                           helper.make_node("Neg", ["nzf"], ["y"])], "nz",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, "n"])])
    model = go.onnx_load(helper.make_model(g), device="cpu")
    assert go.onnx_summary(model)["host_ops"] == ["NonZero"]
    for x in (np.array([[1, -1, 2], [0, 3, -2]], np.float32), np.array([[1, 1, 1], [1, 1, 0]], np.float32),
              np.zeros((2, 3), np.float32)):
        y = go.onnx_run(model, {"x": x})["y"]
        np.testing.assert_array_equal(y, -np.array(np.nonzero(np.maximum(x, 0)), dtype=np.float32))
