"""Narrowing (ggmlpy/onnx/narrowing.py): a value computed row by row is computed only for the rows
its readers use. Each graph runs through onnx_load/onnx_run and must equal onnx's reference
implementation; each test also says which nodes it expects narrowed, so a rule that stops firing
(or fires where it must not) fails here, not only in a benchmark."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx.model import OnnxModel  # noqa: E402

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model_of(nodes, inputs: dict, consts: dict, opset=17):
    vis = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()]
    g = helper.make_graph(nodes, "narrowing", vis, [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    y = ReferenceEvaluator(m).run(None, {n: np.zeros(s, np.float32) for n, s in inputs.items()})[0]
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", T.FLOAT, list(y.shape)))
    return m


def node(op, ins, out, **attrs):
    return helper.make_node(op, ins, [out], **attrs)


def check(m, feeds, narrowed, threads=1):
    """Run m on ggmlpy and the reference; the set of narrowed node outputs must be `narrowed`."""
    model = ggmlpy.onnx_load(m, device="cpu", n_threads=threads)
    g = model.graph_for(model.input_shapes)
    assert set(getattr(g, "narrowed", {})) == set(narrowed)
    got = ggmlpy.onnx_run(model, feeds)["y"]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return model


@pytest.mark.parametrize("index", [0, 3, -1])
@pytest.mark.parametrize("threads", [1, 3])
def test_a_classifiers_token_through_an_mlp_block(index, threads):
    """A pre-norm MLP block and a residual, then one token: every node computes that token only."""
    B, Tn, D, H = 2, 7, 8, 16
    nodes = [node("LayerNormalization", ["x", "g", "b"], "n", axis=-1),
             node("MatMul", ["n", "w1"], "h"), node("Add", ["h", "b1"], "hb"), node("Relu", ["hb"], "r"),
             node("MatMul", ["r", "w2"], "o"), node("Add", ["x", "o"], "res"),
             node("Gather", ["res", "i"], "y", axis=1)]
    m = model_of(nodes, {"x": [B, Tn, D]}, {"g": rand(D), "b": rand(D), "w1": rand(D, H), "b1": rand(H),
                                            "w2": rand(H, D), "i": np.array(index, np.int64)})
    check(m, {"x": rand(B, Tn, D)}, {"n", "h", "hb", "r", "o", "res"}, threads)


def test_slice_seeds_with_negative_bounds_and_other_axes():
    """Slice rows [-3, -1) of axis 1 and columns 1..5 of axis 2: the cut is the rows (fewer of them);
    the Slice keeps its column bounds and reads the cut rows from 0."""
    nodes = [node("MatMul", ["x", "w"], "h"), node("Tanh", ["h"], "t"),
             node("Slice", ["t", "s", "e", "a"], "y")]
    m = model_of(nodes, {"x": [2, 9, 4]}, {"w": rand(4, 6), "s": np.array([1, -3], np.int64),
                                           "e": np.array([5, -1], np.int64), "a": np.array([2, 1], np.int64)})
    check(m, {"x": rand(2, 9, 4)}, {"h", "t"})


def test_a_value_read_whole_elsewhere_is_not_narrowed():
    nodes = [node("MatMul", ["x", "w"], "h"), node("Relu", ["h"], "r"), node("Gather", ["r", "i"], "g", axis=0),
             node("ReduceSum", ["r"], "s", keepdims=0), node("Add", ["g", "s"], "y")]
    m = model_of(nodes, {"x": [5, 4]}, {"w": rand(4, 3), "i": np.array(2, np.int64)})
    check(m, {"x": rand(5, 4)}, set())


def test_a_graph_output_is_computed_whole():
    nodes = [node("MatMul", ["x", "w"], "h"), node("Relu", ["h"], "r"), node("Gather", ["r", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [5, 4]}, {"w": rand(4, 3), "i": np.array(2, np.int64)})
    m.graph.output.append(helper.make_tensor_value_info("r", T.FLOAT, [5, 3]))
    model = ggmlpy.onnx_load(m, device="cpu")
    assert getattr(model.graph_for(model.input_shapes), "narrowed", {}) == {}
    got = ggmlpy.onnx_run(model, {"x": np.ones((5, 4), np.float32)})
    assert got["r"].shape == (5, 3)


@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_narrows_only_along_its_other_axes(axis):
    nodes = [node("MatMul", ["x", "w"], "h"), node("Softmax", ["h"], "p", axis=axis),
             node("Gather", ["p", "i"], "y", axis=1)]
    m = model_of(nodes, {"x": [3, 6, 4]}, {"w": rand(4, 5), "i": np.array(4, np.int64)})
    check(m, {"x": rand(3, 6, 4)}, {"h", "p"} if axis == -1 else set())


def test_attention_computes_the_kept_querys_rows_only():
    """softmax(q k^T / 2) v for one query: q, the scores and their softmax shrink, k and v stay whole."""
    Tn, D = 6, 4
    nodes = [node("MatMul", ["x", "wq"], "q"), node("MatMul", ["x", "wk"], "k"), node("MatMul", ["x", "wv"], "v"),
             node("Transpose", ["k"], "kt", perm=[0, 2, 1]), node("MatMul", ["q", "kt"], "s"),
             node("Mul", ["s", "half"], "ss"), node("Softmax", ["ss"], "p", axis=-1), node("MatMul", ["p", "v"], "a"),
             node("Gather", ["a", "i"], "y", axis=1)]
    m = model_of(nodes, {"x": [2, Tn, D]}, {"wq": rand(D, D), "wk": rand(D, D), "wv": rand(D, D),
                                            "half": np.float32(0.5), "i": np.array(0, np.int64)})
    check(m, {"x": rand(2, Tn, D)}, {"q", "s", "ss", "p", "a"})


@pytest.mark.parametrize("rows, narrowed", [((0, 2), {"h", "r"}), ((2, 6), {"h", "r"}), ((1, 2), set())])
def test_reshape_merging_rows_narrows_whole_groups(rows, narrowed):
    """[T, B, D] -> [T*B, D]: rows of the merged axis are whole groups of B = 2 or nothing is cut."""
    nodes = [node("MatMul", ["x", "w"], "h"), node("Reshape", ["h", "shape"], "r"),
             node("Slice", ["r", "s", "e", "a"], "y")]
    m = model_of(nodes, {"x": [4, 2, 3]}, {"w": rand(3, 5), "shape": np.array([8, 5], np.int64),
                                           "s": np.array([rows[0]], np.int64), "e": np.array([rows[1]], np.int64),
                                           "a": np.array([0], np.int64)})
    check(m, {"x": rand(4, 2, 3)}, narrowed | ({"r"} if narrowed else set()))


@pytest.mark.parametrize("batch", [1, 2])
def test_reshape_splitting_rows_and_a_transpose(batch):
    """A seq-first attention's output projection: [T*B, D] -> [T, B, D] -> [B, T, D], then one token."""
    Tn, D = 5, 4
    nodes = [node("Gemm", ["x", "w", "c"], "h", transB=1), node("Reshape", ["h", "shape"], "r"),
             node("Transpose", ["r"], "t", perm=[1, 0, 2]), node("Gather", ["t", "i"], "y", axis=1)]
    m = model_of(nodes, {"x": [Tn * batch, D]}, {"w": rand(D, D), "c": rand(D),
                                                "shape": np.array([Tn, batch, D], np.int64),
                                                "i": np.array(2, np.int64)})
    check(m, {"x": rand(Tn * batch, D)}, {"h", "r", "t"})


@pytest.mark.parametrize("trans_a, c_shape, narrowed", [
    (0, (5, 3), {"h"}), (1, (3,), {"h"}), (0, (1, 3), {"h"})])
def test_gemm_rows_with_its_bias(trans_a, c_shape, narrowed):
    nodes = [node("Gemm", ["x", "w", "c"], "h", transA=trans_a, alpha=0.5, beta=2.0), node("Gather", ["h", "i"], "y")]
    x_shape = [4, 5] if trans_a else [5, 4]
    m = model_of(nodes, {"x": x_shape}, {"w": rand(4, 3), "c": rand(*c_shape), "i": np.array([1, 3], np.int64)})
    check(m, {"x": rand(*x_shape)}, narrowed)


def test_columns_of_a_product_cut_its_weights():
    nodes = [node("MatMul", ["x", "w"], "h"), node("Sigmoid", ["h"], "s"), node("Slice", ["s", "b", "e", "a"], "y")]
    m = model_of(nodes, {"x": [3, 4]}, {"w": rand(4, 9), "b": np.array([2], np.int64), "e": np.array([5], np.int64),
                                        "a": np.array([-1], np.int64)})
    check(m, {"x": rand(3, 4)}, {"h", "s"})


@pytest.mark.parametrize("b_batch", [4, 1])
def test_batched_product_cut_along_its_batch(b_batch):
    nodes = [node("MatMul", ["x", "w"], "h"), node("Gather", ["h", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [4, 3, 2]}, {"w": rand(b_batch, 2, 5), "i": np.array(1, np.int64)})
    check(m, {"x": rand(4, 3, 2)}, {"h"})


def test_regrouping_ops_and_a_gather_on_another_axis():
    """Unsqueeze, Squeeze, Flatten, a Concat along another axis, a constant Gather on another axis."""
    nodes = [node("Relu", ["x"], "r"), node("Unsqueeze", ["r", "ax0"], "u"), node("Squeeze", ["u", "ax0"], "q"),
             node("Concat", ["q", "z"], "c", axis=2), node("Gather", ["c", "j"], "gj", axis=2),
             node("Flatten", ["gj"], "f", axis=1), node("Gather", ["f", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [4, 3, 2]}, {"ax0": np.array([0], np.int64), "z": rand(4, 3, 2),
                                           "j": np.array([0, 3], np.int64), "i": np.array([2], np.int64)})
    check(m, {"x": rand(4, 3, 2)}, {"r", "u", "q", "c", "gj", "f"})


def test_squeeze_of_every_unit_axis_stops_a_cut_of_one_row():
    nodes = [node("Relu", ["x"], "r"), node("Squeeze", ["r"], "q"), node("Gather", ["q", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [1, 4, 3]}, {"i": np.array([2], np.int64)}, opset=11)
    check(m, {"x": rand(1, 4, 3)}, set())


def test_shape_of_a_narrowed_value_is_the_whole_ones():
    """A Shape read of a narrowed value (the exporters' scale sqrt(d) comes from one) stays the full shape."""
    nodes = [node("MatMul", ["x", "w"], "h"), node("Shape", ["h"], "sh"), node("Cast", ["sh"], "shf", to=T.FLOAT),
             node("ReduceSum", ["shf"], "n", keepdims=1), node("Div", ["h", "n"], "d"),
             node("Gather", ["d", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [6, 4]}, {"w": rand(4, 3), "i": np.array(5, np.int64)})
    check(m, {"x": rand(6, 4)}, {"h", "d"})


def test_views_alone_are_left_as_they_are():
    nodes = [node("Transpose", ["x"], "t", perm=[1, 0]), node("Gather", ["t", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [3, 5]}, {"i": np.array(1, np.int64)})
    check(m, {"x": rand(3, 5)}, set())


UNARY = ["Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Exp"]


@st.composite
def chains(draw):
    """A random chain of row-wise ops on x [B, T, D], then a Gather or Slice of rows along T."""
    B, Tn, D = draw(st.integers(1, 3)), draw(st.integers(2, 6)), draw(st.integers(1, 5))
    nodes, consts, cur, shape, k = [], {}, "x", [B, Tn, D], 0
    for _ in range(draw(st.integers(1, 6))):
        k += 1
        out = f"v{k}"
        kind = draw(st.sampled_from(["unary", "add_row", "add_full", "matmul", "layernorm", "softmax", "split_d"]))
        if kind == "unary":
            nodes.append(node(draw(st.sampled_from(UNARY)), [cur], out))
        elif kind == "add_row":
            consts[f"c{k}"] = rand(shape[-1])
            nodes.append(node("Add", [cur, f"c{k}"], out))
        elif kind == "add_full":  # a constant of the whole shape: cut by a Slice of it
            consts[f"c{k}"] = rand(*shape)
            nodes.append(node("Mul", [f"c{k}", cur], out))
        elif kind == "matmul":
            n = draw(st.integers(1, 5))
            consts[f"c{k}"] = rand(shape[-1], n)
            nodes.append(node("MatMul", [cur, f"c{k}"], out))
            shape = shape[:-1] + [n]
        elif kind == "layernorm":
            consts[f"c{k}"] = rand(shape[-1])
            nodes.append(node("LayerNormalization", [cur, f"c{k}"], out, axis=-1))
        elif kind == "softmax":
            nodes.append(node("Softmax", [cur], out, axis=-1))
        elif kind == "split_d" and len(shape) == 3:
            consts[f"c{k}"] = np.array(shape + [1], np.int64)
            nodes.append(node("Reshape", [cur, f"c{k}"], out))
            shape = shape + [1]
        else:
            continue
        cur = out
    if draw(st.booleans()):
        idx = draw(st.lists(st.integers(-Tn, Tn - 1), min_size=1, max_size=3))
        consts["idx"] = np.array(idx if len(idx) > 1 else idx[0], np.int64)
        nodes.append(node("Gather", [cur, "idx"], "y", axis=1))
    else:
        s = draw(st.integers(0, Tn - 1))
        e = draw(st.integers(s + 1, Tn))
        consts.update(s=np.array([s], np.int64), e=np.array([e], np.int64), a=np.array([1], np.int64))
        nodes.append(node("Slice", [cur, "s", "e", "a"], "y"))
    return model_of(nodes, {"x": [B, Tn, D]}, consts), (B, Tn, D)


@settings(max_examples=60, deadline=None)
@given(chains())
def test_random_row_wise_chains_match_the_reference(case):
    m, shape = case
    x = rand(*shape)
    model = ggmlpy.onnx_load(m, device="cpu")
    got = ggmlpy.onnx_run(model, {"x": x})["y"]
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_without_shapes_onnx_can_infer_the_graph_is_planned_as_it_is(monkeypatch):
    def fails(*a, **k):
        raise onnx.shape_inference.InferenceError("no")
    monkeypatch.setattr("ggmlpy.onnx.model.static_shapes", fails)
    nodes = [node("MatMul", ["x", "w"], "h"), node("Gather", ["h", "i"], "y", axis=0)]
    m = model_of(nodes, {"x": [5, 4]}, {"w": rand(4, 3), "i": np.array(2, np.int64)})
    model = ggmlpy.onnx_load(m, device="cpu")
    assert model.graph_for(model.input_shapes) is model.proto.graph
    x, w = rand(5, 4), numpy_helper.to_array(m.graph.initializer[0])
    np.testing.assert_allclose(ggmlpy.onnx_run(model, {"x": x})["y"], x[2] @ w, rtol=1e-5, atol=1e-6)


def test_unnarrowed_and_narrowed_plans_agree(monkeypatch):
    """The same model planned with and without narrowing gives the same numbers."""
    B, Tn, D = 2, 9, 16
    nodes = [node("LayerNormalization", ["x", "g"], "n", axis=-1), node("MatMul", ["n", "w1"], "h"),
             node("Add", ["h", "b1"], "hb"), node("Relu", ["hb"], "r"), node("MatMul", ["r", "w2"], "o"),
             node("Add", ["o", "b2"], "ob"), node("Add", ["x", "ob"], "res"), node("Gather", ["res", "i"], "y", axis=1)]
    m = model_of(nodes, {"x": [B, Tn, D]}, {"g": rand(D), "w1": rand(D, 32), "b1": rand(32), "w2": rand(32, D),
                                            "b2": rand(D), "i": np.array(0, np.int64)})
    x = rand(B, Tn, D)
    narrowed = ggmlpy.onnx_run(ggmlpy.onnx_load(m, device="cpu"), {"x": x})["y"]
    monkeypatch.setattr(OnnxModel, "graph_for", lambda self, shapes: self.proto.graph)
    whole = ggmlpy.onnx_run(ggmlpy.onnx_load(m, device="cpu"), {"x": x})["y"]
    np.testing.assert_allclose(narrowed, whole, rtol=1e-6, atol=1e-6)


def test_shapes_inferred_wrong_plan_the_graph_whole(monkeypatch):
    """Narrowing trusts onnx's shape inference; where a value builds another shape than it said (here
    a broadcast operand said to have one row), the plan is discarded and the graph planned whole."""
    from ggmlpy.onnx import narrowing
    real = narrowing.static_shapes

    def lying(proto, shapes):
        out = real(proto, shapes)
        out["z"] = (1, 1, 4)
        return out
    nodes = [node("MatMul", ["x", "w"], "h"), node("Add", ["h", "z"], "s"), node("Gather", ["s", "i"], "y", axis=1)]
    m = model_of(nodes, {"x": [1, 5, 3], "z": [1, 5, 4]}, {"w": rand(3, 4), "i": np.array(3, np.int64)})
    monkeypatch.setattr("ggmlpy.onnx.model.static_shapes", lying)
    model = ggmlpy.onnx_load(m, device="cpu")
    x, z = rand(1, 5, 3), rand(1, 5, 4)
    got = ggmlpy.onnx_run(model, {"x": x, "z": z})["y"]
    np.testing.assert_allclose(got, (x @ numpy_helper.to_array(m.graph.initializer[0]) + z)[:, 3], rtol=1e-5, atol=1e-6)
    assert model.narrowing is False
