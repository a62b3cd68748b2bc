"""ag_quantize: frozen quantized ag_linear / ag_embedding weights, forward through ggml's quantized
kernels, gradients to the activations, biases still training (eagerly and compiled)."""
import contextlib

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.quant import dequantize

rng = np.random.default_rng(31)


def model_and_input():
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_linear(256, 64, "relu"), g.ag_linear(64, 10))
    return model, rng.standard_normal((256, 8))


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_K", "iq4_nl"])
def test_forward_matches_the_dequantized_weights(qtype):
    model, x = model_and_input()
    with pytest.warns(UserWarning, match="kept in floating point") if qtype == "q4_K" else contextlib.nullcontext():
        g.ag_quantize(model, qtype)
    l1, l2 = model.layers
    w1 = l1.Wt.numpy().T  # dequantized, R [out, in]
    if qtype == "q4_K":  # 64 inputs are not whole q4_K blocks: the second layer stays f32
        assert type(l2) is g.ag_linear
        w2 = l2.W.numpy()
    else:
        w2 = l2.Wt.numpy().T
    h = np.maximum(w1 @ x + l1.b.numpy(), 0)
    ref = w2 @ h + l2.b.numpy()
    out = model(g.ag_tensor(x)).numpy()
    # the activations go through q8 on the CPU: about 0.5 % of the largest output
    np.testing.assert_allclose(out, ref, rtol=0, atol=0.02 * np.abs(ref).max())
    assert l1.Wt.dtype == qtype and l1.qtype == qtype


def test_quantized_weight_holds_ggml_blocks():
    model, _ = model_and_input()
    w = model.layers[0].W.numpy()
    with pytest.warns(UserWarning, match="kept in floating point"):
        g.ag_quantize(model, "q4_K")
    expected = dequantize("q4_K", g.ggml_quantize_chunk("q4_K", w.astype(np.float32))).reshape(w.shape)
    assert np.array_equal(model.layers[0].Wt.numpy().T, expected)


def test_gradients_reach_the_activations_not_the_weights():
    model, x = model_and_input()
    g.ag_quantize(model, "q8_0")
    l1, l2 = model.layers
    assert [p.shape for p in model.parameters()] == [(64, 1), (10, 1)]  # biases only
    xt = g.ag_param(x)
    with g.with_grad_tape():
        y = model(xt)
        loss = g.ag_sum(g.ag_mul(y, y))
    grads = g.backward(loss)
    w1, w2 = l1.Wt.numpy().T, l2.Wt.numpy().T
    h = model.layers[0](g.ag_tensor(x)).numpy()
    gy = 2 * y.numpy()
    gh = (w2.T @ gy) * (h > 0)
    gx = w1.T @ gh
    np.testing.assert_allclose(grads[xt].numpy(), gx, rtol=1e-5, atol=1e-5 * np.abs(gx).max())
    np.testing.assert_allclose(grads[l2.b].numpy(), gy.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_biases_train_the_same_eagerly_and_compiled():
    x, y = rng.standard_normal((64, 16)), rng.standard_normal((4, 16))

    def make():
        g.manual_seed(0)
        m = g.ag_sequential(g.ag_linear(64, 32, "relu"), g.ag_linear(32, 4))
        return g.ag_quantize(m, "q4_0")

    model = make()
    opt = g.optimizer_adam(model.parameters(), lr=1e-2)
    for _ in range(5):
        with g.with_grad_tape():
            loss = g.ag_mse_loss(model(g.ag_tensor(x)), g.ag_tensor(y))
        opt.step(g.backward(loss))
        opt.zero_grad()
    model2 = make()
    opt2 = g.optimizer_adam(model2.parameters(), lr=1e-2)
    step = g.ag_compile(lambda xb, yb: g.ag_mse_loss(model2(xb), yb), [g.ag_tensor(x), g.ag_tensor(y)],
                        optimizer=opt2)
    for _ in range(5):
        step(g.ag_tensor(x), g.ag_tensor(y))
    for a, b in zip(model.parameters(), model2.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
    assert not np.allclose(model.layers[1].b.numpy(), 0)


def test_embedding_lookup_is_the_dequantized_table():
    g.manual_seed(0)
    emb = g.ag_embedding(20, 64)
    table = emb.weight.numpy()
    g.ag_quantize(emb, "q8_0")
    deq = emb.weight.numpy()
    assert np.array_equal(deq, dequantize("q8_0", g.ggml_quantize_chunk("q8_0", table.T.astype(np.float32)))
                          .reshape(20, 64).T)
    idx = np.array([3, 0, 19, 3])
    assert np.array_equal(emb(idx).numpy(), deq[:, idx])
    assert emb.parameters() == []


def test_state_dict_and_gguf_round_trip(tmp_path):
    model, x = model_and_input()
    g.ag_quantize(model, "q8_0")
    out = model(g.ag_tensor(x)).numpy()
    state = model.state_dict()
    assert sorted(state) == ["layer1_Wt", "layer1_b", "layer2_Wt", "layer2_b"]
    path = g.ag_save_model(model, tmp_path / "q.gguf")
    fresh, _ = model_and_input()
    g.ag_quantize(fresh, "q8_0")
    g.ag_load_model(fresh, path)
    # q8_0 re-quantizes its own dequantized values exactly: the same blocks, the same outputs
    np.testing.assert_array_equal(fresh(g.ag_tensor(x)).numpy(), out)


@pytest.mark.parametrize("qtype", ["q4_K", "iq4_xs", "q2_0"])
def test_ag_save_model_writes_the_blocks(tmp_path, qtype):
    def make(seed):
        g.manual_seed(seed)
        return g.ag_quantize(g.ag_sequential(g.ag_linear(256, 256, "relu"), g.ag_embedding(10, 256)), qtype)
    model = make(0)
    path = g.ag_save_model(model, tmp_path / "q.gguf")
    with g.gguf_load(path) as f:
        info = g.gguf_tensor_info(f, "layer1_Wt")
        # q2_0 is newer than the gguf package's type list: written as f32 values
        assert info["type"] == (qtype if qtype != "q2_0" else "f32") and info["shape"] == [256, 256]
        if qtype != "q2_0":
            blocks = g.gguf_tensor_data(f, "layer1_Wt", raw=True).reshape(-1)
            w = model.layers[0].Wt
            assert np.array_equal(dequantize(qtype, blocks).reshape(256, 256).T, w.numpy())
    fresh = make(5)
    g.ag_load_model(fresh, path)
    a, b = model.state_dict(), fresh.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    if qtype != "q2_0":  # a float model cannot take quantized weights: the error says what to do
        with pytest.raises(g.GGMLError, match=rf"quantize the model the same way \(ag_quantize\(model, '{qtype}'"):
            g.ag_load_model(g.ag_sequential(g.ag_linear(256, 256, "relu"), g.ag_embedding(10, 256)), path)


def test_what_cannot_be_quantized():
    model, _ = model_and_input()
    with pytest.warns(UserWarning, match=r"ag_linear\(64, 10\) kept in floating point"):
        g.ag_quantize(model, "q4_K")
    with pytest.raises(g.GGMLError, match="not a quantized type"):
        g.ag_quantize(model_and_input()[0], "f16")
    with pytest.raises(g.GGMLError, match="importance matrix"):
        g.ag_quantize(model_and_input()[0], "iq2_xxs")
    with pytest.raises(g.GGMLError, match="expected a model"):
        g.ag_quantize(np.zeros(3), "q8_0")
    with pytest.raises(g.GGMLError, match="no ag_linear or ag_embedding"):
        g.ag_quantize(g.ag_dropout(0.1), "q8_0")
