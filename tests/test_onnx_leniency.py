"""What onnxruntime loads though onnx's checker refuses it, where the meaning is unambiguous
(ggmlpy/onnx/leniency.py): loaded with a warning naming the defect, and compared with onnxruntime;
what stays ambiguous or invalid is still refused."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import OnnxError  # noqa: E402

RNG = np.random.default_rng(2)


def layer_norm_model(opset, x_shape=(2, 5, 8), op="LayerNormalization"):
    inits = {"s": RNG.normal(size=8).astype(np.float32), "b": RNG.normal(size=8).astype(np.float32)}
    g = helper.make_graph([helper.make_node(op, ["x", "s", "b"], ["y"], epsilon=1e-5, axis=-1)], "ln",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, list(x_shape))],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def compare(proto, feeds, match):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.warns(UserWarning, match=match):
        model = ggmlpy.onnx_load(proto, device="cpu")
    got = ggmlpy.onnx_run(model, feeds)
    for w, o in zip(want, proto.graph.output):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5)
    return model


@pytest.mark.parametrize("opset", [11, 13, 16])
def test_layer_normalization_under_an_older_opset(opset):
    proto = layer_norm_model(opset)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(proto)
    compare(proto, {"x": RNG.normal(size=(2, 5, 8)).astype(np.float32)},
            f"LayerNormalization at node 'y' under opset {opset}, older than 17")


def test_an_op_missing_from_its_opset_is_still_refused():
    """Gelu under opset 17 (defined from 20): onnxruntime refuses it too."""
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3])], [helper.make_tensor_value_info("y", T.FLOAT, [3])])
    with pytest.raises(OnnxError, match="No Op registered for Gelu"):
        ggmlpy.onnx_load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")


def test_other_defects_beside_an_accepted_one_are_still_refused():
    proto = layer_norm_model(13)
    proto.graph.node[0].input[1] = "missing"
    with pytest.raises(OnnxError, match="not a valid ONNX model"):
        ggmlpy.onnx_load(proto, device="cpu")


def shapeless_model(output_shape=None):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("ReduceSum", ["r", "ax"], ["y"], keepdims=1)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, None)],
                          [helper.make_tensor_value_info("y", T.FLOAT, output_shape)],
                          [numpy_helper.from_array(np.array([-1], np.int64), "ax")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_input_without_a_shape_takes_the_shape_it_is_fed():
    proto = shapeless_model()
    with pytest.warns(UserWarning, match="graph input 'x' has no shape"):
        fresh = ggmlpy.onnx_load(proto, device="cpu")
    assert ggmlpy.onnx_inputs(fresh) == {"x": None} and not ggmlpy.onnx_summary(fresh)["planned"]
    model = compare(proto, {"x": RNG.normal(size=(3, 4)).astype(np.float32)}, "graph input 'x' has no shape")
    for shape in ((2, 3, 5), (7,)):
        x = RNG.normal(size=shape).astype(np.float32)
        np.testing.assert_allclose(ggmlpy.onnx_run(model, {"x": x})["y"], np.maximum(x, 0).sum(-1, keepdims=True),
                                   rtol=1e-5)


def test_an_input_without_a_shape_given_by_input_shapes_is_planned_at_load():
    with pytest.warns(UserWarning, match="has no shape"):
        model = ggmlpy.onnx_load(shapeless_model(), device="cpu", input_shapes={"x": (2, 6)})
    assert ggmlpy.onnx_inputs(model) == {"x": [2, 6]} and ggmlpy.onnx_summary(model)["planned"]
    x = RNG.normal(size=(2, 6)).astype(np.float32)
    np.testing.assert_allclose(ggmlpy.onnx_run(model, {"x": x})["y"], np.maximum(x, 0).sum(-1, keepdims=True), rtol=1e-5)


def test_a_valid_model_loads_without_a_warning(recwarn):
    ggmlpy.onnx_load(layer_norm_model(17), device="cpu")
    assert not [w for w in recwarn if "onnxruntime" in str(w.message)]
