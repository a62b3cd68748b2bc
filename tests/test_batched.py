"""Batch and head axes in the ag_* API: N-d tensors, batched products, permute, reshape, slicing,
reductions over an axis, softmax with scale / mask / causal masking, one-hot targets, embeddings,
batched multi-head attention, and compiled steps with gradient clipping.

Every op's forward is checked against numpy; its VJP (through backward) and JVP (forward mode)
against central differences of the float64 numpy reference, so the rules are checked against
the mathematics, not against float32 noise.
"""
import math

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.autograd.transforms import hvp, jvp

rng = np.random.default_rng(7)


def rnd(*shape):
    return rng.standard_normal(shape)


def num_grad(f, xs, i, w, eps=1e-6):
    """d sum(f(xs) * w) / d xs[i], by central differences in float64."""
    x = xs[i]
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        up = np.sum(f(*xs) * w)
        x[idx] = old - eps
        down = np.sum(f(*xs) * w)
        x[idx] = old
        grad[idx] = (up - down) / (2 * eps)
    return grad


def num_jvp(f, xs, ts, eps=1e-6):
    return (f(*[x + eps * t for x, t in zip(xs, ts)]) - f(*[x - eps * t for x, t in zip(xs, ts)])) / (2 * eps)


def check(op, ref, *arrays, tol=2e-4):
    """op(*ag tensors) against ref(*numpy arrays): value, every input's gradient, and the JVP."""
    arrays = [np.asarray(a, np.float64) for a in arrays]
    params = [g.ag_param(a) for a in arrays]
    with g.with_grad_tape():
        out = op(*params)
    want = ref(*arrays)
    got = out.numpy()
    assert got.shape == g.tensor.norm_shape(want.shape) or got.shape == want.shape
    np.testing.assert_allclose(got, want.reshape(got.shape), rtol=tol, atol=tol)
    w = rnd(*want.shape)
    grads = g.backward(out, g.ag_tensor(w.reshape(got.shape)))
    for i, p in enumerate(params):
        np.testing.assert_allclose(grads[p].numpy(), num_grad(ref, arrays, i, w).reshape(grads[p].shape),
                                   rtol=tol, atol=tol, err_msg=f"gradient of input {i}")
    tangents = [rnd(*a.shape) for a in arrays]
    _, tangent_out = jvp(op, [g.ag_tensor(a) for a in arrays], [g.ag_tensor(t) for t in tangents])
    np.testing.assert_allclose(tangent_out.numpy(), num_jvp(ref, arrays, tangents).reshape(got.shape),
                               rtol=tol, atol=tol, err_msg="JVP")


# -- tensors -----------------------------------------------------------------------------------------
def test_nd_tensors_round_trip_in_r_dim_order():
    a = rnd(3, 4, 5, 2)
    t = g.ag_tensor(a)
    assert t.shape == (3, 4, 5, 2) and t.ndim == 4 and t.size == 120 and t.nrow == 3 and t.ncol == 4
    np.testing.assert_allclose(t.numpy(), a, rtol=1e-6)
    assert g.ag_tensor(rnd(3, 4, 1)).shape == (3, 4)  # trailing 1s beyond two dims drop, as in ggml
    assert g.ag_tensor(rnd(3, 1, 5)).shape == (3, 1, 5)
    with pytest.raises(g.GGMLError, match="at most 4 dims"):
        g.ag_tensor(rnd(2, 2, 2, 2, 2))
    t.data = a * 2
    np.testing.assert_allclose(t.numpy(), a * 2, rtol=1e-6)
    assert "shape=[3, 4, 5, 2]" in repr(t)


def test_getitem_keeps_dims_and_tracks_gradients():
    a = rnd(4, 5, 3)
    t = g.ag_param(a)
    np.testing.assert_allclose(t[1:3, :, 2].numpy(), a[1:3, :, 2], rtol=1e-6)
    assert t[0].shape == (1, 5, 3)
    with g.with_grad_tape():
        loss = g.ag_sum(t[:, 1:4, 1:])
    want = np.zeros_like(a)
    want[:, 1:4, 1:] = 1
    np.testing.assert_allclose(g.backward(loss)[t].numpy(), want)
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]


# -- products, shapes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_batched_matmul_with_transposes(ta, tb):
    a = rnd(3, 4, 2, 2) if not ta else rnd(4, 3, 2, 2)
    b = rnd(4, 5, 2, 2) if not tb else rnd(5, 4, 2, 2)

    def ref(a, b):
        a_ = np.swapaxes(a, 0, 1) if ta else a
        b_ = np.swapaxes(b, 0, 1) if tb else b
        return np.einsum("mkij,knij->mnij", a_, b_)
    check(lambda x, y: g.ag_matmul(x, y, transpose_a=ta, transpose_b=tb), ref, a, b)


def test_matmul_broadcasts_a_2d_weight_and_a_2d_right_operand():
    check(lambda w, x: g.ag_matmul(w, x), lambda w, x: np.einsum("ok,knb->onb", w, x), rnd(5, 4), rnd(4, 3, 6))
    check(lambda w, x: g.ag_matmul(w, x, transpose_a=True), lambda w, x: np.einsum("ko,knb->onb", w, x),
          rnd(4, 5), rnd(4, 3, 6))
    check(lambda x, w: g.ag_matmul(x, w), lambda x, w: np.einsum("mkb,kn->mnb", x, w), rnd(3, 4, 2), rnd(4, 5))
    with pytest.raises(g.GGMLError, match="batch axes"):
        g.ag_matmul(g.ag_tensor(rnd(2, 3, 2, 1)), g.ag_tensor(rnd(3, 2, 1, 3)))
    with pytest.raises(g.GGMLError, match="non-conformable"):
        g.ag_matmul(g.ag_tensor(rnd(2, 3, 4)), g.ag_tensor(rnd(4, 2, 4)))


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), (0, 2, 1, 3), (3, 1, 0, 2)])
def test_permute(perm):
    shape = (2, 3, 4, 5)[:max(len(perm), 3)]
    check(lambda x: g.ag_permute(x, *perm), lambda x: np.transpose(x, perm), rnd(*shape))
    with pytest.raises(g.GGMLError, match="not a permutation"):
        g.ag_permute(g.ag_tensor(rnd(2, 3)), 0, 0)


def test_reshape_slice_concat_nd():
    check(lambda x: g.ag_reshape(x, 4, 3, 2), lambda x: x.reshape(4, 3, 2, order="F"), rnd(2, 3, 4))
    check(lambda x: g.ag_reshape(x, 6, -1), lambda x: x.reshape(6, -1, order="F"), rnd(2, 3, 4))
    check(lambda x: g.ag_slice(x, slice(1, 3), None, slice(0, 2)), lambda x: x[1:3, :, 0:2], rnd(4, 3, 5))
    check(lambda x, y: g.ag_concat(x, y, 3), lambda x, y: np.concatenate([x, y], 2), rnd(2, 3, 2), rnd(2, 3, 4))
    with pytest.raises(g.GGMLError, match="cannot reshape"):
        g.ag_reshape(g.ag_tensor(rnd(2, 3, 4)), 5, -1)


@pytest.mark.parametrize("axis", [0, 1, 2, (0, 2), (1, 2)])
def test_sum_and_mean_over_axes(axis):
    check(lambda x: g.ag_sum(x, axis=axis), lambda x: x.sum(axis, keepdims=True), rnd(3, 4, 5))
    check(lambda x: g.ag_mean(x, axis=axis), lambda x: x.mean(axis, keepdims=True), rnd(3, 4, 5))


def test_broadcasting_over_batch_axes():
    check(lambda x, b: g.ag_add(x, b), lambda x, b: x + b, rnd(3, 4, 5), rnd(3, 1, 5))
    check(lambda x, b: g.ag_add(x, b), lambda x, b: x + b, rnd(3, 4, 5), rnd(1, 4, 5))  # a per-column row
    check(lambda x, b: g.ag_mul(x, b), lambda x, b: x * b, rnd(1, 4, 5), rnd(3, 4, 5))
    check(lambda x, b: g.ag_sub(x, b), lambda x, b: x - b[:, :, None, None], rnd(3, 4, 2, 2), rnd(3, 1))  # dims align left
    check(lambda x, b: g.ag_div(x, b), lambda x, b: x / b, rnd(3, 4, 5), 2 + np.abs(rnd(1, 4, 5)))
    with pytest.raises(g.GGMLError, match="only the second argument broadcasts"):
        g.ag_add(g.ag_tensor(rnd(3, 1, 5)), g.ag_tensor(rnd(3, 4, 5)))


# -- softmax, layer norm, gelu ----------------------------------------------------------------------------
def _softmax(x):
    e = np.exp(x - x.max(0, keepdims=True))
    return e / e.sum(0, keepdims=True)


def test_softmax_with_scale_mask_and_causal_masking():
    causal = np.where(np.arange(4)[:, None] > np.arange(4)[None, :], -np.inf, 0.0)
    check(lambda x: g.ag_softmax(x, scale=0.5), lambda x: _softmax(0.5 * x), rnd(4, 3, 2))
    check(lambda x: g.ag_softmax(x, scale=0.7, causal=True), lambda x: _softmax(0.7 * x + causal[:, :, None]),
          rnd(4, 4, 3))
    # an additive mask per sequence [T_k, 1, 1, B], broadcast over queries and heads; it gets a gradient too
    check(lambda x, m: g.ag_softmax(x, mask=m, scale=2.0), lambda x, m: _softmax(2.0 * x + m), rnd(4, 3, 2, 2),
          rnd(4, 1, 1, 2))
    with pytest.raises(g.GGMLError, match="does not broadcast"):
        g.ag_softmax(g.ag_tensor(rnd(4, 3)), mask=g.ag_tensor(rnd(3, 3)))
    with pytest.raises(g.GGMLError, match="positive"):
        g.ag_softmax(g.ag_tensor(rnd(4, 3)), scale=-1.0)


def test_softmax_second_derivatives_through_its_fused_backward():
    x = rnd(5, 3)
    w = rnd(5, 3)

    def f(t):
        return g.ag_sum(g.ag_mul(g.ag_softmax(t, scale=1.5), g.ag_tensor(w)))

    def grad_np(x):  # gradient of sum(w * softmax(1.5 x)) in numpy
        y = _softmax(1.5 * x)
        return 1.5 * y * (w - (w * y).sum(0, keepdims=True))
    v = rnd(5, 3)
    _, hv = hvp(f, g.ag_tensor(x), g.ag_tensor(v))
    np.testing.assert_allclose(hv.numpy(), num_jvp(grad_np, [x], [v]), rtol=2e-4, atol=2e-4)


def _layer_norm(x, eps=1e-5):
    mu = x.mean(0, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(0, keepdims=True) + eps)


def test_layer_norm_is_one_kernel_with_exact_gradients():
    check(lambda x: g.ag_layer_norm(x), _layer_norm, rnd(6, 4, 3))
    x, v = rnd(6, 3), rnd(6, 3)
    w = rnd(6, 3)

    def grad_np(x):
        return num_grad(lambda x: _layer_norm(x), [x.copy()], 0, w, eps=1e-5)
    _, hv = hvp(lambda t: g.ag_sum(g.ag_mul(g.ag_layer_norm(t), g.ag_tensor(w))), g.ag_tensor(x), g.ag_tensor(v))
    np.testing.assert_allclose(hv.numpy(), num_jvp(grad_np, [x], [v], eps=1e-3), rtol=2e-3, atol=2e-3)


def test_gelu_first_and_second_derivatives_including_zero():
    x = np.array([[-40.0], [-3.0], [-1.0], [-0.2], [0.0], [1e-38], [0.7], [2.5], [40.0]])
    phi = np.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    t = g.ag_param(x)
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_gelu(t))
    np.testing.assert_allclose(g.backward(loss)[t].numpy(), cdf + x * phi, atol=1e-6)
    _, hv = hvp(lambda t: g.ag_sum(g.ag_gelu(t)), g.ag_tensor(x), g.ag_tensor(np.ones_like(x)))
    np.testing.assert_allclose(hv.numpy(), phi * (2 - x ** 2), atol=1e-6)


# -- indices: embeddings and class targets -----------------------------------------------------------------
def test_embedding_keeps_the_batch_axes_and_checks_indices_on_the_device_side():
    emb = g.ag_embedding(10, 3)
    w = emb.weight.numpy()
    idx = np.array([[1, 2, 3], [4, 5, 9]])
    for given in (idx, g.ag_tensor(idx, dtype="i32")):
        out = emb(given, batched=True)
        assert out.shape == (3, 2, 3)
        np.testing.assert_allclose(out.numpy(), w[:, idx], rtol=1e-6)
        flat = emb(given)  # ggmlR's: a matrix of indices flattened column by column
        np.testing.assert_allclose(flat.numpy(), w[:, idx.ravel(order="F")], rtol=1e-6)
    assert emb(np.array([1, 2, 3])).shape == (3, 3)
    with g.with_grad_tape():
        loss = g.ag_sum(emb(g.ag_tensor(idx, dtype="i32"), batched=True))
    want = np.zeros((3, 10))
    np.add.at(want, (slice(None), idx.ravel()), 1.0)
    np.testing.assert_allclose(g.backward(loss)[emb.weight].numpy(), want)
    with pytest.raises(g.GGMLError, match="indices must lie in 0..9"):
        emb(g.ag_tensor(np.array([[1, 10]]), dtype="i32"))


def test_cross_entropy_with_class_index_tensors_of_any_batch_shape():
    logits = rnd(7, 3, 2)
    t = rng.integers(0, 7, (3, 2))
    onehot = np.zeros_like(logits)
    np.put_along_axis(onehot, t[None], 1.0, 0)
    p = _softmax(logits)
    want = -np.mean(np.log(np.take_along_axis(p, t[None], 0)))
    for target in (g.ag_tensor(t, dtype="i32"), t, g.ag_tensor(onehot)):
        lg = g.ag_param(logits)
        with g.with_grad_tape():
            loss = g.ag_softmax_cross_entropy_loss(lg, target)
        assert loss.item() == pytest.approx(want, rel=1e-5)
        np.testing.assert_allclose(g.backward(loss)[lg].numpy(), (p - onehot) / 6, atol=1e-6)
    with pytest.raises(g.GGMLError, match="indices must lie in 0..6"):
        g.ag_softmax_cross_entropy_loss(g.ag_tensor(logits), g.ag_tensor(t + 7, dtype="i32"))


# -- attention ---------------------------------------------------------------------------------------------
def _mha_ref(x, P, heads, causal=False, pad=None, kv=None):
    Wq, Wk, Wv, Wo, bq, bk, bv, bo = P
    kv = x if kv is None else kv
    d, tq = x.shape[:2]
    hd = d // heads
    outs = []
    for b in range(x.shape[2]):
        q, k, v = Wq @ x[:, :, b] + bq, Wk @ kv[:, :, b] + bk, Wv @ kv[:, :, b] + bv
        hs = []
        for h in range(heads):
            sl = slice(h * hd, (h + 1) * hd)
            s = k[sl].T @ q[sl] / math.sqrt(hd)
            if causal:
                s = s + np.where(np.arange(k.shape[1])[:, None] > np.arange(tq)[None, :], -np.inf, 0)
            if pad is not None:
                s = s + np.where(pad[:, b:b + 1], -np.inf, 0)
            hs.append(v[sl] @ _softmax(s))
        outs.append(Wo @ np.concatenate(hs) + bo)
    return np.stack(outs, 2)


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_batched_attention_matches_per_sequence_attention(heads, causal):
    d, T, B = 8, 5, 3
    mha = g.ag_multihead_attention(d, heads, causal=causal, qkv_bias=True)
    for p in (mha.b_q, mha.b_k, mha.b_v, mha.b_o):
        p.data = rnd(*p.shape)
    P = [p.numpy().astype(np.float64) for p in (mha.W_q, mha.W_k, mha.W_v, mha.W_o, mha.b_q, mha.b_k, mha.b_v,
                                                 mha.b_o)]
    x = rnd(d, T, B)
    out = mha(g.ag_tensor(x))
    assert out.shape == (d, T, B)
    np.testing.assert_allclose(out.numpy(), _mha_ref(x, P, heads, causal), atol=2e-5)
    for b in range(B):  # each sequence attends only to itself
        np.testing.assert_allclose(mha(g.ag_tensor(x[:, :, b])).numpy(), out.numpy()[:, :, b], atol=2e-5)
    pad = np.zeros((T, B), bool)
    pad[3:, 1] = True
    np.testing.assert_allclose(mha(g.ag_tensor(x), key_padding_mask=pad).numpy(),
                               _mha_ref(x, P, heads, causal, pad), atol=2e-5)


def test_attention_gradients_and_cross_attention():
    d, heads = 6, 2
    mha = g.ag_multihead_attention(d, heads)
    q, kv = rnd(d, 3, 2), rnd(d, 4, 2)
    P = [p.numpy().astype(np.float64) for p in (mha.W_q, mha.W_k, mha.W_v, mha.W_o)]
    zeros = [np.zeros((d, 1))] * 3 + [mha.b_o.numpy().astype(np.float64)]
    check(lambda a, b: mha(a, b), lambda a, b: _mha_ref(a, P + zeros, heads, kv=b), q, kv, tol=5e-4)
    with pytest.raises(g.GGMLError, match="d_model"):
        mha(g.ag_tensor(rnd(5, 3)))
    with pytest.raises(g.GGMLError, match="causal"):
        mha(g.ag_tensor(q), g.ag_tensor(kv), causal_mask=True)  # more keys than queries


def test_attention_additive_mask_and_padding_mask_together():
    d, T, B = 4, 3, 2
    mha = g.ag_multihead_attention(d, 2)
    P = [p.numpy().astype(np.float64) for p in (mha.W_q, mha.W_k, mha.W_v, mha.W_o)] + \
        [np.zeros((d, 1))] * 3 + [mha.b_o.numpy().astype(np.float64)]
    x = rnd(d, T, B)
    pad = np.array([[0, 0], [0, 0], [0, 1]], bool)
    causal = np.where(np.arange(T)[:, None] > np.arange(T)[None, :], -np.inf, 0.0)
    got = mha(g.ag_tensor(x), attn_mask=g.ag_tensor(causal), key_padding_mask=pad).numpy()
    np.testing.assert_allclose(got, _mha_ref(x, P, 2, causal=True, pad=pad), atol=2e-5)


# -- compiled steps -------------------------------------------------------------------------------------------
def test_a_small_gpt_compiles_and_trains_like_its_eager_self():
    def run(compiled):
        g.manual_seed(3)
        model = g.ag_gpt(11, d_model=8, n_heads=2, n_layers=2, context=6)
        opt = g.optimizer_adamw(model.parameters(), lr=1e-2)
        data = [tuple(g.ag_tensor(rng2.integers(0, 11, (6, 3)), dtype="i32") for _ in range(2)) for _ in range(4)]
        if compiled:
            step = g.ag_compile(lambda x, y: model.loss(x, y), list(data[0]), optimizer=opt, clip_grad=0.5)
            return [step(*b) for b in data]
        losses = []
        for x, y in data:
            with g.with_grad_tape():
                loss = model.loss(x, y)
            grads = g.backward(loss)
            g.clip_grad_norm(opt.params, grads, 0.5)
            opt.step(grads)
            opt.zero_grad()
            losses.append(loss.item())
        return losses
    rng2 = np.random.default_rng(0)
    eager = run(False)
    rng2 = np.random.default_rng(0)
    compiled = run(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    assert compiled[-1] < compiled[0]


def test_compiled_steps_check_index_inputs_at_every_call():
    emb = g.ag_embedding(5, 3)
    opt = g.optimizer_sgd(emb.parameters(), lr=0.1)
    ok = g.ag_tensor(np.array([[0, 4], [1, 2]]), dtype="i32")
    step = g.ag_compile(lambda i: g.ag_sum(emb(i)), [ok], optimizer=opt)
    step(ok)
    before = emb.weight.numpy()
    with pytest.raises(g.GGMLError, match="indices must lie in 0..4"):
        step(g.ag_tensor(np.array([[0, 5], [1, 2]]), dtype="i32"))
    np.testing.assert_array_equal(emb.weight.numpy(), before)  # refused before anything ran


def test_compile_clip_grad_arguments():
    w = g.ag_param(rnd(2, 2))
    with pytest.raises(g.GGMLError, match="clip_grad"):
        g.ag_compile(lambda x: g.ag_sum(g.ag_matmul(w, x)), [rnd(2, 2)], g.optimizer_sgd([w], lr=0.1), clip_grad=0)
    with pytest.raises(g.GGMLError, match="give the optimizer"):
        g.ag_compile(lambda x: g.ag_sum(g.ag_matmul(w, x)), [rnd(2, 2)], clip_grad=1.0)


def test_gpt_demo_trains_saves_gguf_and_samples(tmp_path):
    from ggmlpy.cli import demo_gpt
    r = demo_gpt.train(steps=60, out_dir=str(tmp_path), progress=False, layers=1, batch=8, context=16)
    assert r["steps"] == 60 and np.mean(r["losses"][-10:]) < np.mean(r["losses"][:10])
    assert len(r["sample"]) == len("def ") + 240 and set(r["sample"]) <= set(demo_gpt.CHARS)
    assert r["val_losses"] and (r["png"] is None or (tmp_path / "char_gpt_loss.png").stat().st_size > 0)
    g.manual_seed(99)
    fresh = g.ag_gpt(len(demo_gpt.CHARS), d_model=128, n_heads=4, n_layers=1, context=16)
    g.ag_load_model(fresh, r["model_path"])
    idx = np.arange(16).reshape(16, 1)
    np.testing.assert_array_equal(fresh(idx).numpy(), r["model"](idx).numpy())  # the trained weights, read back


@pytest.mark.parametrize("heads,causal", [(1, False), (2, True), (4, True)])
def test_inference_attention_by_flash_attn_matches_the_training_path(heads, causal):
    """Outside a tape (no_grad, generation) attention runs as ggml's flash_attn_ext: same numbers."""
    d = 8
    mha = g.ag_multihead_attention(d, heads, causal=causal, qkv_bias=True)
    for p in (mha.b_q, mha.b_k, mha.b_v):
        p.data = rnd(*p.shape)
    pad = np.zeros((5, 3), bool)
    pad[3:, 1] = True
    for args, kw in (((rnd(d, 5, 3),), {"key_padding_mask": pad}), ((rnd(d, 5),), {}),
                     ((rnd(d, 4, 2), rnd(d, 3, 2)), {})):
        ts = [g.ag_tensor(a) for a in args]
        with g.with_grad_tape():
            want = mha(*ts, **kw).numpy()
        with g.no_grad():
            got = mha(*ts, **kw)
        assert got.shape == g.tensor.norm_shape(want.shape)
        np.testing.assert_allclose(got.numpy(), want, atol=2e-6)


def _batched_program():
    """Forward and backward of the batched ops together: values and gradients as numpy."""
    g.manual_seed(5)
    mha = g.ag_multihead_attention(8, 2, causal=True, qkv_bias=True)
    ln = g.ag_layer_norm_layer(8)
    emb = g.ag_embedding(11, 8)
    idx = g.ag_tensor(np.arange(12).reshape(4, 3) % 11, dtype="i32")
    w = g.ag_param(np.linspace(-1, 1, 16).reshape(2, 8))
    with g.with_grad_tape():
        h = ln(emb(idx, batched=True))                                   # [8, 4, 3]
        a = mha(h, key_padding_mask=np.array([[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]]))
        y = g.ag_gelu(g.ag_matmul(w, g.ag_add(a, h)))                   # [2, 4, 3]
        p = g.ag_permute(g.ag_reshape(y, 2, 4, 3), 2, 0, 1)              # [3, 2, 4]
        loss = g.ag_softmax_cross_entropy_loss(g.ag_softmax(p, scale=0.5, causal=False), np.zeros((2, 4), int))
    grads = g.backward(loss)
    params = list(mha.parameters()) + list(ln.parameters()) + [emb.weight, w]
    return [loss.numpy()] + [grads[q].numpy() for q in params if q in grads]


def test_batched_ops_on_each_device(device, tol):
    """The batched ops (embedding by index, layer norm, causal and padded attention, products,
    permute, softmax, class-index loss) forward and backward on the device, against the CPU."""
    got = _batched_program()
    prev = g.ag_device("cpu")
    try:
        want = _batched_program()
    finally:
        g.ag_device(prev)
    assert len(got) == len(want) > 10
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, **tol)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_slice_gradients_accumulate_in_place_and_stay_exact(dtype):
    """Per-sequence slices (the loop batched attention replaced): the backward adds each slice's
    gradient where it lies (in place where the walk owns the sum), overlapping slices and other
    uses included, and a gradient a rule hands to two inputs is never added into."""
    prev = g.ag_dtype(dtype)
    try:
        X = rnd(6, 40)
        x = g.ag_param(X)
        W = rnd(6, 5)
        with g.with_grad_tape():
            loss = None
            for i in range(8):
                term = g.ag_sum(g.ag_mul(g.ag_slice(x, None, slice(5 * i, 5 * i + 5)), g.ag_tensor(W * (i + 1))))
                loss = term if loss is None else g.ag_add(loss, term)
            over = g.ag_slice(x, None, slice(3, 17))
            loss = g.ag_add(loss, g.ag_sum(g.ag_mul(over, over)))
            y = g.ag_add(x, x)  # add's rule hands one gradient to both inputs
            loss = g.ag_add(loss, g.ag_add(g.ag_sum(y), g.ag_sum(g.ag_slice(y, None, slice(0, 39)))))
        got = g.backward(loss)[x].numpy().astype(np.float64)
    finally:
        g.ag_dtype(prev)
    want = np.concatenate([W * (i + 1) for i in range(8)], 1) + 4.0
    want[:, 39] -= 2.0  # the last column is outside the slice of y
    want[:, 3:17] += 2 * X[:, 3:17]
    tol = 1e-5 if dtype == "f32" else 2e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


def test_compiled_slice_gradients_add_in_place_like_eager():
    """ag_compile's rule-table backward adds slice gradients in place too, with the same numbers."""
    X, W = rnd(6, 40), rnd(6, 5)

    def run(compiled):
        x = g.ag_param(X.copy())
        opt = g.optimizer_sgd([x], lr=0.1)

        def step(w):
            loss = None
            for i in range(8):
                term = g.ag_sum(g.ag_mul(g.ag_slice(x, None, slice(5 * i, 5 * i + 5)), g.ag_scale(w, i + 1)))
                loss = term if loss is None else g.ag_add(loss, term)
            over = g.ag_slice(x, None, slice(3, 17))
            y = g.ag_add(x, x)
            return g.ag_add(g.ag_add(loss, g.ag_sum(g.ag_mul(over, over))),
                            g.ag_add(g.ag_sum(y), g.ag_sum(g.ag_slice(y, None, slice(0, 39)))))
        w = g.ag_tensor(W)
        if compiled:
            g.ag_compile(step, [w], opt, backward="rules")(w)
        else:
            with g.with_grad_tape():
                loss = step(w)
            opt.step(g.backward(loss))
        return x.numpy()
    np.testing.assert_allclose(run(True), run(False), rtol=1e-6, atol=1e-6)
    want = X - 0.1 * (np.concatenate([W * (i + 1) for i in range(8)], 1) + 4.0)
    want[:, 39] += 0.2
    want[:, 3:17] -= 0.1 * 2 * X[:, 3:17]
    np.testing.assert_allclose(run(True), want, rtol=1e-5, atol=1e-5)


def test_backward_as_one_graph_keeps_batched_gradient_shapes():
    """ag_backward_graph's gradients of batched tensors keep their shapes (they were cut to 2 dims)."""
    a, w = rnd(3, 4, 2), rnd(5, 3)
    results = []
    for graph in (False, True):
        x, W = g.ag_param(a), g.ag_param(w)
        with g.with_grad_tape():
            loss = g.ag_sum(g.ag_gelu(g.ag_matmul(W, x)))
        grads = g.ag_backward_graph(loss) if graph else g.backward(loss)
        results.append((grads[x].numpy(), grads[W].numpy()))
    assert results[1][0].shape == (3, 4, 2)
    for eager, graph in zip(*results):
        np.testing.assert_allclose(graph, eager, rtol=1e-5, atol=1e-6)
