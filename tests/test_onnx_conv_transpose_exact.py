"""ConvTranspose sums as onnxruntime's CPU provider does (ggmlpy/kernels/conv_transpose.c): its floats
equal onnxruntime's to the bit, so a QuantizeLinear after it (a float ConvTranspose between quantized
ops, as in the int8 Mask R-CNN's mask head) gives onnxruntime's integers. onnxruntime runs on one
thread: MLAS blocks its sums by a shape that its threads' share of the pixels would change."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy import kernels  # noqa: E402
from ggmlpy.onnx.ops_conv import mlas_k_block  # noqa: E402



def _why_not() -> str | None:
    """Why ggmlpy's ConvTranspose cannot equal onnxruntime's here, or None."""
    k = kernels.get()
    if k is None or k.conv_transpose is None:
        return "no conv_transpose.c kernel (GGMLPY_KERNELS=0 or no compiler): ConvTranspose is a convolution"
    if kernels.isa_level() == "x86-64-v2" and "x86-64-v3" in kernels.supported_isa_levels():
        return ("kernels built for x86-64-v2 multiply, then add (as MLAS on a CPU without FMA), while "
                "onnxruntime here fuses them")
    return None


pytestmark = [pytest.mark.filterwarnings("ignore:onnx_load"),  # graph outputs of no shape, as onnxruntime allows
              pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]
RNG = np.random.default_rng(1639)


def both(x, w, bias=None, quantize=None, **attrs):
    """(onnxruntime's, ggmlpy's) outputs of Relu(x) -> ConvTranspose (-> QuantizeLinear(scale, zero))."""
    inits = {"w": w} if bias is None else {"w": w, "b": bias}
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("ConvTranspose", ["xr", "w"] + ([] if bias is None else ["b"]), ["y"], **attrs)]
    out = helper.make_tensor_value_info("y", T.FLOAT, None)
    if quantize is not None:
        inits.update(s=np.float32(quantize[0]), z=np.uint8(quantize[1]))
        nodes.append(helper.make_node("QuantizeLinear", ["y", "s", "z"], ["q"]))
        out = helper.make_tensor_value_info("q", T.UINT8, None)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape))], [out],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(m, device="cpu"), {"x": x})[out.name]
    return want, got


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def test_mask_head_conv_transpose_then_quantize_equals_onnxruntime():
    """The mask head's shape: 2x2 at stride 2, 256 input channels (two of MLAS's blocks of 128), the
    input dequantized integers as there; the floats and their quantized integers equal onnxruntime's."""
    x = ((RNG.integers(0, 256, (3, 256, 14, 14)) - 7) * np.float32(0.0213)).astype(np.float32)
    w, bias = f32(256, 256, 2, 2, scale=0.05), f32(256, scale=0.1)
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    want, got = both(x, w, bias, **attrs)
    np.testing.assert_array_equal(got, want)
    want, got = both(x, w, bias, quantize=(0.0371, 0), **attrs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[0, 1, 2, 0], dilations=[2, 1], group=2),
    dict(kernel_shape=[4, 4], strides=[3, 3], output_shape=[20, 21]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
])
def test_overlapping_kernel_positions_add_in_onnxruntime_order(attrs):
    """Kernels whose positions overlap on an output value (col2im adds them in order), pads, output
    padding, dilations and groups."""
    x, w = f32(2, 160, 9, 10), f32(160 // attrs.get("group", 1) * attrs.get("group", 1), 12, *attrs["kernel_shape"])
    if attrs.get("group", 1) > 1:
        w = w[:, :6]
    want, got = both(x, np.ascontiguousarray(w), f32(w.shape[1] * attrs.get("group", 1)), **attrs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("hw, channels, block", [((4, 4), 600, 1024), ((8, 8), 300, 256), ((14, 14), 300, 128)])
def test_few_pixels_take_mlas_longer_blocks(hw, channels, block):
    """Fewer input pixels than channels: MLAS sums the channels in longer blocks (up to 1024)."""
    assert mlas_k_block(8 * 4, hw[0] * hw[1], channels) == block
    want, got = both(f32(1, channels, *hw), f32(channels, 8, 2, 2, scale=0.1), None, kernel_shape=[2, 2],
                     strides=[2, 2])
    np.testing.assert_array_equal(got, want)


def test_one_dimensional_conv_transpose_equals_onnxruntime():
    want, got = both(f32(2, 200, 30), f32(200, 5, 4), f32(5), kernel_shape=[4], strides=[3], pads=[1, 2])
    np.testing.assert_array_equal(got, want)
