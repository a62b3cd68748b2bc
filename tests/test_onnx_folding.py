"""Constant folding (ggmlpy/onnx/folding.py): numpy folders of ggmlpy's own where onnx's reference
implementation refuses valid input, and a node built in the graph where every folder fails.

Two exports onnx's reference refuses: a BERT export's GatherElements of a [1, 512] buffer by [1, 128]
indices (opset 17) and a RoBERTa export's OneHot whose depth has shape [1] (opset 9), each as a small
graph compared with onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import folding  # noqa: E402

RNG = np.random.default_rng(11)


def make(nodes, inputs, outputs, inits, opset):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def compare(proto, feeds, rtol=1e-5, atol=1e-6):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    model = ggmlpy.onnx_load(proto, device="cpu")
    got = ggmlpy.onnx_run(model, feeds)
    for w, o in zip(want, proto.graph.output):
        np.testing.assert_allclose(got[o.name], w, rtol=rtol, atol=atol)
    return model


def test_bert_token_type_gather_elements_folds():
    """[1, 512] buffer, [1, 128] indices along axis 1: onnx's reference raises ('cannot reshape array of
    size 1 into shape (1,128)'); folded, the embeddings match onnxruntime."""
    S = 128
    inits = {"buf": RNG.integers(0, 2, (1, 512)).astype(np.int64), "pos": np.arange(S, dtype=np.int64)[None] + 7,
             "tt_emb": RNG.normal(size=(2, 16)).astype(np.float32),
             "w_emb": RNG.normal(size=(50, 16)).astype(np.float32)}
    nodes = [helper.make_node("GatherElements", ["buf", "pos"], ["tt"], axis=1),
             helper.make_node("Gather", ["tt_emb", "tt"], ["e1"]), helper.make_node("Gather", ["w_emb", "ids"], ["e2"]),
             helper.make_node("Add", ["e1", "e2"], ["y"])]
    proto = make(nodes, [("ids", T.INT64, [1, S])], [("y", T.FLOAT, [1, S, 16])], inits, 17)
    with pytest.raises(Exception, match="cannot reshape"):
        ReferenceEvaluator(proto.graph.node[0]).run(None, {"buf": inits["buf"], "pos": inits["pos"]})
    compare(proto, {"ids": RNG.integers(0, 50, (1, S)).astype(np.int64)})


@pytest.mark.parametrize("depth", [np.array([6], np.int64), np.array(6, np.int64), np.array([6.0], np.float32)])
def test_roberta_one_hot_with_a_depth_of_shape_one_folds(depth):
    ids = np.array([[0, 3, 5, 1, 2]], np.int64)  # non-negative: opset 9 has no negative indices
    inits = {"ids": ids, "depth": depth, "vals": np.array([0, 1], np.float32),
             "emb": RNG.normal(size=(6, 8)).astype(np.float32)}
    nodes = [helper.make_node("OneHot", ["ids", "depth", "vals"], ["hot"], axis=-1),
             helper.make_node("MatMul", ["hot", "emb"], ["pe"]), helper.make_node("Add", ["x", "pe"], ["y"])]
    proto = make(nodes, [("x", T.FLOAT, [1, 5, 8])], [("y", T.FLOAT, [1, 5, 8])], inits, 9)
    compare(proto, {"x": RNG.normal(size=(1, 5, 8)).astype(np.float32)})


def test_a_node_no_folder_can_evaluate_is_built_in_the_graph(monkeypatch):
    """Where folding raises, the node runs in the graph from its constant inputs, with the same values."""
    inits = {"a": RNG.normal(size=(3, 4)).astype(np.float32), "b": RNG.normal(size=(4,)).astype(np.float32)}
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["x", "ab"], ["y"])]
    proto = make(nodes, [("x", T.FLOAT, [3, 4])], [("y", T.FLOAT, [3, 4])], inits, 17)
    feeds = {"x": RNG.normal(size=(3, 4)).astype(np.float32)}

    def refuse(ins, at):
        raise ValueError("no folder")
    monkeypatch.setitem(folding.FOLDERS, "Mul", refuse)
    compare(proto, feeds)


REFERENCE_CASES = [  # (op, inputs, attributes): valid inputs onnx's reference evaluates
    ("GatherElements", [RNG.normal(size=(3, 4, 5)), RNG.integers(-4, 4, (3, 2, 5))], {"axis": 1}),
    ("GatherElements", [RNG.normal(size=(3, 4)), RNG.integers(-3, 3, (2, 4))], {"axis": 0}),
    ("GatherND", [RNG.normal(size=(3, 4, 5)), RNG.integers(-3, 3, (2, 2, 2))], {}),
    ("GatherND", [RNG.normal(size=(2, 4, 5)), RNG.integers(0, 4, (2, 3, 1))], {"batch_dims": 1}),
    ("GatherND", [RNG.normal(size=(2, 3, 4, 5)), RNG.integers(0, 3, (2, 3, 1, 1))], {"batch_dims": 2}),
    ("ScatterND", [RNG.normal(size=(4, 5)), np.array([[1], [3]]), RNG.normal(size=(2, 5))], {}),
    ("ScatterND", [RNG.normal(size=(4, 5)), np.array([[1, 2], [1, 2]]), RNG.normal(size=(2,))],
     {"reduction": "add"}),
    ("ScatterND", [RNG.normal(size=(4, 5, 3)), np.array([[2], [0], [2]]), RNG.normal(size=(3, 5, 3))], {}),
    ("ScatterND", [RNG.normal(size=(4, 5)), np.array([[1, -2], [3, 0], [1, 3]]), RNG.normal(size=(3,))],
     {"reduction": "mul"}),
    ("ScatterND", [RNG.normal(size=(4, 5)), np.array([[-1], [3]]), RNG.normal(size=(2, 5))], {"reduction": "max"}),
    ("ScatterElements", [RNG.normal(size=(3, 4)), np.array([[1, 0, 2, -1], [1, 2, 0, 0]]), RNG.normal(size=(2, 4))],
     {}),
    ("ScatterElements", [RNG.normal(size=(3, 4, 5)), RNG.integers(-4, 4, (3, 6, 5)), RNG.normal(size=(3, 6, 5))],
     {"axis": 1, "reduction": "add"}),
    ("ScatterElements", [RNG.normal(size=(3, 4)), RNG.integers(0, 4, (3, 7)), RNG.normal(size=(3, 7))],
     {"axis": -1, "reduction": "mul"}),
    ("ScatterElements", [RNG.normal(size=(5, 2)), RNG.integers(0, 5, (8, 2)), RNG.normal(size=(8, 2))],
     {"reduction": "max"}),
    ("ScatterElements", [RNG.normal(size=(5, 2)), RNG.integers(0, 5, (8, 2)), RNG.normal(size=(8, 2))],
     {"reduction": "min"}),
    ("OneHot", [np.array([[1, 0], [2, -1]]), np.array(3), np.array([-1.0, 2.0])], {"axis": 1}),
    ("ReduceProd", [RNG.normal(size=(3, 4, 5)), np.array([0, 2])], {"keepdims": 0}),
    ("ReduceProd", [RNG.normal(size=(3, 4, 5))], {}),
]


@pytest.mark.parametrize("case", range(len(REFERENCE_CASES)))
def test_numpy_folders_equal_the_reference(case):
    op, ins, at = REFERENCE_CASES[case]
    ins = [np.asarray(a, np.float32 if np.asarray(a).dtype.kind == "f" else np.int64) for a in ins]
    names = [f"i{k}" for k in range(len(ins))]
    node = helper.make_node(op, names, ["y"], **at)
    want = ReferenceEvaluator(helper.make_model(helper.make_graph(
        [node], "m", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), None)
                      for n, a in zip(names, ins)], [helper.make_empty_tensor_value_info("y")]),
        opset_imports=[helper.make_opsetid("", 18)])).run(None, dict(zip(names, ins)))[0]
    got = folding.FOLDERS[op](ins, at)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
