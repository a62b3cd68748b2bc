"""ONNX values of five axes above size one (ggmlpy/onnx/rank5.py): each op that merges a pair of axes,
against onnxruntime (and numpy), with the pair forced to each place it can go; and the ops and shapes
that cannot be merged, refused with an OnnxLimitation naming the op and the shapes."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy as g  # noqa: E402
from ggmlpy.onnx.graph import OnnxLimitation  # noqa: E402
from ggmlpy.onnx.rank5 import _chain, _keeps_pair  # noqa: E402

RNG = np.random.default_rng(5)
X5 = (2, 3, 4, 3, 2)  # ggmlR's test shape (test-onnx-edge.R)


def _arr(shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def _model(nodes, inputs, outputs, inits=(), opset=17, out_type=T.FLOAT):
    vi = [helper.make_tensor_value_info(n, T.FLOAT, list(a.shape)) for n, a in inputs]
    vo = [helper.make_tensor_value_info(n, out_type, None) for n in outputs]
    graph = helper.make_graph(nodes, "rank5", vi, vo, list(inits))
    m = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m)


def _check(nodes, inputs, outputs, inits=(), opset=17, rtol=1e-5, atol=1e-6, out_type=T.FLOAT):
    """The model's outputs from ggmlpy and onnxruntime, which must agree; returns ggmlpy's."""
    m = _model(nodes, inputs, outputs, inits, opset, out_type)
    feeds = {n: a for n, a in inputs}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = g.onnx_run(g.onnx_load(m, device="cpu"), feeds)
    for name, r in zip(outputs, ref):
        assert got[name].shape == r.shape, name
        np.testing.assert_allclose(got[name].astype(np.float64), r.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=name)
    return got


def _refused(nodes, inputs, outputs, inits=(), match="", opset=17):
    m = _model(nodes, inputs, outputs, inits, opset)
    with pytest.raises(OnnxLimitation, match=match):
        g.onnx_run(g.onnx_load(m, device="cpu"), {n: a for n, a in inputs})


# -- reshapes and element-wise ops of one input ------------------------------------------------------------
def test_reshape_to_five_axes_and_back_keeps_every_value():
    """ggmlR's test-onnx-boundary.R "Reshape to 5D then back preserves all values [60]" and
    test-onnx-edge.R's [144] <-> [2,3,4,3,2]."""
    x = np.arange(144, dtype=np.float32).reshape(12, 12)
    got = _check([helper.make_node("Reshape", ["X", "S5"], ["Y5"]), helper.make_node("Relu", ["Y5"], ["R"]),
                  helper.make_node("Reshape", ["R", "S1"], ["Y"])],
                 [("X", x)], ["Y5", "Y"], [_i64("S5", X5), _i64("S1", [144])])
    np.testing.assert_array_equal(got["Y5"], x.reshape(X5))
    np.testing.assert_array_equal(got["Y"], x.reshape(-1))


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Floor", "Ceil", "Sign", "Erf", "Softplus",
         "Softsign", "Elu", "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "Identity", "Round", "Sin", "Cos",
         "Selu", "Celu", "Mish", "ThresholdedRelu", "Shrink", "Sinh", "Cosh", "Tan", "Dropout"]


@pytest.mark.parametrize("op", UNARY)
def test_elementwise_ops_of_one_input_read_all_five_axes(op):
    """ggmlR's test-5d-ops.R ("5D unary <op> covers ne[4]") and test-onnx-boundary.R (Relu on
    [1,2,3,4,2] preserves all 48 elements), here on five axes above one."""
    _check([helper.make_node(op, ["X"], ["Y"])], [("X", _arr(X5))], ["Y"], opset=20 if op in ("Gelu", "Mish") else 17,
           atol=2e-6)


@pytest.mark.parametrize("to", [T.FLOAT16, T.BFLOAT16, T.INT32, T.BOOL, T.FLOAT8E4M3FN])
def test_cast_on_five_axes(to):
    x = _arr(X5, -3.0, 3.0)
    _check([helper.make_node("Cast", ["X"], ["C"], to=to), helper.make_node("Cast", ["C"], ["Y"], to=T.FLOAT)],
           [("X", x)], ["Y"], opset=19)


def test_gather_with_computed_indices_making_five_axes_checks_their_range():
    """[3, 4, 5, 2] gathered by [2, 2] indices along axis 1: five axes out, the indices flattened."""
    x = _arr((3, 4, 5, 2))
    vi = [helper.make_tensor_value_info("X", T.FLOAT, [3, 4, 5, 2]), helper.make_tensor_value_info("I", T.INT64, [2, 2])]
    m = helper.make_model(helper.make_graph([helper.make_node("Gather", ["X", "I"], ["Y"], axis=1)], "g", vi,
                                            [helper.make_tensor_value_info("Y", T.FLOAT, None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    loaded = g.onnx_load(m, device="cpu")
    idx = np.array([[3, 0], [1, 2]], dtype=np.int64)
    np.testing.assert_array_equal(g.onnx_run(loaded, {"X": x, "I": idx})["Y"], np.take(x, idx, 1))
    with pytest.raises(g.GGMLError, match=r"input 'I' holds indices outside \[-4, 4\)"):
        g.onnx_run(loaded, {"X": x, "I": np.array([[4, 0], [1, 2]], dtype=np.int64)})


def test_logic_and_tests_of_values_on_five_axes():
    x = _arr(X5)
    x[0, 1, 2] = np.nan
    x[1, 0, 3, 1] = np.inf
    _check([helper.make_node("IsNaN", ["X"], ["N"]), helper.make_node("IsInf", ["X"], ["I"]),
            helper.make_node("Not", ["N"], ["Y"])], [("X", x)], ["N", "I", "Y"], out_type=T.BOOL)


def test_sqrt_log_reciprocal_and_clip_on_five_axes():
    x = _arr(X5, 0.1, 3.0)
    _check([helper.make_node("Sqrt", ["X"], ["A"]), helper.make_node("Log", ["X"], ["B"]),
            helper.make_node("Reciprocal", ["X"], ["C"]), helper.make_node("Clip", ["X", "lo", "hi"], ["D"])],
           [("X", x)], ["A", "B", "C", "D"],
           [numpy_helper.from_array(np.float32(0.5), "lo"), numpy_helper.from_array(np.float32(2.0), "hi")])


@pytest.mark.parametrize("shape", [(1, 2, 3, 4, 2), (2, 3, 1, 4, 3, 1), (1, 2, 1, 3, 4, 5)])
def test_size_one_axes_are_dropped_as_before(shape):
    """Four axes above one under five or six: the compact layout, no merging."""
    _check([helper.make_node("Relu", ["X"], ["R"]), helper.make_node("Softmax", ["R"], ["Y"], axis=-1)],
           [("X", _arr(shape))], ["Y"])


# -- element-wise ops with broadcasting -----------------------------------------------------------------------
BROADCASTS = [
    (X5, X5),                      # same shape (ggmlR's "Add two 5D tensors")
    (X5, (2,)),                    # innermost axis only
    (X5, (3, 2)),                  # inner pair
    (X5, (4, 1, 1)),               # middle axis: pairs (0, 1) or (3, 4) merge
    (X5, (2, 1, 1, 1, 1)),         # outer axis
    (X5, (1, 3, 1, 1, 2)),         # scattered: (1, 2) or (2, 3) do not broadcast alike, (3, 4) does
    ((2, 1, 4, 3, 2), (1, 3, 1, 1, 1)),   # both broadcast: output [2, 3, 4, 3, 2]
    ((2, 1, 4, 1, 2), (3, 1, 5, 1)),   # neither operand has five axes above one, the output has
    ((1, 3, 4, 3, 2), X5),         # the first operand is the smaller
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa, sb", BROADCASTS)
def test_binary_ops_broadcast_on_five_axes(op, sa, sb):
    """ggmlR's test-5d-ops.R ("5D binary <op> covers ne[4]") and test-vulkan-push-constants.R
    ("5D add CPU matches R reference"), with ONNX's broadcasting on top."""
    a, b = _arr(sa), _arr(sb, 0.5, 2.0)
    got = _check([helper.make_node(op, ["A", "B"], ["Y"])], [("A", a), ("B", b)], ["Y"])
    ref = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](a, b)
    np.testing.assert_allclose(got["Y"], ref, rtol=1e-6)


def test_pow_max_where_and_comparisons_on_five_axes():
    a, b = _arr(X5, 0.5, 2.0), _arr((4, 1, 2), 0.5, 2.0)
    _check([helper.make_node("Pow", ["A", "B"], ["P"]), helper.make_node("Max", ["A", "B"], ["M"]),
            helper.make_node("Greater", ["A", "B"], ["G"]), helper.make_node("Where", ["G", "A", "B"], ["W"]),
            helper.make_node("Sum", ["A", "B", "A"], ["S"])],
           [("A", a), ("B", b)], ["P", "M", "W", "S"], rtol=1e-5)


def test_a_broadcast_no_pair_takes_alike_expands_first():
    """[2, 1, 3, 1, 5] against [4, 1, 6, 1]: every pair of adjacent axes broadcasts differently in one
    operand, so merging any would repeat the wrong elements; the operand is expanded an axis at a time."""
    a, b = _arr((2, 1, 3, 1, 5)), _arr((4, 1, 6, 1))
    got = _check([helper.make_node("Add", ["A", "B"], ["Y"])], [("A", a), ("B", b)], ["Y"])
    np.testing.assert_array_equal(got["Y"], a + b)


# -- Expand, as in timm's relative-position logits ------------------------------------------------------------
@pytest.mark.parametrize("src, target", [((4, 16, 1, 16, 16), (4, 16, 16, 16, 16)), ((2, 3, 1, 3, 2), (2, 3, 4, 3, 2)),
                                         ((4, 1, 2), (2, 3, 4, 3, 2)), ((2, 1, 4, 1, 1), (2, 3, 4, 3, 1)),
                                         ((1, 3, 1, 1, 2), (2, 3, 4, 5, 2))])
def test_expand_to_five_axes(src, target):
    """botnet26t_256's relative position logits: [4, 16, 1, 16, 16] expanded over the window."""
    x = _arr(src)
    got = _check([helper.make_node("Expand", ["X", "S"], ["Y"])], [("X", x)], ["Y"], [_i64("S", target)])
    np.testing.assert_array_equal(got["Y"], np.broadcast_to(x, np.broadcast_shapes(src, target)))


def test_expand_no_pair_takes_alike_goes_an_axis_at_a_time():
    x = _arr((2, 1, 3, 1, 5))
    got = _check([helper.make_node("Expand", ["X", "S"], ["Y"])], [("X", x)], ["Y"], [_i64("S", (2, 4, 3, 6, 5))])
    np.testing.assert_array_equal(got["Y"], np.broadcast_to(x, (2, 4, 3, 6, 5)))


# -- Transpose ----------------------------------------------------------------------------------------------------
PERMS = [(0, 1, 2, 4, 3), (0, 2, 1, 3, 4), (0, 1, 3, 2, 4), (0, 3, 1, 4, 2), (4, 3, 2, 1, 0), (1, 0, 3, 2, 4),
         (2, 4, 0, 1, 3), (3, 0, 4, 1, 2)]


@pytest.mark.parametrize("perm", PERMS)
def test_transpose_on_five_axes(perm):
    """ggmlR's test-onnx-edge.R (perm=[0,1,2,4,3], perm=[0,2,1,3,4]); (0, 3, 1, 4, 2) is timm's
    relative-position permute, which keeps no pair together (a chain of two that do)."""
    x = _arr((2, 3, 4, 5, 6))
    got = _check([helper.make_node("Transpose", ["X"], ["Y"], perm=list(perm))], [("X", x)], ["Y"])
    np.testing.assert_array_equal(got["Y"], np.transpose(x, perm))


def test_every_permutation_of_five_has_a_chain_of_pair_keeping_ones():
    import itertools
    for perm in itertools.permutations(range(5)):
        chain = _chain(perm)
        assert all(_keeps_pair(q) is not None for q in chain)
        s = tuple(range(5))
        for q in chain:
            s = tuple(s[q[i]] for i in range(5))
        assert s == perm and len(chain) <= 3


def test_transpose_with_size_one_axes_around_five():
    x = _arr((2, 1, 3, 4, 5, 2))
    got = _check([helper.make_node("Transpose", ["X"], ["Y"], perm=[5, 3, 1, 0, 4, 2])], [("X", x)], ["Y"])
    np.testing.assert_array_equal(got["Y"], np.transpose(x, (5, 3, 1, 0, 4, 2)))


# -- ops along an axis ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 0, 1, 2, 3])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_on_five_axes(op, axis):
    _check([helper.make_node(op, ["X"], ["Y"], axis=axis)], [("X", _arr(X5))], ["Y"])


@pytest.mark.parametrize("axis", [1, 2, 4])
def test_softmax_opset_11_coerces_to_two_axes(axis):
    _check([helper.make_node("Softmax", ["X"], ["Y"], axis=axis)], [("X", _arr(X5))], ["Y"], opset=11)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, 4])
def test_concat_on_five_axes(axis):
    """ggmlR's test-5d-ops.R ("5D concat axis <ax> covers ne[4]")."""
    a, b = _arr(X5), _arr(X5)
    got = _check([helper.make_node("Concat", ["A", "B"], ["Y"], axis=axis)], [("A", a), ("B", b)], ["Y"])
    np.testing.assert_array_equal(got["Y"], np.concatenate([a, b], axis))


@pytest.mark.parametrize("axis", [0, 1, 2, 3, 4])
def test_split_on_five_axes(axis):
    """bat_resnext26ts splits a [16, 8, 8, 8, 8] block into pieces of one along an axis."""
    x = _arr((4, 3, 4, 3, 2))
    n = x.shape[axis]
    outs = [f"Y{i}" for i in range(n)]
    got = _check([helper.make_node("Split", ["X", "sp"], outs, axis=axis)], [("X", x)], outs,
                 [_i64("sp", [1] * n)])
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(got[o], np.take(x, [i], axis))


@pytest.mark.parametrize("axis", [0, 2, 4])
def test_gather_on_five_axes(axis):
    x = _arr(X5)
    idx = np.array([1, 0, 1], dtype=np.int64)
    got = _check([helper.make_node("Gather", ["X", "I"], ["Y"], axis=axis)], [("X", x)], ["Y"],
                 [numpy_helper.from_array(idx, "I")])
    np.testing.assert_array_equal(got["Y"], np.take(x, idx, axis))


def test_gather_makes_five_axes_from_four():
    x = _arr((5, 3, 4, 2))
    idx = np.array([[1, 0, 4], [3, 2, 2]], dtype=np.int64)
    got = _check([helper.make_node("Gather", ["X", "I"], ["Y"], axis=0)], [("X", x)], ["Y"],
                 [numpy_helper.from_array(idx, "I")])
    np.testing.assert_array_equal(got["Y"], np.take(x, idx, 0))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(1, 1), (4, 0), (0, 0)])
def test_argmax_on_five_axes(op, axis, keepdims):
    _check([helper.make_node(op, ["X"], ["Y"], axis=axis, keepdims=keepdims)], [("X", _arr(X5))], ["Y"],
           out_type=T.INT64)


def test_batch_and_instance_and_layer_normalization_on_five_axes():
    """A 3-D CNN's normalizations ([N, C, D, H, W]) and a LayerNormalization over the last axis."""
    x = _arr((2, 3, 4, 3, 5))
    C = 3
    inits = [numpy_helper.from_array(_arr((C,), 0.5, 1.5), "s"), numpy_helper.from_array(_arr((C,)), "bb"),
             numpy_helper.from_array(_arr((C,)), "m"), numpy_helper.from_array(_arr((C,), 0.5, 1.5), "v"),
             numpy_helper.from_array(_arr((5,), 0.5, 1.5), "ls"), numpy_helper.from_array(_arr((5,)), "lb")]
    _check([helper.make_node("BatchNormalization", ["X", "s", "bb", "m", "v"], ["B"]),
            helper.make_node("InstanceNormalization", ["X", "s", "bb"], ["I"]),
            helper.make_node("LayerNormalization", ["X", "ls", "lb"], ["L"], axis=-1)],
           [("X", x)], ["B", "I", "L"], inits, rtol=1e-4, atol=1e-5)


# -- reductions -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("axes, keepdims", [([4], 1), ([0, 1], 0), ([2], 0), ([1, 2], 1), ([0, 1, 2], 0), (None, 1),
                                            ([1, 3], 1), ([0, 2, 4], 0), ([-1, 1], 0)])
def test_reductions_on_five_axes(op, axes, keepdims):
    """Axes that split every pair ([1, 3], [0, 2, 4]) reduce in two steps: one axis first, keeping it,
    which leaves four axes above one."""
    inits = [] if axes is None else [_i64("ax", axes)]
    ins = ["X"] if axes is None else ["X", "ax"]
    x = _arr(X5, 0.2, 1.2) if op in ("ReduceLogSum", "ReduceProd") else _arr(X5)
    _check([helper.make_node(op, ins, ["Y"], keepdims=keepdims)], [("X", x)], ["Y"], inits, opset=18,
           rtol=1e-5, atol=1e-5)


def test_reduction_attribute_axes_opset_13():
    _check([helper.make_node("ReduceMean", ["X"], ["Y"], axes=[2, 3], keepdims=1)], [("X", _arr(X5))], ["Y"],
           opset=13)


# -- products ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sa, sb", [((2, 3, 4, 5, 6), (2, 3, 4, 6, 7)), ((2, 3, 4, 5, 6), (6, 7)),
                                    ((2, 3, 4, 5, 6), (4, 6, 7)), ((2, 1, 4, 5, 6), (3, 1, 6, 7)),
                                    ((2, 1, 4, 5, 6), (1, 3, 1, 6, 7)),
                                    ((2, 3, 4, 5, 6), (1, 3, 1, 6, 7))])
def test_matmul_with_three_batch_axes(sa, sb):
    """ggmlR's test-onnx-boundary.R ("5D MatMul [2,4,3,1,1] preserved") with batch axes above one."""
    a, b = _arr(sa), _arr(sb)
    got = _check([helper.make_node("MatMul", ["A", "B"], ["Y"])], [("A", a), ("B", b)], ["Y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["Y"], a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_with_a_constant_weight_on_five_axes():
    a, w = _arr((2, 3, 4, 5, 6)), _arr((6, 7))
    _check([helper.make_node("MatMul", ["A", "W"], ["Y"])], [("A", a)], ["Y"], [numpy_helper.from_array(w, "W")],
           rtol=1e-5, atol=1e-5)


def test_attention_with_grouped_heads_on_five_axes():
    """A grouped-query attention's [B, kv_heads, group, T, D] scores, softmax, and the values."""
    q, k, v = _arr((2, 2, 3, 5, 4)), _arr((2, 2, 1, 5, 4)), _arr((2, 2, 1, 5, 4))
    _check([helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 2, 4, 3]),
            helper.make_node("MatMul", ["Q", "Kt"], ["S"]), helper.make_node("Softmax", ["S"], ["P"], axis=-1),
            helper.make_node("MatMul", ["P", "V"], ["Y"])],
           [("Q", q), ("K", k), ("V", v)], ["Y"], rtol=1e-5, atol=1e-5)


# -- slices, pads, tiles -----------------------------------------------------------------------------------------------
def test_slice_pad_and_tile_on_five_axes():
    x = _arr(X5)
    _check([helper.make_node("Slice", ["X", "st", "en", "ax"], ["S"]),
            helper.make_node("Pad", ["X", "pads"], ["P"]),
            helper.make_node("Tile", ["X", "reps"], ["T"])],
           [("X", x)], ["S", "P", "T"],
           [_i64("st", [1, 0]), _i64("en", [3, 1]), _i64("ax", [2, 4]), _i64("pads", [0, 0, 1, 0, 0, 0, 0, 2, 0, 0]),
            _i64("reps", [1, 1, 2, 1, 1])])


def test_a_slice_of_every_pair_is_refused():
    _refused([helper.make_node("Slice", ["X", "st", "en", "ax"], ["S"])], [("X", _arr(X5))], ["S"],
             [_i64("st", [1, 1, 1]), _i64("en", [2, 3, 2]), _i64("ax", [0, 2, 4])], match="Slice of rank 5")


# -- what is refused ------------------------------------------------------------------------------------------------------
def test_ops_that_do_not_merge_axes_are_refused_naming_op_and_shapes():
    """GatherElements of five-axis values: no pair of axes is treated alike by its builder, so it is
    refused before any value is computed."""
    idx = numpy_helper.from_array(np.zeros((2, 3, 4, 4, 4), np.int64), "I")
    _refused([helper.make_node("GatherElements", ["X", "I"], ["Y"], axis=2)], [("X", _arr((2, 3, 4, 4, 4)))],
             ["Y"], [idx], match=r"GatherElements of rank 5 values .* shapes \[\[2, 3, 4, 4, 4\], \[2, 3, 4, 4, 4\]\]")


def test_six_axes_above_one_are_refused():
    m = _model([helper.make_node("Relu", ["X"], ["Y"])], [("X", _arr((2, 2, 2, 2, 2, 2)))], ["Y"])
    with pytest.raises(OnnxLimitation, match="more than 5 axes above size one"):
        g.onnx_load(m, device="cpu")


def test_five_axes_above_one_among_six_element_wise_and_refused_along_an_axis():
    """Element-wise ops take five axes above one among six; ops along an axis are built for five."""
    x = _arr((2, 3, 4, 3, 2, 1))
    _check([helper.make_node("Relu", ["X"], ["Y"])], [("X", x)], ["Y"])
    _refused([helper.make_node("Softmax", ["X"], ["Y"], axis=1)], [("X", x)], ["Y"],
             match="Softmax is built for exactly five axes here, not 6")


def test_split_into_ones_above_rank_four_drops_the_axis_like_any_size_one_axis():
    """bat_resnext26ts's second split: [16, 1, 8, 64, 8] along axis 2 into pieces of one (four axes above
    one: the compact layout, whose sliced axis of one is then dropped too)."""
    x = _arr((4, 1, 3, 5, 2))
    outs = ["Y0", "Y1", "Y2"]
    got = _check([helper.make_node("Split", ["X", "sp"], outs, axis=2),
                  helper.make_node("Concat", outs, ["C"], axis=4)], [("X", x)], outs + ["C"], [_i64("sp", [1, 1, 1])])
    np.testing.assert_array_equal(got["C"], np.concatenate(np.split(x, 3, axis=2), axis=4))


@pytest.mark.parametrize("op, attrs", [("MaxPool", dict(kernel_shape=[2, 2, 2])),
                                       ("AveragePool", dict(kernel_shape=[2, 3, 2], strides=[1, 2, 1], pads=[0, 1, 0, 0, 1, 1])),
                                       ("LpPool", dict(kernel_shape=[2, 2, 2], p=2)),
                                       ("GlobalAveragePool", {}), ("GlobalMaxPool", {})])
def test_3d_pooling_of_a_batch(op, attrs):
    """N and C above one: five axes; pooling treats every (n, c) plane alike."""
    _check([helper.make_node(op, ["X"], ["Y"], **attrs)], [("X", _arr((2, 3, 4, 5, 4)))], ["Y"], rtol=1e-5,
           atol=1e-5)


def test_3d_max_pool_indices_of_a_batch():
    x = _arr((2, 3, 4, 4, 4))
    m = _model([helper.make_node("MaxPool", ["X"], ["Y", "I"], kernel_shape=[2, 2, 2], strides=[2, 2, 2])],
               [("X", x)], ["Y", "I"])
    m.graph.output[1].type.tensor_type.elem_type = T.INT64
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = g.onnx_run(g.onnx_load(m, device="cpu"), {"X": x})
    np.testing.assert_array_equal(got["Y"], ref[0])
    np.testing.assert_array_equal(got["I"], ref[1])


@pytest.mark.parametrize("mode, scales, sizes", [("nearest", [1, 1, 2, 2, 1], None), ("linear", [1, 1, 2, 1.5, 2], None),
                                                 ("linear", None, [2, 3, 6, 5, 8]), ("nearest", None, [2, 3, 2, 6, 3])])
def test_resize_of_a_batch_of_volumes(mode, scales, sizes):
    x = _arr((2, 3, 4, 3, 4))
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
             numpy_helper.from_array(np.asarray(scales if scales else [], np.float32), "sc")]
    names = ["X", "roi", "sc"]
    if sizes:
        inits.append(_i64("sz", sizes))
        names = ["X", "roi", "", "sz"]
    _check([helper.make_node("Resize", names, ["Y"], mode=mode)], [("X", x)], ["Y"], inits, opset=13, rtol=1e-4,
           atol=1e-5)


@pytest.mark.parametrize("op, wshape, attrs", [("ConvTranspose", (3, 2, 2, 2, 2), dict(strides=[2, 1, 2])),
                                               ("ConvTranspose", (3, 4, 3, 2, 2), dict(pads=[1, 0, 0, 1, 0, 1]))])
def test_3d_transposed_convolution_of_a_batch_runs_sample_by_sample(op, wshape, attrs):
    x, w, bias = _arr((3, 3, 4, 5, 4)), _arr(wshape), _arr((wshape[1],))
    _check([helper.make_node(op, ["X", "W", "B"], ["Y"], **attrs)], [("X", x)], ["Y"],
           [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")], rtol=1e-4, atol=1e-4)


# whole-model tolerances of tests/test_onnx_models.py: ggml's Vulkan products accumulate in f16
MODEL_TOL = {"cpu": (1e-5, 1e-6), "vulkan": (1e-2, 5e-3), "cuda": (1e-3, 1e-4)}


def test_five_axis_patterns_on_every_device(device):
    """The timm models' patterns (a relative-position Expand, the permute keeping no pair, a
    split and a concatenation) with a softmax and a batched product, on each `--devices` device."""
    x, q, k = _arr((4, 3, 1, 3, 5)), _arr((2, 3, 4, 5, 6)), _arr((2, 3, 4, 6, 5))
    nodes = [helper.make_node("Expand", ["X", "S"], ["E"]), helper.make_node("Transpose", ["E"], ["P"], perm=[0, 3, 1, 4, 2]),
             helper.make_node("Softmax", ["P"], ["Y1"], axis=-1),
             helper.make_node("MatMul", ["Q", "K"], ["M"]), helper.make_node("Split", ["M", "sp"], ["M0", "M1"], axis=2),
             helper.make_node("Concat", ["M1", "M0"], ["Y2"], axis=4)]
    m = _model(nodes, [("X", x), ("Q", q), ("K", k)], ["Y1", "Y2"], [_i64("S", (4, 3, 6, 3, 5)), _i64("sp", [2, 2])])
    feeds = {"X": x, "Q": q, "K": k}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = g.onnx_run(g.onnx_load(m, device=device), feeds)
    for name, r in zip(["Y1", "Y2"], ref):
        np.testing.assert_allclose(got[name], r, rtol=MODEL_TOL[device][0], atol=MODEL_TOL[device][1], err_msg=name)


def test_if_hands_on_a_five_axis_value_its_branch_made():
    x = _arr(X5)
    then = helper.make_graph([helper.make_node("Relu", ["X"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", T.FLOAT, list(X5))])
    other = helper.make_graph([helper.make_node("Neg", ["X"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", T.FLOAT, list(X5))])
    cond = numpy_helper.from_array(np.array(True), "c")
    got = _check([helper.make_node("If", ["c"], ["Y"], then_branch=then, else_branch=other)], [("X", x)], ["Y"], [cond])
    np.testing.assert_array_equal(got["Y"], np.maximum(x, 0))
