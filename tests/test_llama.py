"""The llama family: RMSNorm and rotary embeddings (ag_rms_norm, ag_rope; their forward, gradients
and tangents are in op_cases' table with every other primitive), and the model, against the numpy
reference in llama_reference.py."""
import numpy as np
import pytest

import ggmlpy as g

from llama_reference import llama_forward, rms_norm, rope

rng = np.random.default_rng(11)


def test_rope_at_i32_positions_equals_integer_positions_and_the_reference():
    x = rng.standard_normal((8, 3, 5, 2))
    pos = [4, 9, 0, 2, 30]
    want = rope(x, pos, mode=0, freq_base=500.0)
    as_list = g.ag_rope(g.ag_tensor(x), pos, freq_base=500.0).numpy()
    as_i32 = g.ag_rope(g.ag_tensor(x), g.ag_tensor(np.array(pos).reshape(5, 1), dtype="i32"), freq_base=500.0).numpy()
    np.testing.assert_allclose(as_list, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(as_i32, as_list)


def test_rope_modes_differ_and_normal_mode_on_permuted_rows_is_neox():
    """llama.cpp's conversion reorders each head's rows so that its "normal" pairs (2i, 2i+1) hold
    what Hugging Face's halves (i, i + d/2) held: the same rotation, read in another order."""
    hd = 8
    x = rng.standard_normal((hd, 2, 4))
    neox = g.ag_rope(g.ag_tensor(x), mode=2).numpy()
    normal = g.ag_rope(g.ag_tensor(x), mode=0).numpy()
    assert np.abs(neox - normal).max() > 0.1
    order = np.arange(hd).reshape(2, hd // 2).T.ravel()  # row 2i <- i, row 2i+1 <- i + hd/2
    np.testing.assert_allclose(g.ag_rope(g.ag_tensor(x[order]), mode=0).numpy(), neox[order], rtol=1e-5, atol=1e-6)


def test_rms_norm_with_gamma_and_batch_axes():
    x, gamma = rng.standard_normal((6, 4, 3)), rng.standard_normal((6, 1))
    np.testing.assert_allclose(g.ag_rms_norm(g.ag_tensor(x), 1e-6, g.ag_tensor(gamma)).numpy(),
                               rms_norm(x, 1e-6, gamma[:, 0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(pos=[1, 2]), "pos must hold 4"),
    (dict(pos=[0.5, 1, 2, 3]), "pos must hold 4 integer"),
    (dict(n_dims=3), "n_dims must be an even integer"),
    (dict(n_dims=8), "n_dims must be an even integer"),
    (dict(mode=1), "mode must be 0"),
    (dict(freq_base=float("nan")), "freq_base must be a finite number"),
    (dict(n_ctx_orig=-1), "n_ctx_orig"),
])
def test_rope_argument_errors(kwargs, match):
    with pytest.raises(g.GGMLError, match=match):
        g.ag_rope(g.ag_tensor(rng.standard_normal((6, 2, 4))), **kwargs)


def test_rope_and_rms_norm_shape_errors():
    with pytest.raises(g.GGMLError, match="ag_rope: x must be"):
        g.ag_rope(g.ag_tensor(np.ones((4, 3))))
    with pytest.raises(g.GGMLError, match="i32 positions"):
        g.ag_rope(g.ag_tensor(np.ones((4, 1, 2))), g.ag_tensor(np.ones((2, 1))))
    with pytest.raises(g.GGMLError, match="eps"):
        g.ag_rms_norm(g.ag_tensor(np.ones((4, 3))), -1.0)


# -- the model ----------------------------------------------------------------------------------------
def reference_params(model):
    """The model's weights as llama_reference.llama_forward takes them."""
    def w(p):
        return p.W.numpy()
    return {"tok_embd": model.token_embd.weight.numpy(),
            "output_norm": model.output_norm.weight.numpy()[:, 0],
            "output": None if model.output is None else w(model.output),
            "layers": [{"attn_norm": b.attn_norm.weight.numpy()[:, 0], "wq": w(b.attn_q), "wk": w(b.attn_k),
                        "wv": w(b.attn_v), "wo": w(b.attn_output), "ffn_norm": b.ffn_norm.weight.numpy()[:, 0],
                        "w_gate": w(b.ffn_gate), "w_up": w(b.ffn_up), "w_down": w(b.ffn_down)}
                       for b in model.blocks]}


def randomized(model, scale=0.3):
    """Weights far from their small initial values, norms away from 1: every part of the model
    changes the logits visibly."""
    for p in model.parameters():
        p.data = p.numpy() + rng.normal(0.0, scale, size=p.shape)
    return model


LLAMAS = [  # (n_heads, n_kv_heads, tied, rope_mode)
    (4, 4, False, 0),
    (4, 2, False, 0),   # grouped-query attention
    (4, 1, True, 0),    # one key/value head, tied head
    (2, 2, False, 2),   # NeoX rotation
]


@pytest.mark.parametrize("n_heads,n_kv_heads,tied,mode", LLAMAS)
def test_llama_forward_matches_the_numpy_reference(n_heads, n_kv_heads, tied, mode):
    g.manual_seed(3)
    model = randomized(g.ag_llama(13, d_model=16, n_heads=n_heads, n_kv_heads=n_kv_heads, n_layers=2, d_ff=24,
                                  rope_base=1000.0, rope_mode=mode, eps=1e-6, tied=tied))
    p = reference_params(model)
    seqs = rng.integers(0, 13, size=(7, 3))
    got = model(seqs).numpy()  # [vocab, T, B]
    assert got.shape == (13, 7, 3)
    for b in range(3):
        want = llama_forward(p, seqs[:, b], n_heads, n_kv_heads, eps=1e-6, freq_base=1000.0, mode=mode)
        np.testing.assert_allclose(got[:, :, b], want, rtol=2e-4, atol=2e-4)
    one = model(seqs[:, 0]).numpy()  # a single sequence [T]
    np.testing.assert_allclose(one, got[:, :, 0], rtol=1e-5, atol=1e-5)


def test_llama_attention_is_causal_and_groups_consecutive_query_heads():
    g.manual_seed(4)
    model = randomized(g.ag_llama(11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=1, d_ff=16))
    seq = rng.integers(0, 11, size=6)
    full = model(seq).numpy()
    np.testing.assert_allclose(model(seq[:4]).numpy(), full[:, :4], rtol=1e-5, atol=1e-5)
    p = reference_params(model)
    np.testing.assert_allclose(full, llama_forward(p, seq, 4, 2), rtol=2e-4, atol=2e-4)
    # the other grouping (query head i on key/value head i % n_kv_heads) gives other logits
    assert np.abs(full - llama_forward(p, seq, 4, 2, kv_head_of=lambda i: i % 2)).max() > 1e-2


def _training_run(compiled: bool, steps: int = 6):
    g.manual_seed(5)
    model = g.ag_llama(17, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=32)
    opt = g.optimizer_adamw(model.parameters(), lr=1e-2)
    data_rng = np.random.default_rng(1)
    seqs = data_rng.integers(0, 17, size=(9, 4))
    x = g.ag_tensor(seqs[:-1], dtype="i32")
    y = g.ag_tensor(seqs[1:], dtype="i32")
    if compiled:
        step = g.ag_compile(lambda a, b: model.loss(a, b), [x, y], optimizer=opt)
        return [step(x, y) for _ in range(steps)], model
    losses = []
    for _ in range(steps):
        with g.with_grad_tape():
            loss = model.loss(x, y)
        opt.step(g.backward(loss))
        opt.zero_grad()
        losses.append(loss.item())
    return losses, model


def test_llama_training_steps_lower_the_loss_and_compiled_steps_follow_eager_ones():
    eager, m1 = _training_run(False)
    compiled, m2 = _training_run(True)
    assert eager[-1] < eager[0] - 0.1
    np.testing.assert_allclose(compiled, eager, rtol=1e-4)
    for (n, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-3, atol=1e-5, err_msg=n)


def test_llama_gradients_match_finite_differences():
    g.manual_seed(6)
    model = randomized(g.ag_llama(7, d_model=8, n_heads=2, n_kv_heads=1, n_layers=1, d_ff=8), 0.2)
    seqs = rng.integers(0, 7, size=(5, 2))
    params = [model.blocks[0].attn_q.W, model.blocks[0].attn_k.W, model.blocks[0].ffn_gate.W,
              model.blocks[0].attn_norm.weight]
    ok, errs = g.ag_gradcheck(lambda: model.loss(seqs[:-1], seqs[1:]), params, atol=2e-3, return_errors=True)
    assert ok, errs


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_heads=3), "must divide d_model"),
    (dict(n_heads=4, n_kv_heads=3), "n_kv_heads 3 must divide"),
    (dict(n_heads=8), "heads of even size"),
    (dict(rope_mode=1), "rope_mode"),
    (dict(n_layers=0), "n_layers must be a positive integer"),
])
def test_llama_argument_errors(kwargs, match):
    with pytest.raises(g.GGMLError, match=match):
        g.ag_llama(10, **{"d_model": 8, **kwargs})


def test_a_saved_llama_loads_without_a_model_function(tmp_path):
    g.manual_seed(7)
    model = randomized(g.ag_llama(9, d_model=8, n_heads=2, n_kv_heads=1, n_layers=1, d_ff=8, tied=True))
    seq = rng.integers(0, 9, size=5)
    g.ag_save_model(model, str(tmp_path / "m.json"))
    back = g.ag_load_model(str(tmp_path / "m.json"))
    assert isinstance(back, g.ag_llama) and back.tied
    np.testing.assert_array_equal(back(seq).numpy(), model(seq).numpy())
