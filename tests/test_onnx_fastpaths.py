"""The speed-motivated forms of a few builders give the same numbers as numpy: constant scalars as
ggml_scale_bias, batched MatMul against a 2-D matrix as one product, row-repeated conv biases,
and large products through ggml's BLAS backend (or not, with GGMLPY_ONNX_BLAS=0)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.bindings import lib  # noqa: E402


def one_node(op, x_shape, other, scalar_first, elem=T.FLOAT):
    ins = ["s", "x"] if scalar_first else ["x", "s"]
    g = helper.make_graph([helper.make_node(op, ins, ["y"])], "s", [helper.make_tensor_value_info("x", elem, x_shape)],
                          [helper.make_tensor_value_info("y", elem, np.broadcast_shapes(x_shape, other.shape))],
                          [numpy_helper.from_array(other, "s")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


NP = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("scalar_first", [False, True])
@pytest.mark.parametrize("scalar_shape", [(), (1,), (1, 1, 1)])
def test_scalar_constant_operands(op, scalar_first, scalar_shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32) + 3.0
    s = np.full(scalar_shape, -1.75, np.float32)
    model = ggmlpy.onnx_load(one_node(op, x.shape, s, scalar_first), device="cpu")
    got = ggmlpy.onnx_run(model, {"x": x})["y"]
    want = NP[op](s, x) if scalar_first else NP[op](x, s)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if not (scalar_first and op == "Div"):  # s / x keeps the element-wise division
        ops = {n.op for n in _nodes(model)}
        assert ops == {lib.GGML_OP_SCALE}


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
def test_scalar_constant_integers_stay_exact(op):
    x = np.arange(-6, 6, dtype=np.int64).reshape(3, 4) * 1001
    s = np.array(7, np.int64)
    model = ggmlpy.onnx_load(one_node(op, x.shape, s, False, T.INT64), device="cpu")
    got = ggmlpy.onnx_run(model, {"x": x})["y"]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, NP[op](x, s))


def test_integer_division_by_a_scalar_truncates():
    x = np.array([[-7, -6, 5, 7]], np.int32)
    model = ggmlpy.onnx_load(one_node("Div", x.shape, np.array(2, np.int32), False, T.INT32), device="cpu")
    np.testing.assert_array_equal(ggmlpy.onnx_run(model, {"x": x})["y"], [[-3, -3, 2, 3]])


def _nodes(model):
    from ggmlpy.bindings import lib
    plan = next(iter(model._plans.values()))
    return [lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)
            if lib.ggml_graph_node(plan.graph, i).op not in (lib.GGML_OP_RESHAPE, lib.GGML_OP_VIEW)]


@pytest.mark.parametrize("const_b", [True, False])
@pytest.mark.parametrize("a_shape", [(64, 1, 48), (3, 5, 40, 48), (2, 70, 48)])
def test_batched_matmul_against_a_matrix(a_shape, const_b, monkeypatch):
    rng = np.random.default_rng(1)
    a = rng.normal(size=a_shape).astype(np.float32)
    B = rng.normal(size=(48, 40)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", T.FLOAT, a_shape)]
    inits = [numpy_helper.from_array(B, "B")] if const_b else []
    if not const_b:
        inputs.append(helper.make_tensor_value_info("B", T.FLOAT, B.shape))
    g = helper.make_graph([helper.make_node("MatMul", ["a", "B"], ["y"])], "m", inputs,
                          [helper.make_tensor_value_info("y", T.FLOAT, a_shape[:-1] + (40,))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"a": a} if const_b else {"a": a, "B": B}
    from ggmlpy import kernels
    for use_kernels in (True, False):  # with ggmlpy's gemm kernel the product is its node, on the CPU backend
        prev = kernels.set_enabled(use_kernels)
        try:
            gemm = use_kernels and kernels.get() is not None and kernels.get().gemm is not None
            for blas in ("1", "0"):
                monkeypatch.setenv("GGMLPY_ONNX_BLAS", blas)
                model = ggmlpy.onnx_load(m, device="cpu")
                assert (model.blas is not None) == (blas == "1" and "BLAS" in ggmlpy.backends())
                assert ggmlpy.onnx_device_info(model)["backends"] == (
                    ["BLAS", "CPU"] if model.blas and not gemm else ["CPU"])
                assert any(n.op == lib.GGML_OP_CUSTOM for n in _nodes(model)) == gemm
                np.testing.assert_allclose(ggmlpy.onnx_run(model, feeds)["y"], a @ B, rtol=1e-5, atol=1e-5)
        finally:
            kernels.set_enabled(prev)


@pytest.mark.parametrize("blas", ["1", "0"])  # the conv product's operand order follows it
@pytest.mark.parametrize("batch", [1, 3])
def test_conv_bias_repeated_along_rows(batch, blas, monkeypatch):
    monkeypatch.setenv("GGMLPY_ONNX_BLAS", blas)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(batch, 3, 9, 7)).astype(np.float32)
    W = rng.normal(size=(5, 3, 3, 3)).astype(np.float32)
    bias = rng.normal(size=5).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "W", "b"], ["y"], pads=[1, 0, 1, 2], strides=[2, 1])], "c",
                          [helper.make_tensor_value_info("x", T.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", T.FLOAT, (batch, 5, 5, 9))],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(bias, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    model = ggmlpy.onnx_load(m, device="cpu")
    assert next(iter(model._plans.values())).builder.columns_first == (model.blas is not None)
    np.testing.assert_allclose(ggmlpy.onnx_run(model, {"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def _attention(batch_q=(2, 3), batch_k=(2, 3), scale_k=True):
    """softmax(Q Transpose(K) * s) V, as exporters write attention: K transposed by a Transpose node,
    scaled by a constant Mul, the products batched over (batch, heads)."""
    n = helper.make_node
    kt = ["kts"] if scale_k else ["kt"]
    nodes = [n("Transpose", ["k"], ["kt"], perm=list(range(len(batch_k))) + [len(batch_k) + 1, len(batch_k)])]
    if scale_k:
        nodes.append(n("Mul", ["kt", "s"], ["kts"]))
    nodes += [n("MatMul", ["q", kt[0]], ["sc"]), n("Softmax", ["sc"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    L, d = 7, 5
    shapes = {"q": batch_q + (L, d), "k": batch_k + (L, d), "v": batch_k + (L, d)}
    out = np.broadcast_shapes(batch_q, batch_k) + (L, d)
    g = helper.make_graph(nodes, "att", [helper.make_tensor_value_info(k, T.FLOAT, s) for k, s in shapes.items()],
                          [helper.make_tensor_value_info("y", T.FLOAT, out)],
                          [numpy_helper.from_array(np.array(0.375, np.float32), "s")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), shapes


@pytest.mark.parametrize("batch_q,batch_k", [((2, 3), (2, 3)), ((3,), (3,)), ((2, 3), (1, 3)), ((4,), ())])
@pytest.mark.parametrize("scale_k", [True, False])
def test_attention_products_read_transposed_operands_in_place(batch_q, batch_k, scale_k):
    """With ggmlpy's gemm kernel no transposition is copied: not K's Transpose (read through the
    product's flag, its scale applied before it), nor V (ggml's mul_mat would want it transposed);
    with its attention kernel, which reads every operand through its strides, neither."""
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    proto, shapes = _attention(batch_q, batch_k, scale_k)
    rng = np.random.default_rng(4)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    want = ReferenceEvaluator(proto).run(None, feeds)[0]
    for use_kernels in (True, False):
        prev = kernels.set_enabled(use_kernels)
        try:
            model = ggmlpy.onnx_load(proto, device="cpu", n_threads=2)
            np.testing.assert_allclose(ggmlpy.onnx_run(model, feeds)["y"], want, rtol=1e-5, atol=1e-6)
        finally:
            kernels.set_enabled(prev)
        K = kernels.get() if use_kernels else None
        if K is not None and K.attention is not None:  # both products and the softmax: one node
            ops = [n.op for n in _nodes(model)]
            assert ops.count(lib.GGML_OP_CUSTOM) == 1 and lib.GGML_OP_CONT not in ops, ops
        elif K is not None and K.gemm is not None:
            ops = [n.op for n in _nodes(model)]
            assert ops.count(lib.GGML_OP_CUSTOM) == 2 and lib.GGML_OP_CONT not in ops, ops


def _linear_model(bias_shape, bias_first, via_identity=False, extra_use=False, a_shape=(3, 5, 8)):
    n = helper.make_node
    rng = np.random.default_rng(5)
    W = rng.standard_normal((8, 6)).astype(np.float32)
    bias = rng.standard_normal(bias_shape).astype(np.float32)
    bname = "bid" if via_identity else "bias"
    nodes = ([n("Identity", ["bias"], ["bid"])] if via_identity else []) + [
        n("MatMul", ["a", "W"], ["h"]), n("Add", [bname, "h"] if bias_first else ["h", bname], ["y"])]
    outs = ["y"] + (["h"] if extra_use else [])
    out_shape = np.broadcast_shapes(a_shape[:-1] + (6,), bias_shape)
    g = helper.make_graph(nodes, "lin", [helper.make_tensor_value_info("a", T.FLOAT, a_shape)],
                          [helper.make_tensor_value_info(o, T.FLOAT, out_shape if o == "y" else a_shape[:-1] + (6,))
                           for o in outs],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(bias, "bias")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("bias_shape,bias_first,via_identity,extra_use,fused", [
    ((6,), False, False, False, True), ((6,), True, True, False, True), ((1, 6), True, False, False, True),
    ((6,), False, False, True, False),            # the product is also an output: kept apart
    ((2, 1, 1, 6), False, False, False, False),   # a bias of higher rank broadcasts the output: node by node
    ((5, 6), False, False, False, False)])        # not a per-column bias
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_matmul_and_bias_as_one_linear_node(bias_shape, bias_first, via_identity, extra_use, fused, threads):
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    proto = _linear_model(bias_shape, bias_first, via_identity, extra_use)
    a = np.random.default_rng(6).standard_normal((3, 5, 8)).astype(np.float32)
    want = ReferenceEvaluator(proto).run(None, {"a": a})
    model = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    for got, w in zip(ggmlpy.onnx_run(model, {"a": a}).values(), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
    K = kernels.get()
    if K is not None and K.linear is not None:
        names = [ffi_name(n) for n in _nodes(model) if n.op == lib.GGML_OP_CUSTOM]
        assert names == ["ggmlpy.linear"] if fused or K.linear_packed else names == ["ggmlpy.gemm"]
        assert any(n.op == lib.GGML_OP_ADD for n in _nodes(model)) != fused


@pytest.mark.parametrize("c_shape,alpha,beta,fused", [((6,), 1.0, 1.0, True), ((1, 6), 1.0, 1.0, True),
                                                     ((6,), 2.0, 1.0, False), ((6,), 1.0, 0.5, False),
                                                     ((4, 6), 1.0, 1.0, False)])
def test_gemm_bias_in_the_product_node(c_shape, alpha, beta, fused):
    from ggmlpy import kernels
    rng = np.random.default_rng(7)
    A = rng.standard_normal((4, 8)).astype(np.float32)
    B = rng.standard_normal((6, 8)).astype(np.float32)
    C = rng.standard_normal(c_shape).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["A", "B", "C"], ["y"], transB=1, alpha=alpha, beta=beta)], "g",
                          [helper.make_tensor_value_info("A", T.FLOAT, A.shape)],
                          [helper.make_tensor_value_info("y", T.FLOAT, (4, 6))],
                          [numpy_helper.from_array(B, "B"), numpy_helper.from_array(C, "C")])
    model = ggmlpy.onnx_load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
    np.testing.assert_allclose(ggmlpy.onnx_run(model, {"A": A})["y"], alpha * A @ B.T + beta * C, rtol=1e-5, atol=1e-5)
    K = kernels.get()
    if K is not None and K.linear is not None:
        names = [ffi_name(n) for n in _nodes(model) if n.op == lib.GGML_OP_CUSTOM]
        assert names == ["ggmlpy.linear"] if fused or K.linear_packed else names == ["ggmlpy.gemm"]
        assert any(n.op == lib.GGML_OP_ADD for n in _nodes(model)) != fused


def ffi_name(t):
    from ggmlpy.bindings import ffi
    return ffi.string(t.name).decode()


@pytest.mark.parametrize("indices,copies", [(1, False), (-1, False), ([1, 2], False), ([2], False),
                                             ([0, 2], True), ([2, 1], True)])
@pytest.mark.parametrize("then_add", [False, True])
def test_gather_of_consecutive_outer_indices_is_a_view(indices, copies, then_add):
    """Gather of a run of the outermost axis (q, k, v out of a stacked projection) reads its input in
    place; other index lists gather rows. Read by a node, or as a graph output itself."""
    from onnx.reference import ReferenceEvaluator
    n = helper.make_node
    ind = np.array(indices, np.int64)
    out_shape = ind.shape + (5, 4)
    nodes = [n("Relu", ["x"], ["r"]), n("Gather", ["r", "i"], ["g"], axis=0)] + (
        [n("Add", ["g", "g"], ["y"])] if then_add else [n("Identity", ["g"], ["y"])])
    g = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("x", T.FLOAT, (3, 5, 4))],
                          [helper.make_tensor_value_info("y", T.FLOAT, out_shape)], [numpy_helper.from_array(ind, "i")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(11).standard_normal((3, 5, 4)).astype(np.float32)
    model = ggmlpy.onnx_load(proto, device="cpu")
    np.testing.assert_array_equal(ggmlpy.onnx_run(model, {"x": x})["y"], ReferenceEvaluator(proto).run(None, {"x": x})[0])
    assert any(p.op == lib.GGML_OP_GET_ROWS for p in _nodes(model)) == copies


def _linear_gelu_model(extra_use, rows=13, k=40, n_out=70):
    """MatMul -> Add(bias) -> GELU as exporters write it (Div by sqrt 2, Erf, Add 1, Mul x, Mul 1/2);
    extra_use: the layer's output is also a graph output."""
    n = helper.make_node
    rng = np.random.default_rng(9)
    c = numpy_helper.from_array
    inits = [c(rng.standard_normal((k, n_out)).astype(np.float32), "W"),
             c((rng.standard_normal(n_out) * 4).astype(np.float32), "bias"), c(np.array(np.sqrt(2), np.float32), "s2"),
             c(np.array(1, np.float32), "one"), c(np.array(0.5, np.float32), "half")]
    nodes = [n("MatMul", ["a", "W"], ["m"]), n("Add", ["m", "bias"], ["h"]), n("Div", ["h", "s2"], ["d"]),
             n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["p"]), n("Mul", ["h", "p"], ["q"]),
             n("Mul", ["q", "half"], ["y"])]
    outs = ["y"] + (["h"] if extra_use else [])
    g = helper.make_graph(nodes, "lin_gelu", [helper.make_tensor_value_info("a", T.FLOAT, (1, rows, k))],
                          [helper.make_tensor_value_info(o, T.FLOAT, (1, rows, n_out)) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("extra_use", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_linear_layer_and_its_gelu_as_one_node(extra_use, threads):
    """A linear layer whose output only a GELU reads applies the GELU in its own node (AVX-512);
    one whose output is read elsewhere too stays a product, and the GELU its own node."""
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    proto = _linear_gelu_model(extra_use)
    a = np.random.default_rng(10).standard_normal((1, 13, 40)).astype(np.float32)
    model = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    got = ggmlpy.onnx_run(model, {"a": a})
    for name, w in zip(["y", "h"], ReferenceEvaluator(proto).run(None, {"a": a})):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)
    K = kernels.get()
    if K is not None and K.linear_packed is not None:
        names = [ffi_name(p) for p in _nodes(model) if p.op in (lib.GGML_OP_CUSTOM, lib.GGML_OP_MAP_CUSTOM1)]
        assert names == (["ggmlpy.linear", "ggmlpy.gelu"] if extra_use else ["ggmlpy.linear_gelu"]), names


def _residual_model(kind, rows=13, k=40, n_out=24):
    """x (rows, k) @ W + b, then + r: "plain" straight after, "reshaped" through Reshape and a Transpose
    of a dimension of 1 (an out-projection as exporters write it, a Gemm), "extra_use" with the product
    also a graph output, "broadcast" with r of one row."""
    n = helper.make_node
    rng = np.random.default_rng(12)
    c = numpy_helper.from_array
    r_shape = (1, n_out) if kind == "broadcast" else (rows, n_out)
    inits = [c(rng.standard_normal((k, n_out)).astype(np.float32), "W"),
             c(rng.standard_normal(n_out).astype(np.float32), "b"), c(np.array([rows, 1, n_out], np.int64), "shape")]
    if kind == "reshaped":
        nodes = [n("Gemm", ["x", "W", "b"], ["h"]), n("Reshape", ["h", "shape"], ["h3"]),
                 n("Transpose", ["h3"], ["ht"], perm=[1, 0, 2]), n("Reshape", ["ht", "shape2"], ["h2"])]
        inits.append(c(np.array([rows, n_out], np.int64), "shape2"))
    else:
        nodes = [n("MatMul", ["x", "W"], ["m"]), n("Add", ["m", "b"], ["h2"])]
    nodes.append(n("Add", ["r", "h2"], ["y"]))
    outs = [helper.make_tensor_value_info("y", T.FLOAT, (rows, n_out))]
    if kind == "extra_use":
        outs.append(helper.make_tensor_value_info("h2", T.FLOAT, (rows, n_out)))
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", T.FLOAT, (rows, k)),
                                              helper.make_tensor_value_info("r", T.FLOAT, r_shape)], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind,fused", [("plain", True), ("reshaped", True), ("extra_use", False),
                                        ("broadcast", False)])
@pytest.mark.parametrize("threads", [1, 3])
def test_residual_add_in_the_linear_layers_node(kind, fused, threads):
    """A linear layer's output that only a residual Add reads (directly or through reshapes that keep
    its memory order): the sum computed in the layer's node; read elsewhere, or broadcast: an ADD."""
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    proto = _residual_model(kind)
    rng = np.random.default_rng(13)
    feeds = {"x": rng.standard_normal((13, 40)).astype(np.float32),
             "r": rng.standard_normal((1, 24) if kind == "broadcast" else (13, 24)).astype(np.float32)}
    model = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    got = ggmlpy.onnx_run(model, feeds)
    for name, w in zip(["y", "h2"], ReferenceEvaluator(proto).run(None, feeds)):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)
    K = kernels.get()
    if K is not None and K.linear_packed is not None:
        names = [ffi_name(p) for p in _nodes(model) if p.op == lib.GGML_OP_CUSTOM]
        assert names == (["ggmlpy.linear_residual"] if fused else ["ggmlpy.linear"]), names
        assert any(p.op == lib.GGML_OP_ADD for p in _nodes(model)) != fused


def _mlp_model(rows=13, sizes=(40, 300, 70, 40)):
    """x (rows, sizes[0]) through linear layers of sizes[1:] (MatMul, Add bias), the last one's output
    plus x (a residual): consecutive packed linear nodes, of depths below and above a block of K."""
    n = helper.make_node
    rng = np.random.default_rng(14)
    c = numpy_helper.from_array
    inits, nodes, cur = [], [], "x"
    for i, (k, n_out) in enumerate(zip(sizes, sizes[1:])):
        inits += [c((rng.standard_normal((k, n_out)) / np.sqrt(k)).astype(np.float32), f"W{i}"),
                  c(rng.standard_normal(n_out).astype(np.float32), f"b{i}")]
        nodes += [n("MatMul", [cur, f"W{i}"], [f"m{i}"]), n("Add", [f"m{i}", f"b{i}"], [f"h{i}"])]
        cur = f"h{i}"
    nodes.append(n("Add", ["x", cur], ["y"]))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, (rows, sizes[0]))],
                          [helper.make_tensor_value_info("y", T.FLOAT, (rows, sizes[-1]))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_linear_layers_fetch_the_next_layers_weights(threads):
    """Each packed linear node reads the graph's next one's weights as one more argument (it fetches
    their first block as it finishes); the last reads none; the numbers are the layers' own."""
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    from ggmlpy.bindings import ffi
    proto = _mlp_model()
    x = np.random.default_rng(15).standard_normal((13, 40)).astype(np.float32)
    model = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    np.testing.assert_allclose(ggmlpy.onnx_run(model, {"x": x})["y"], ReferenceEvaluator(proto).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)
    K = kernels.get()
    if K is None or K.linear_packed is None:
        return
    linears = [p for p in _nodes(model) if p.op == lib.GGML_OP_CUSTOM]
    assert [ffi_name(p) for p in linears] == ["ggmlpy.linear"] * 2 + ["ggmlpy.linear_residual"]
    own = [3, 3, 4]  # weights, x, bias (and the residual)
    for p, n_own, nxt in zip(linears, own, linears[1:] + [None]):
        assert all(p.src[i] != ffi.NULL for i in range(n_own))
        assert p.src[n_own] == (nxt.src[0] if nxt is not None else ffi.NULL)


def _qkv_model(kind, rows=13, k=40, d=64):
    """x @ W + b (3 d columns), reshaped to (rows, 3, d) and transposed to (3, rows, d), then q, k, v
    gathered and combined (q + k) * v, as an attention's stacked projection is taken apart; a Shape
    reads the product too. kind: "split", "extra_use" (the product is also a graph output),
    "other_perm" (the transposition keeps the parts inner), "d20" (parts of 20 rows)."""
    n = helper.make_node
    d = 20 if kind == "d20" else d
    rng = np.random.default_rng(14)
    c = numpy_helper.from_array
    perm = [0, 2, 1] if kind == "other_perm" else [1, 0, 2]
    axis = 2 if kind == "other_perm" else 0
    inits = [c(rng.standard_normal((k, 3 * d)).astype(np.float32), "W"),
             c(rng.standard_normal(3 * d).astype(np.float32), "b"), c(np.array([rows, 3, d], np.int64), "s3")] + [
             c(np.array(i, np.int64), f"i{i}") for i in range(3)]
    nodes = [n("MatMul", ["x", "W"], ["m"]), n("Add", ["m", "b"], ["h"]), n("Shape", ["h"], ["hs"]),
             n("Reshape", ["h", "s3"], ["r"]), n("Transpose", ["r"], ["t"], perm=perm)] + [
             n("Gather", ["t", f"i{i}"], [f"g{i}"], axis=axis) for i in range(3)] + [
             n("Add", ["g0", "g1"], ["a"]), n("Mul", ["a", "g2"], ["y"])]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, (rows, d)), helper.make_tensor_value_info("hs", T.INT64, (2,))]
    if kind == "extra_use":
        outs.append(helper.make_tensor_value_info("h", T.FLOAT, (rows, 3 * d)))
    g = helper.make_graph(nodes, "qkv", [helper.make_tensor_value_info("x", T.FLOAT, (rows, k))], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind,fused", [("split", True), ("extra_use", False), ("other_perm", False), ("d20", False)])
@pytest.mark.parametrize("threads", [1, 3])
def test_stacked_projection_taken_apart_by_the_layer(kind, fused, threads):
    """A linear layer whose output is only reshaped and transposed into parts (q, k, v) writes the parts
    one after another itself (no copy for the Transpose); any other use or transposition: a copy."""
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    proto = _qkv_model(kind)
    feeds = {"x": np.random.default_rng(15).standard_normal((13, 40)).astype(np.float32)}
    model = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    got = ggmlpy.onnx_run(model, feeds)
    for o, w in zip(proto.graph.output, ReferenceEvaluator(proto).run(None, feeds)):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-5, atol=1e-5)
    K = kernels.get()
    if K is not None and K.linear_packed is not None:
        names = [ffi_name(p) for p in _nodes(model) if p.op == lib.GGML_OP_CUSTOM]
        assert ("ggmlpy.linear_split" in names) == fused, names
        assert any(p.op == lib.GGML_OP_CONT for p in _nodes(model)) != fused


@pytest.mark.parametrize("bias_first", [True, False])
def test_linear_layers_without_avx512_use_openblas_with_the_same_numbers(bias_first, monkeypatch):
    """Where conv.c was built without AVX-512 (linear_packed is None) the bias'd product is the
    OpenBLAS node and a plain product gemm.c's."""
    from onnx.reference import ReferenceEvaluator

    from ggmlpy import kernels
    K = kernels.get()
    if K is None or K.linear is None:
        pytest.skip("no conv.c kernels")
    monkeypatch.setattr(K, "linear_packed", None)
    for extra_use in (False, True):
        proto = _linear_model((6,), bias_first, extra_use=extra_use)
        a = np.random.default_rng(8).standard_normal((3, 5, 8)).astype(np.float32)
        model = ggmlpy.onnx_load(proto, device="cpu", n_threads=2)
        for got, w in zip(ggmlpy.onnx_run(model, {"a": a}).values(), ReferenceEvaluator(proto).run(None, {"a": a})):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
        names = [ffi_name(n) for n in _nodes(model) if n.op == lib.GGML_OP_CUSTOM]
        assert names == (["ggmlpy.gemm"] if extra_use else ["ggmlpy.linear"])
