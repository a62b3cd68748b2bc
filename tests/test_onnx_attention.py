"""Attention as one node (fusion.find_attention, kernels/attention.c): MatMul(Q, K^T), an optional
constant scale, an optional additive mask, Softmax over the keys and MatMul(., V) give
onnxruntime's numbers (NaN where it has NaN) at tail sizes, with and without masks, batched and
broadcast, on one thread and more; where the pattern does not match exactly its nodes are built one
by one; exported encoders (both of torch's exporters) take the fused node."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy import kernels  # noqa: E402
from ggmlpy.bindings import ffi, lib  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _kernel_names(model):
    plan = next(iter(model._plans.values()))
    nodes = [lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)]
    return [ffi.string(p.name).decode() for p in nodes if p.op == lib.GGML_OP_CUSTOM]


def _fused_expected():
    K = kernels.get()
    return K is not None and K.attention is not None


def attention_model(batch_q, batch_kv, L, S, D, E, mask_shape=None, scale=None, transpose_k=True, opset=17,
                    softmax_axis=-1, extra_outputs=()):
    """softmax(Q K^T [*|/ s] [+ mask]) V; K given as (..., S, D) and transposed by a node (or as K^T)."""
    n = helper.make_node
    rank = len(batch_kv) + 2
    nodes, inits = [], []
    if transpose_k:
        nodes.append(n("Transpose", ["k"], ["kt"], perm=list(range(rank - 2)) + [rank - 1, rank - 2]))
    cur = "sc"
    nodes.append(n("MatMul", ["q", "kt"], [cur]))
    if scale is not None:
        op, s = scale
        inits.append(numpy_helper.from_array(np.array(s, np.float32), "s"))
        nodes.append(n(op, [cur, "s"], ["scaled"]))
        cur = "scaled"
    if mask_shape is not None:
        nodes.append(n("Add", ["mask", cur], ["masked"]))
        cur = "masked"
    nodes += [n("Softmax", [cur], ["p"], axis=softmax_axis), n("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": batch_q + (L, D), "k" if transpose_k else "kt": batch_kv + ((S, D) if transpose_k else (D, S)),
              "v": batch_kv + (S, E)}
    if mask_shape is not None:
        shapes["mask"] = mask_shape
    batch = np.broadcast_shapes(batch_q, batch_kv)
    outs = [helper.make_tensor_value_info("y", T.FLOAT, batch + (L, E))]
    outs += [helper.make_tensor_value_info(o, T.FLOAT, batch + (L, S)) for o in extra_outputs]
    g = helper.make_graph(nodes, "att", [helper.make_tensor_value_info(k, T.FLOAT, s) for k, s in shapes.items()],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), shapes


def feeds_for(shapes, seed=0, masked_keys=()):
    rng = np.random.default_rng(seed)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    if "mask" in feeds:
        m = np.where(rng.random(shapes["mask"]) < 0.2, -np.inf, 0.0).astype(np.float32)
        m[..., 0] = 0.0  # no row masked throughout unless asked
        for j in masked_keys:
            m[..., j] = -np.inf
        feeds["mask"] = m
    return feeds


def onnxruntime_values(proto, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def check(proto, feeds, threads, fused=True):
    model = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    got = ggmlpy.onnx_run(model, feeds)
    for name, want in onnxruntime_values(proto, feeds).items():
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=name)
    names = _kernel_names(model)
    if _fused_expected():
        assert ("ggmlpy.attention" in names) == fused, names
    return model, got


@pytest.mark.parametrize("L,S,D,E", [(7, 7, 5, 5), (1, 1, 1, 1), (17, 33, 16, 64), (33, 19, 64, 70),
                                     (65, 65, 67, 3), (6, 100, 9, 17)])
@pytest.mark.parametrize("threads", [1, 2])
def test_tail_sizes(L, S, D, E, threads):
    proto, shapes = attention_model((2, 3), (2, 3), L, S, D, E)
    check(proto, feeds_for(shapes), threads)


@pytest.mark.parametrize("mask_shape", [(19,), (13, 19), (2, 1, 1, 19), (2, 3, 13, 19), (1, 3, 1, 19), (1,)])
@pytest.mark.parametrize("scale", [None, ("Mul", 0.125), ("Div", 8.0)])
@pytest.mark.parametrize("threads", [1, 2])
def test_masks_and_scales(mask_shape, scale, threads):
    proto, shapes = attention_model((2, 3), (2, 3), 13, 19, 8, 8, mask_shape=mask_shape, scale=scale)
    check(proto, feeds_for(shapes, seed=1), threads)


@pytest.mark.parametrize("batch_q,batch_kv", [((), ()), ((5,), (5,)), ((2, 3), (1, 3)), ((2, 1), (2, 3)),
                                              ((4,), ()), ((2, 3), (3,)), ((4, 3), (4, 3))])
@pytest.mark.parametrize("threads", [1, 2])
def test_batches_and_broadcasting(batch_q, batch_kv, threads):
    proto, shapes = attention_model(batch_q, batch_kv, 11, 9, 12, 7, transpose_k=bool(batch_q))
    check(proto, feeds_for(shapes, seed=2), threads)


@pytest.mark.parametrize("batch,perm,in_place", [((3,), [1, 0, 2], True), ((1, 3), [0, 2, 1, 3], True),
                                              ((2, 3), [0, 2, 1, 3], True), ((1, 3), [2, 0, 1, 3], True),
                                              ((2, 3), [2, 0, 1, 3], False), ((2, 3), [1, 2, 0, 3], False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_heads_transposed_after_attention(batch, perm, in_place, threads):
    """An attention's only reader a Transpose putting the heads side by side (L before H, E last):
    the node writes that layout and the Transpose reads it without a copy where its output's order is
    the same (else it copies); onnxruntime's numbers either way, at tail sizes."""
    proto, shapes = attention_model(batch, batch, 13, 19, 16, 70)
    proto.graph.node.extend([helper.make_node("Transpose", ["y"], ["yt"], perm=perm),
                             helper.make_node("Relu", ["yt"], ["out"])])  # a graph output would be a copy
    out_shape = [(batch + (13, 70))[p] for p in perm]
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("out", T.FLOAT, out_shape))
    model, _ = check(proto, feeds_for(shapes, seed=3), threads)
    if _fused_expected():
        plan = next(iter(model._plans.values()))
        conts = [p for p in (lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)) if p.op == lib.GGML_OP_CONT]
        assert len(conts) == (0 if in_place else 1)


@pytest.mark.parametrize("case,folded", [("scalars", True), ("q_read_elsewhere", False), ("vector", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_query_and_key_scaled_before_the_product(case, folded, threads):
    """Q and K^T each multiplied by a constant scalar before MatMul(Q, K^T) (as exporters scale both by
    d^-1/4): the constants go into the attention's scale and the Muls leave the graph; a Mul whose
    result something else reads (Q's), or by a vector (K's), stays."""
    proto, shapes = attention_model((2,), (2,), 13, 19, 16, 24, mask_shape=(19,), scale=("Mul", 0.5))
    g = proto.graph
    sk = np.array(0.7, np.float32) if case != "vector" else np.linspace(0.5, 1.5, 19).astype(np.float32)
    g.initializer.extend([numpy_helper.from_array(np.array(1.3, np.float32), "sq"), numpy_helper.from_array(sk, "sk")])
    for n in g.node:
        n.input[:] = ["q1" if i == "q" else "kt1" if i == "kt" else i for i in n.input]
        n.output[:] = ["kt0" if o == "kt" else o for o in n.output]
    g.node.insert(0, helper.make_node("Mul", ["q", "sq"], ["q1"]))
    g.node.insert(2, helper.make_node("Mul", ["kt0", "sk"], ["kt1"]))
    if case == "q_read_elsewhere":
        g.output.append(helper.make_tensor_value_info("q1", T.FLOAT, (2, 13, 16)))
    model, _ = check(proto, feeds_for(shapes, seed=4), threads)
    if _fused_expected():
        plan = next(iter(model._plans.values()))
        ops = [lib.ggml_graph_node(plan.graph, i).op for i in range(plan.n_nodes)]
        muls = sum(op in (lib.GGML_OP_SCALE, lib.GGML_OP_MUL) for op in ops)
        assert muls == (0 if folded else 1), ops  # the other one folds


def test_nan_is_kept_where_onnxruntime_keeps_it():
    proto, shapes = attention_model((2,), (2,), 6, 8, 4, 4, mask_shape=(2, 6, 8))
    feeds = feeds_for(shapes, seed=3)
    feeds["q"][0, 2, 1] = np.nan       # a query's scores: its row
    feeds["v"][1, 5, 3] = np.nan       # a value: every query's column 3 of batch 1
    feeds["mask"][0, 4, :] = -np.inf   # every key masked for one query: 0 / 0
    _, got = check(proto, feeds, 2)
    y = got["y"]
    assert np.isnan(y[0, 2]).all() and np.isnan(y[0, 4]).all() and np.isnan(y[1, :, 3]).all()
    assert np.isfinite(np.delete(y[0], [2, 4], axis=0)).all()


@pytest.mark.parametrize("case", ["softmax_output_read", "scores_read", "softmax_not_last_axis", "vector_scale",
                                  "opset11_axis1"])
def test_unfused_where_the_pattern_does_not_match(case):
    kw = {"softmax_output_read": dict(extra_outputs=("p",)), "scores_read": dict(extra_outputs=("sc",)),
          "softmax_not_last_axis": dict(softmax_axis=-2), "opset11_axis1": dict(opset=11, softmax_axis=1),
          "vector_scale": dict()}[case]
    proto, shapes = attention_model((2, 3), (2, 3), 5, 6, 4, 4, **kw)
    if case == "vector_scale":  # a per-key scale is no scalar: the Mul stays a node, so does the rest
        proto, shapes = attention_model((2, 3), (2, 3), 5, 6, 4, 4, scale=("Mul", np.linspace(0.5, 1, 6)))
    check(proto, feeds_for(shapes, seed=4), 2, fused=False)


def test_kernels_off_builds_the_nodes():
    proto, shapes = attention_model((2, 3), (2, 3), 9, 9, 8, 8, mask_shape=(9,), scale=("Mul", 0.3))
    feeds = feeds_for(shapes, seed=5)
    prev = kernels.set_enabled(False)
    try:
        model = ggmlpy.onnx_load(proto, device="cpu")
        got = ggmlpy.onnx_run(model, feeds)["y"]
    finally:
        kernels.set_enabled(prev)
    assert "ggmlpy.attention" not in _kernel_names(model)
    np.testing.assert_allclose(got, onnxruntime_values(proto, feeds)["y"], rtol=RTOL, atol=ATOL)


def _encoder(torch, norm_first):
    """Post-norm with a padding mask (BERT) or pre-norm without one (ViT), head dims of 9."""

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(36, 4, 40, dropout=0.0, activation="gelu", batch_first=True,
                                                     norm_first=norm_first)
            self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(self, x, mask):
            return self.enc(x, src_key_padding_mask=mask == 0)

    return Encoder()


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_exported_encoders(tmp_path, dynamo, norm_first):
    torch = pytest.importorskip("torch", reason="exports the encoders with PyTorch: pip install torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    m = _encoder(torch, norm_first).eval()
    x = torch.randn(2, 13, 36)
    mask = torch.ones(2, 13, dtype=torch.int64)
    mask[1, 9:] = 0
    path = str(tmp_path / "enc.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(m, (x, mask), path, dynamo=True, verbose=False, input_names=["x", "mask"],
                              output_names=["y"])
        else:
            torch.onnx.export(m, (x, mask), path, dynamo=False, input_names=["x", "mask"], output_names=["y"],
                              opset_version=17)
    proto = onnx.load(path)
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    for threads in (1, 2):
        model, _ = check(proto, feeds, threads)
        if _fused_expected():
            assert _kernel_names(model).count("ggmlpy.attention") == 2
