"""GatherND, ReduceProd, QLinearSoftmax and If (on a condition known at plan time, or computed in the graph),
against onnxruntime
(ONNX's node tests for them run in tests/test_onnx_conformance.py)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import OnnxError  # noqa: E402

RNG = np.random.default_rng(5)


def make(nodes, inputs, outputs, inits=None, opset=18, ms=False):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    return helper.make_model(g, opset_imports=ops)


def ort_run(proto, feeds):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def compare(proto, feeds, model=None, rtol=1e-6, atol=1e-6):
    model = model or ggmlpy.onnx_load(proto, device="cpu")
    got = ggmlpy.onnx_run(model, feeds)
    for w, o in zip(ort_run(proto, feeds), proto.graph.output):
        assert got[o.name].shape == w.shape and got[o.name].dtype == w.dtype
        np.testing.assert_allclose(got[o.name], w, rtol=rtol, atol=atol)
    return model


# -- GatherND ---------------------------------------------------------------------------------------------------
GATHER_ND = [((4, 5, 6), (3, 2), 0), ((4, 5, 6), (2, 3, 3), 0), ((4, 5), (7, 1), 0), ((2, 5, 6), (2, 3, 1), 1),
             ((2, 3, 5, 4), (2, 3, 2, 1), 2), ((3, 4, 5), (3, 2), 1)]


def _indices(dshape, ishape, bd):
    q = ishape[-1]
    lens = np.array(dshape[bd:bd + q])
    return (RNG.integers(0, 1 << 30, ishape) % lens - RNG.integers(0, 2, ishape) * lens).astype(np.int64)  # negatives too


@pytest.mark.parametrize("dshape,ishape,bd", GATHER_ND)
@pytest.mark.parametrize("computed", [False, True])
def test_gather_nd_matches_onnxruntime(dshape, ishape, bd, computed):
    x = RNG.normal(size=dshape).astype(np.float32)
    idx = _indices(dshape, ishape, bd)
    out = list(ishape[:-1]) + list(dshape[bd + ishape[-1]:])
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=bd)
    inputs = [("x", T.FLOAT, list(dshape))] + ([("i", T.INT64, list(ishape))] if computed else [])
    proto = make([node], inputs, [("y", T.FLOAT, out)], None if computed else {"i": idx})
    compare(proto, {"x": x, **({"i": idx} if computed else {})})


def test_gather_nd_of_computed_indices_out_of_range_is_nan_not_a_crash():
    node = helper.make_node("GatherND", ["x", "i"], ["y"])
    proto = make([node], [("x", T.FLOAT, [3, 4]), ("i", T.INT64, [2, 2])], [("y", T.FLOAT, [2])])
    y = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"),
                        {"x": np.ones((3, 4), np.float32), "i": np.array([[1, 2], [3, 0]], np.int64)})["y"]
    assert y[0] == 1 and np.isnan(y[1])


def test_gather_nd_of_constant_indices_out_of_range_is_an_error():
    node = helper.make_node("GatherND", ["x", "i"], ["y"])
    proto = make([node], [("x", T.FLOAT, [3, 4])], [("y", T.FLOAT, [1])], {"i": np.array([[3, 0]], np.int64)})
    with pytest.raises(OnnxError, match="out of range"):
        ggmlpy.onnx_load(proto, device="cpu")


def test_gpt_neox_style_padding_mask_gather_nd():
    """A padding mask's rows picked by (batch, position) pairs computed from the input ids, as transformers'
    exports write it."""
    ids = np.array([[5, 7, 0, 0], [3, 0, 0, 0]], np.int64)
    nodes = [helper.make_node("Equal", ["ids", "zero"], ["pad"]), helper.make_node("Not", ["pad"], ["keep"]),
             helper.make_node("NonZero", ["keep"], ["nz"]), helper.make_node("Transpose", ["nz"], ["pairs"]),
             helper.make_node("GatherND", ["h", "pairs"], ["y"])]
    proto = make(nodes, [("ids", T.INT64, [2, 4]), ("h", T.FLOAT, [2, 4, 3])], [("y", T.FLOAT, [None, 3])],
                 {"zero": np.array(0, np.int64)})
    compare(proto, {"ids": ids, "h": RNG.normal(size=(2, 4, 3)).astype(np.float32)})


# -- ReduceProd -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axes,keep", [((3, 7), [1], 1), ((2, 3, 5), [0, 2], 0), ((4, 9), None, 1),
                                             ((2, 1, 6), [-1], 0), ((5, 3), [0], 1), ((2, 2, 2, 3), [1, 2, 3], 1)])
def test_reduce_prod_matches_onnxruntime(shape, axes, keep):
    x = (RNG.uniform(0.5, 1.5, shape) * RNG.choice([-1, 1], shape)).astype(np.float32)
    if x.size > 20:
        x.reshape(-1)[3] = 0.0
    ins = ["x"] + (["axes"] if axes is not None else [])
    inits = {"axes": np.array(axes, np.int64)} if axes is not None else None
    out = np.prod(x, axis=None if axes is None else tuple(axes), keepdims=bool(keep)).shape
    proto = make([helper.make_node("ReduceProd", ins, ["y"], keepdims=keep)], [("x", T.FLOAT, list(shape))],
                 [("y", T.FLOAT, list(out))], inits)
    compare(proto, {"x": x}, rtol=1e-5)


# -- QLinearSoftmax (com.microsoft) ------------------------------------------------------------------------------
@pytest.mark.parametrize("qtype,opset,axis", [(T.UINT8, 13, -1), (T.INT8, 13, -1), (T.UINT8, 12, 1),
                                              (T.UINT8, 13, 1)])
def test_qlinear_softmax_matches_onnxruntime_to_one_step(qtype, opset, axis):
    npt = np.uint8 if qtype == T.UINT8 else np.int8
    info = np.iinfo(npt)
    x = RNG.integers(info.min, info.max + 1, (2, 6, 5)).astype(npt)
    zy = 0 if qtype == T.UINT8 else -128
    inits = {"sx": np.array(0.05, np.float32), "zx": np.array(3, npt), "sy": np.array(1 / 256, np.float32),
             "zy": np.array(zy, npt)}
    node = helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft",
                            axis=axis, opset=opset)
    proto = make([node], [("x", qtype, [2, 6, 5])], [("y", qtype, [2, 6, 5])], inits, opset=opset, ms=True)
    want = ort_run(proto, {"x": x})[0]
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device="cpu"), {"x": x})["y"]
    assert got.dtype == want.dtype
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


# -- If ---------------------------------------------------------------------------------------------------------
def _branches():
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"]), helper.make_node("Relu", ["t"], ["out"])],
                             "then", [], [helper.make_tensor_value_info("out", T.FLOAT, [2, 3])],
                             [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["out2"])], "else", [],
                              [helper.make_tensor_value_info("out2", T.FLOAT, [2, 3])])
    return then, other


def test_if_on_a_condition_folded_from_shapes():
    then, other = _branches()
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceSum", ["s"], ["n"], keepdims=0),
             helper.make_node("Greater", ["n", "four"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["y", "x"], ["z"])]
    proto = make(nodes, [("x", T.FLOAT, [2, 3])], [("z", T.FLOAT, [2, 3])], {"four": np.array(4, np.int64)})
    model = compare(proto, {"x": RNG.normal(size=(2, 3)).astype(np.float32)})
    assert not ggmlpy.onnx_summary(model)["value_inputs"]


def test_if_on_a_fed_condition_is_planned_for_its_value():
    then, other = _branches()
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    proto = make(nodes, [("c", T.BOOL, []), ("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, [2, 3])])
    model = ggmlpy.onnx_load(proto, device="cpu")
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    for c in (True, False, True):
        compare(proto, {"c": np.array(c), "x": x}, model=model)
    assert ggmlpy.onnx_summary(model)["value_inputs"] == ["c"]


def test_if_on_a_condition_computed_in_the_graph_defers_the_branch_to_a_stage_planned_for_its_value():
    """The condition is computed from x in a first graph and read on the host; the If (and what reads it)
    is built in a next stage, one per value of the condition: x's values key no plan, so new images do
    not plan the graph again."""
    then, other = _branches()
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["y", "x"], ["z"])]
    proto = make(nodes, [("x", T.FLOAT, [2, 3])], [("z", T.FLOAT, [2, 3]), ("s", T.FLOAT, [])],
                 {"zero": np.array(0.0, np.float32)})
    model = ggmlpy.onnx_load(proto, device="cpu")
    for _ in range(3):
        x = RNG.normal(size=(2, 3)).astype(np.float32)
        for sign in (1, -1):
            compare(proto, {"x": sign * np.abs(x)}, model=model)
    summary = ggmlpy.onnx_summary(model)
    assert summary["value_inputs"] == [] and summary["plans_built"] == 3, summary  # the first stage, then c's two


def test_if_branches_read_values_the_first_stage_computed():
    """Branches that read outer values by name (computed before the If, and a graph input) get them in the
    next stage; a second If on another computed condition is deferred with it."""
    then = helper.make_graph([helper.make_node("Mul", ["xr", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", T.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Sub", ["xr", "x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", T.FLOAT, [2, 3])])
    then2 = helper.make_graph([helper.make_node("Neg", ["y"], ["n"])], "then2", [],
                              [helper.make_tensor_value_info("n", T.FLOAT, [2, 3])])
    other2 = helper.make_graph([helper.make_node("Identity", ["y"], ["i"])], "else2", [],
                               [helper.make_tensor_value_info("i", T.FLOAT, [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["xr"]), helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "one"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("ReduceMin", ["y"], ["lo"], keepdims=0),
             helper.make_node("Less", ["lo", "zero"], ["c2"]),
             helper.make_node("If", ["c2"], ["z"], then_branch=then2, else_branch=other2)]
    proto = make(nodes, [("x", T.FLOAT, [2, 3]), ("w", T.FLOAT, [2, 3])], [("z", T.FLOAT, [2, 3])],
                 {"one": np.array(1.0, np.float32), "zero": np.array(0.0, np.float32)})
    model = ggmlpy.onnx_load(proto, device="cpu")
    for scale in (3.0, 0.1, -1.0):
        x = (RNG.normal(size=(2, 3)) * scale).astype(np.float32)
        compare(proto, {"x": x, "w": RNG.normal(size=(2, 3)).astype(np.float32)}, model=model)
    assert ggmlpy.onnx_summary(model)["value_inputs"] == []


def test_a_host_step_in_a_branch_runs_after_the_graph_that_computes_its_input():
    """NonMaxSuppression in the branch taken, on boxes the graph computes: the branch's nodes take the
    If's place, so the host step is deferred as at the top level (as in torchvision's detection models)."""
    nms = helper.make_graph([helper.make_node("NonMaxSuppression", ["b3", "s3", "k", "iou"], ["sel"]),
                             helper.make_node("Gather", ["sel", "two"], ["col"], axis=1)], "nms", [],
                            [helper.make_tensor_value_info("col", T.INT64, None)])
    none = helper.make_graph([helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(
        np.zeros(0, np.int64)))], "none", [], [helper.make_tensor_value_info("e", T.INT64, None)])
    nodes = [helper.make_node("Relu", ["boxes"], ["br"]), helper.make_node("Unsqueeze", ["br", "zero"], ["b3"]),
             helper.make_node("Sigmoid", ["scores"], ["sg"]), helper.make_node("Unsqueeze", ["sg", "zeros2"], ["s3"]),
             helper.make_node("ReduceMax", ["scores"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "lim"], ["c"]),
             helper.make_node("If", ["c"], ["kept"], then_branch=nms, else_branch=none)]
    inits = {"zero": np.array([0], np.int64), "zeros2": np.array([0, 1], np.int64), "k": np.array([3], np.int64),
             "iou": np.array([0.5], np.float32), "two": np.array(2, np.int64), "lim": np.array(-5.0, np.float32)}
    proto = make(nodes, [("boxes", T.FLOAT, [6, 4]), ("scores", T.FLOAT, [6])], [("kept", T.INT64, ["n"])], inits)
    model = ggmlpy.onnx_load(proto, device="cpu")
    for shift in (0.0, -10.0):
        corner = RNG.uniform(0, 5, (6, 2))
        feeds = {"boxes": np.concatenate([corner, corner + RNG.uniform(1, 3, (6, 2))], 1).astype(np.float32),
                 "scores": (RNG.normal(size=6) + shift).astype(np.float32)}
        got, want = ggmlpy.onnx_run(model, feeds)["kept"], ort_run(proto, feeds)[0]
        np.testing.assert_array_equal(got, want)
    assert ggmlpy.onnx_summary(model)["value_inputs"] == []


def test_scatter_indices_from_a_host_step_plan_a_next_stage_not_the_graph():
    """ScatterND's indices computed from NonZero's output: the graph before NonZero is planned once; the
    stage after it is planned for the indices' values, not for the graph's input they came from."""
    nodes = [helper.make_node("Relu", ["x"], ["xr"]), helper.make_node("Greater", ["xr", "zero"], ["pos"]),
             helper.make_node("NonZero", ["pos"], ["nz"]), helper.make_node("Transpose", ["nz"], ["idx"]),
             helper.make_node("GatherND", ["xr", "idx"], ["v"]), helper.make_node("Mul", ["v", "two"], ["u"]),
             helper.make_node("ScatterND", ["xr", "idx", "u"], ["y"])]
    proto = make(nodes, [("x", T.FLOAT, [3, 4])], [("y", T.FLOAT, [3, 4])],
                 {"zero": np.array(0.0, np.float32), "two": np.array(2.0, np.float32)})
    model = ggmlpy.onnx_load(proto, device="cpu")
    for _ in range(3):
        compare(proto, {"x": RNG.normal(size=(3, 4)).astype(np.float32)}, model=model)
    assert ggmlpy.onnx_summary(model)["value_inputs"] == []