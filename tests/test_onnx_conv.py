"""ONNX convolutions on ggml's CPU backend through ggmlpy's conv.c kernel: each Conv is one node,
and Conv -> Relu, Conv -> Add -> Relu (a ResNet block's end) and Conv -> Add are that same node;
patterns the kernel cannot take fall back to node-by-node building. Every case against onnx's
reference implementation, with the kernels on and off."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy import kernels  # noqa: E402
from ggmlpy.bindings import ffi, lib  # noqa: E402

K = kernels.get()
needs_conv = pytest.mark.skipif(K is None or K.conv2d is None, reason="no conv.c kernel (compiler or OpenBLAS)")
RNG = np.random.default_rng(0)


def w(*shape):
    """Weights scaled by fan-in, so that values stay near 1 through a few layers (rtol and atol apply)."""
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:], dtype=np.int64))).astype(np.float32)


def model(nodes, inputs, outputs, inits):
    """The model, its outputs declared with the shapes onnx's reference implementation gives."""
    def make(out_shapes):
        g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in zip(outputs, out_shapes)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {n: np.zeros(s, np.float32) for n, s in inputs}
    return make([o.shape for o in ReferenceEvaluator(make([None] * len(outputs))).run(None, feeds)])


def resnet_block():
    """Stem conv + ReLU, a block whose shortcut is a strided 1x1 conv (Conv -> Add -> Relu with a conv
    on both sides), then a Conv -> Add without ReLU and a conv whose output is read twice."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W0", "b0"], ["c0"], pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"]),
        n("Conv", ["r0", "W1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Conv", ["r0", "Wd", "bd"], ["d"], strides=[2, 2]),
        n("Add", ["c2", "d"], ["s"]), n("Relu", ["s"], ["r2"]),
        n("Conv", ["r2", "W3", "b3"], ["c3"], pads=[0, 1, 2, 1]), n("Add", ["r2", "c3"], ["s3"]),
        n("Conv", ["s3", "W4"], ["c4"], pads=[1, 1, 1, 1]), n("Relu", ["c4"], ["r4"]), n("Add", ["c4", "r4"], ["y"]),
    ]
    inits = {"W0": w(8, 3, 3, 3), "b0": w(8), "W1": w(16, 8, 3, 3), "b1": w(16), "W2": w(16, 16, 3, 3),
             "Wd": w(16, 8, 1, 1), "bd": w(16), "W3": w(16, 16, 3, 3), "b3": w(16), "W4": w(16, 16, 3, 3)}
    return model(nodes, [("x", (2, 3, 15, 14))], ["y"], inits)


def custom_nodes(m):
    plan = next(iter(m._plans.values()))
    return [lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)
            if lib.ggml_graph_node(plan.graph, i).op == lib.GGML_OP_CUSTOM]


def run(proto, feeds, threads=2, **kw):
    m = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads, **kw)
    return m, ggmlpy.onnx_run(m, feeds)


@needs_conv
@pytest.mark.parametrize("threads", [1, 2])
def test_a_resnet_block_is_one_kernel_node_per_conv_and_matches_the_reference(threads):
    proto = resnet_block()
    x = RNG.standard_normal((2, 3, 15, 14)).astype(np.float32)
    want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
    m, out = run(proto, {"x": x}, threads)
    np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-5)
    assert len(custom_nodes(m)) == 6  # the Adds and Relus folded into them, but c4's Relu (c4 read twice)
    plan = next(iter(m._plans.values()))
    ops = [lib.ggml_graph_node(plan.graph, i).op for i in range(plan.n_nodes)]
    # c4's Relu is ggmlpy's NaN-keeping relu kernel (kernels.relu), the Add ggml's
    assert ops.count(lib.GGML_OP_MAP_CUSTOM1) == 1 and ops.count(lib.GGML_OP_ADD) == 1
    prev = kernels.set_enabled(False)
    try:
        m0, out0 = run(proto, {"x": x}, threads)
    finally:
        kernels.set_enabled(prev)
    assert not custom_nodes(m0)
    np.testing.assert_allclose(out0["y"], want, rtol=1e-4, atol=1e-5)


@needs_conv
def test_a_residual_that_broadcasts_is_added_node_by_node():
    n = helper.make_node
    proto = model([n("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), n("Add", ["c", "r"], ["s"]),
                   n("Relu", ["s"], ["y"])],
                  [("x", (1, 4, 6, 6)), ("r", (1, 1, 6, 6))], ["y"], {"W": w(5, 4, 3, 3)})
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32),
             "r": RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)}
    m, out = run(proto, feeds)
    np.testing.assert_allclose(out["y"], ReferenceEvaluator(proto).run(None, feeds)[0], rtol=1e-4, atol=1e-5)
    assert len(custom_nodes(m)) == 1  # the conv alone


@needs_conv
def test_a_residual_wider_than_the_conv_output_keeps_onnx_broadcasting():
    n = helper.make_node
    proto = model([n("Conv", ["x", "W"], ["c"]), n("Add", ["r", "c"], ["y"])],
                  [("x", (1, 2, 4, 4)), ("r", (3, 1, 1, 1))], ["y"], {"W": w(3, 2, 1, 1)})
    feeds = {"x": RNG.standard_normal((1, 2, 4, 4)).astype(np.float32),
             "r": RNG.standard_normal((3, 1, 1, 1)).astype(np.float32)}
    _, out = run(proto, feeds)
    want = ReferenceEvaluator(proto).run(None, feeds)[0]
    assert out["y"].shape == want.shape == (3, 3, 4, 4)
    np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-5)


@needs_conv
def test_1d_conv_with_a_residual_and_conv_transpose_use_the_kernel():
    n = helper.make_node
    proto = model([n("Conv", ["x", "W", "b"], ["c"], pads=[2, 2]), n("Add", ["c", "x"], ["s"]), n("Relu", ["s"], ["r"]),
                   n("ConvTranspose", ["r", "Wt", "bt"], ["y"], strides=[2], pads=[1, 0])],
                  [("x", (2, 4, 9))], ["y"], {"W": w(4, 4, 5), "b": w(4), "Wt": w(4, 3, 3), "bt": w(3)})
    x = RNG.standard_normal((2, 4, 9)).astype(np.float32)
    m, out = run(proto, {"x": x})
    np.testing.assert_allclose(out["y"], ReferenceEvaluator(proto).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert len(custom_nodes(m)) == 2


@needs_conv
def test_a_conv_output_that_is_a_graph_output_is_not_fused_away():
    n = helper.make_node
    proto = model([n("Conv", ["x", "W"], ["c"]), n("Relu", ["c"], ["y"])], [("x", (1, 2, 5, 5))], ["c", "y"],
                  {"W": w(3, 2, 3, 3)})
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    _, out = run(proto, {"x": x})
    c, y = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(out["c"], c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["y"], y, rtol=1e-4, atol=1e-5)
    assert out["c"].min() < 0


@needs_conv
def test_half_precision_weights_keep_ggmls_products():
    proto = resnet_block()
    x = RNG.standard_normal((2, 3, 15, 14)).astype(np.float32)
    m, out = run(proto, {"x": x}, dtype="f16")
    assert len(custom_nodes(m)) == 2  # W0 and Wd: below 256 weights, which stay f32 (docs/onnx.md, dtype="f16")
    np.testing.assert_allclose(out["y"], ReferenceEvaluator(proto).run(None, {"x": x})[0], rtol=1e-2, atol=1e-2)


@needs_conv
@pytest.mark.parametrize("threads", [1, 2])
def test_wide_convs_use_the_packed_kernels_where_there_are_some(threads):
    """With AVX2 or AVX-512 conv.c's products with weights packed at load run them (Kernels.packed_conv_kind
    picks pixel-major or channel-major blocks per layer, channel-major alone with AVX2): the same numbers."""
    n = helper.make_node
    proto = model([n("Conv", ["x", "W0", "b0"], ["c0"], pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"]),
                   n("Conv", ["r0", "W1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
                   n("Conv", ["r0", "Wd"], ["d"], strides=[2, 2]), n("Add", ["c1", "d"], ["s"]),
                   n("Relu", ["s"], ["y"])],
                  [("x", (2, 3, 13, 11))], ["y"], {"W0": w(64, 3, 3, 3), "b0": w(64), "W1": w(130, 64, 3, 3),
                                                   "b1": w(130), "Wd": w(130, 64, 1, 1)})
    x = RNG.standard_normal((2, 3, 13, 11)).astype(np.float32)
    m, out = run(proto, {"x": x}, threads)
    np.testing.assert_allclose(out["y"], ReferenceEvaluator(proto).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    nodes = custom_nodes(m)
    assert len(nodes) == 3
    if K.conv2d_packed is not None:  # packed weights: ne [rows, C*KH*KW, panels]
        kinds = [K.packed_conv_kind((13, 11), 64, *kernels.direct_planes((13, 11), (3, 3), (1, 1), (1, 1), 3),
                                    taps=27),
                 K.packed_conv_kind((7, 6), 130, *kernels.direct_planes((7, 6), (3, 3), (2, 2), (1, 1), 64), stride=2,
                                    taps=576),
                 K.packed_conv_kind((7, 6), 130, *kernels.direct_planes((7, 6), (1, 1), (2, 2), (1, 1), 64), stride=2,
                                    taps=64, unpadded=True)]
        rows = {"pixels": 8, "channels": K.packed_rows, "lanes": kernels.LANE_CHANNELS}
        assert [int(t.src[1].ne[0]) for t in nodes] == [rows[k] for k in kinds]
        assert [int(t.src[1].ne[2]) for t in nodes] == [-(-m // rows[k]) for m, k in zip((64, 130, 130), kinds)]


def stem(pool, x_shape, relu=True, both=False, residual=False, seed=0):
    """A ResNet-like stem: Conv 7x7 at stride 2 with bias (+ an input of its output's shape, residual) (->
    Relu) -> MaxPool with attributes `pool`; both: the pooling's input is a graph output too (which keeps
    it a node of its own). The weights are the seed's."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "W", "b"], ["c"], pads=[3, 3, 3, 3], strides=[2, 2])]
    last, inputs = "c", [("x", x_shape)]
    if residual:
        oh, ow = ((d + 6 - 7) // 2 + 1 for d in x_shape[2:])
        nodes.append(n("Add", ["c", "r"], ["s"]))
        last, inputs = "s", inputs + [("r", (x_shape[0], 16, oh, ow))]
    if relu:
        nodes.append(n("Relu", [last], ["a"]))
        last = "a"
    nodes.append(n("MaxPool", [last], ["y"], **pool))
    rng = np.random.default_rng(seed)
    inits = {"W": (rng.standard_normal((16, x_shape[1], 7, 7)) / 12).astype(np.float32),
             "b": rng.standard_normal(16).astype(np.float32)}
    return model(nodes, inputs, ["y"] + ([last] if both else []), inits)


STEM_POOLS = [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),   # ResNet's
              dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 0], ceil_mode=1),
              dict(kernel_shape=[2, 2], strides=[3, 3])]                       # rows no window reads


@needs_conv
@pytest.mark.parametrize("pool", STEM_POOLS, ids=["resnet", "ceil", "gaps"])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_stem_conv_and_its_max_pooling_are_one_node(pool, relu, threads):
    """Conv (-> Relu) -> MaxPool with the pooling alone reading the conv: one node with AVX-512 (conv.c's
    conv2d_pool, the conv's rows pooled in cache), whose values are those of the conv's node and the
    pooling's (the same model with the pooling's input a graph output) bit for bit, NaN included (the
    windows a NaN input reaches), and elsewhere the reference's; batch 3 of odd-sized planes."""
    x = RNG.standard_normal((3, 3, 37, 61)).astype(np.float32)
    x[1, 2, 20, 30] = np.nan
    proto, apart = stem(pool, x.shape, relu), stem(pool, x.shape, relu, both=True)
    m, out = run(proto, {"x": x}, threads)
    m0, out0 = run(apart, {"x": x}, threads)
    want = ReferenceEvaluator(proto).run(None, {"x": np.nan_to_num(x)})[0]  # its pooling drops NaN
    assert out["y"].shape == want.shape and np.isnan(out["y"][1]).any() and not np.isnan(out["y"][[0, 2]]).any()
    finite = ~np.isnan(out["y"])
    np.testing.assert_allclose(out["y"][finite], want[finite], rtol=1e-4, atol=1e-5)
    assert (np.isnan(out["y"]) == np.isnan(out0["y"])).all()
    np.testing.assert_array_equal(out["y"].view(np.uint32)[finite], out0["y"].view(np.uint32)[finite])
    names = [ffi.string(t.name).decode() for t in custom_nodes(m)]
    assert names == (["ggmlpy.conv2d_pool"] if K.conv2d_pool is not None else ["ggmlpy.conv2d", "ggmlpy.maxpool2d"])
    assert [ffi.string(t.name).decode() for t in custom_nodes(m0)] == ["ggmlpy.conv2d", "ggmlpy.maxpool2d"]


@needs_conv
@pytest.mark.parametrize("case", ["dilations", "indices", "residual", "wide"])
def test_a_max_pooling_the_stem_kernel_does_not_take_is_a_node_of_its_own(case):
    """A MaxPool with dilations or an Indices output, after a conv with a residual, or after a conv that
    conv.c computes with another kernel (128 channels of a 7 x 7 plane: channels in the lanes with AVX-512,
    the channel-major kernel with AVX2) stays the pooling's own node (or ggml's): the reference's values."""
    n = helper.make_node
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = RNG.standard_normal((2, 3, 37, 61)).astype(np.float32)
    feeds = {"x": x}
    if case == "dilations":
        proto = stem(dict(pool, dilations=[2, 2]), x.shape)
    elif case == "residual":
        proto = stem(pool, x.shape, residual=True)
        feeds["r"] = RNG.standard_normal((2, 16, 19, 31)).astype(np.float32)
    elif case == "indices":
        proto = model([n("Conv", ["x", "W"], ["c"], pads=[3, 3, 3, 3], strides=[2, 2]), n("Relu", ["c"], ["a"]),
                       n("MaxPool", ["a"], ["y", "i"], **pool)], [("x", x.shape)], ["y", "i"], {"W": w(16, 3, 7, 7)})
    else:
        x = feeds["x"] = RNG.standard_normal((2, 64, 7, 7)).astype(np.float32)
        proto = model([n("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["a"]),
                       n("MaxPool", ["a"], ["y"], **pool)], [("x", x.shape)], ["y"], {"W": w(128, 64, 3, 3)})
    m, out = run(proto, feeds)
    for name, want in zip(proto.graph.output, ReferenceEvaluator(proto).run(None, feeds)):
        np.testing.assert_allclose(out[name.name], want, rtol=1e-4, atol=1e-5)
    names = [ffi.string(t.name).decode() for t in custom_nodes(m)]
    assert "ggmlpy.conv2d_pool" not in names and names[0] == "ggmlpy.conv2d"


@needs_conv
def test_a_stem_and_its_pooling_without_the_kernels_are_ggmls_ops():
    pool = STEM_POOLS[0]
    x = RNG.standard_normal((2, 3, 37, 61)).astype(np.float32)
    proto = stem(pool, x.shape)
    prev = kernels.set_enabled(False)
    try:
        m, out = run(proto, {"x": x})
    finally:
        kernels.set_enabled(prev)
    assert not custom_nodes(m)
    np.testing.assert_allclose(out["y"], ReferenceEvaluator(proto).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


@needs_conv
def test_without_the_pooling_kernel_the_stem_is_the_conv_node_then_the_pooling(monkeypatch):
    """Where conv.c has no conv2d_pool (no AVX-512), Conv -> Relu -> MaxPool is the conv's node and the
    pooling's: the same values, bit for bit, as the one node."""
    x = RNG.standard_normal((2, 3, 37, 61)).astype(np.float32)
    proto = stem(STEM_POOLS[0], x.shape)
    _, fused = run(proto, {"x": x})
    monkeypatch.setattr(K, "conv2d_pool", None)
    m, out = run(proto, {"x": x})
    assert [ffi.string(t.name).decode() for t in custom_nodes(m)][-1] == "ggmlpy.maxpool2d"
    np.testing.assert_array_equal(out["y"].view(np.uint32), fused["y"].view(np.uint32))


@needs_conv
@pytest.mark.parametrize("hw,pads", [((299, 299), [0, 0, 0, 0]), ((224, 224), [1, 1, 1, 1])], ids=["inception", "xcit"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_three_channel_stem_whose_patch_blocks_span_many_rows_matches_the_reference(hw, pads, threads):
    """Inception v3's and XCiT's stems (3 channels, 3x3, stride 2): few channels make a patch block span
    more than 64 output rows, which the convolution once wrote at the wrong offsets (values off by 1e35)."""
    n = helper.make_node
    proto = model([n("Conv", ["x", "W", "b"], ["y"], strides=[2, 2], pads=pads)], [("x", (1, 3, *hw))], ["y"],
                  {"W": w(8, 3, 3, 3), "b": w(8)})
    x = RNG.standard_normal((1, 3, *hw)).astype(np.float32)
    want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
    _, got = run(proto, {"x": x}, threads=threads)
    np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)
