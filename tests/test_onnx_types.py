"""ONNX's numeric types ggml lacks, at the model's boundary: bfloat16, float8 and int4 inputs come in
as ml_dtypes arrays, outputs leave in them, and Cast / QuantizeLinear round as the standard says."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto as T, helper  # noqa: E402

import ggmlpy.onnx as go  # noqa: E402

F8 = {T.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, T.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
      T.FLOAT8E5M2: ml_dtypes.float8_e5m2, T.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}


def _probe(dt):
    """Every finite value of the type, every midpoint between neighbours and the floats next to it,
    the subnormal range, overflow, infinities and NaN."""
    allv = np.unique(np.arange(256, dtype=np.uint8).view(dt).astype(np.float32))
    allv = allv[np.isfinite(allv)]
    mids = ((allv[:-1].astype(np.float64) + allv[1:]) / 2).astype(np.float32)
    mx = np.float32(float(ml_dtypes.finfo(dt).max))
    return np.concatenate([allv, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                           np.array([0, -0.0, 1.5 * mx, -3 * mx, 1e30, np.inf, -np.inf, np.nan], np.float32)])


def _same(got, want):
    g, w = got.astype(np.float32), want.astype(np.float32)
    return bool(np.all((g == w) | (np.isnan(g) & np.isnan(w))))


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", list(F8))
def test_cast_to_float8_rounds_and_saturates_in_the_graph(to, saturate):
    """The Cast's result is used inside the graph (Cast back to float), so the rounding is the graph's."""
    x = _probe(F8[to])
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["q"], to=to, saturate=saturate),
                           helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT),
                           helper.make_node("Identity", ["q"], ["q8"])], "c",
                          [helper.make_tensor_value_info("x", T.FLOAT, [x.size])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [x.size]),
                           helper.make_tensor_value_info("q8", to, [x.size])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    from onnx.reference import ReferenceEvaluator
    with np.errstate(all="ignore"):
        want_y, want_q = ReferenceEvaluator(m).run(None, {"x": x})
    out = go.onnx_run(go.onnx_load(m, device="cpu"), {"x": x})
    assert out["q8"].dtype == F8[to] and out["y"].dtype == np.float32
    assert _same(out["y"], want_y) and _same(out["q8"], want_q)


def test_narrow_inputs_and_outputs_cross_the_boundary():
    g = helper.make_graph([helper.make_node("Cast", ["a"], ["af"], to=T.FLOAT),
                           helper.make_node("Cast", ["i"], ["if_"], to=T.FLOAT),
                           helper.make_node("Add", ["af", "if_"], ["s"]),
                           helper.make_node("Cast", ["s"], ["y"], to=T.BFLOAT16)], "n",
                          [helper.make_tensor_value_info("a", T.FLOAT8E4M3FN, [4]),
                           helper.make_tensor_value_info("i", T.INT4, [4])],
                          [helper.make_tensor_value_info("y", T.BFLOAT16, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    a = np.array([0.5, -2.0, 448.0, 0.0625], np.float32).astype(ml_dtypes.float8_e4m3fn)
    i = np.array([-8, 7, 1, 0], np.int8).astype(ml_dtypes.int4)
    y = go.onnx_run(go.onnx_load(m, device="cpu"), {"a": a, "i": i})["y"]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), np.array([-7.5, 5.0, 448.0, 0.0625], np.float32))


def test_quantize_to_int4_clamps_to_its_range():
    from onnx import numpy_helper
    zp = numpy_helper.from_array(np.array(0, np.int8).astype(ml_dtypes.int4), "zp")
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])], "q",
                          [helper.make_tensor_value_info("x", T.FLOAT, [5])],
                          [helper.make_tensor_value_info("y", T.INT4, [5])],
                          initializer=[numpy_helper.from_array(np.array(0.5, np.float32), "s"), zp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    y = go.onnx_run(go.onnx_load(m, device="cpu"), {"x": np.array([-10, -1.25, 0.25, 1.3, 9], np.float32)})["y"]
    assert y.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(y.astype(np.int8), [-8, -2, 0, 3, 7])
