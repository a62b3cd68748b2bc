"""Architecture `gpt2`: llm_load / llm_logits on tiny random files (written with the gguf package)
against the numpy reference and against llama.cpp itself; ag_gpt2 and its GELU (ggml_gelu's tanh
form) train."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.autograd.engine import apply

from gpt2_files import ggml_gelu, gelu_tanh, gpt2_forward, gpt2_weights, write_gpt2
from llama_cpp_ref import llama_cpp_logits, require_llama_cpp
from test_llm_load import TOKENS, nmse

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")


def tiny_gpt2(tmp_path, qtype, d=64, tied=False, n_head=4, n_head_kv=None, seed=0, context=16):
    rng = np.random.default_rng(seed)
    kv = None if n_head_kv is None else d // n_head * n_head_kv
    p = gpt2_weights(rng, 40, d, 2, d if d == 256 else 96, context, tied, n_kv=kv)
    path = tmp_path / f"gpt2-{qtype}.gguf"
    return path, write_gpt2(path, p, n_head, qtype, n_head_kv=n_head_kv)


def test_f32_file_equals_the_reference_with_ggml_gelu(tmp_path):
    """ggml_gelu on the CPU rounds through f16 (its table): the reference that rounds likewise is
    met to float32's precision, the unrounded tanh form only to the table's."""
    path, stored = tiny_gpt2(tmp_path, "f32")
    model = g.llm_load(path)
    assert isinstance(model, g.ag_gpt2) and model.hparams.arch == "gpt2" and not model.tied
    got = g.llm_logits(model, TOKENS)
    assert got.shape == (len(TOKENS), 40)
    assert nmse(got, gpt2_forward(stored, TOKENS, 4).T) < 1e-11
    assert nmse(got, gpt2_forward(stored, TOKENS, 4, gelu=gelu_tanh).T) > 1e-10


# bounds: some five times the measured error of the activations' conversion (f16 1.4e-7, q8_0
# 8.8e-5, q4_K 2.2e-4), as tests/test_llm_load.py's for llama
@pytest.mark.parametrize("qtype,bound,d,tied", [("f16", 1e-6, 64, True), ("q8_0", 5e-4, 64, False),
                                                ("q4_K", 1e-3, 256, False)])
def test_typed_files_match_the_reference_on_the_stored_weights(tmp_path, qtype, bound, d, tied):
    path, stored = tiny_gpt2(tmp_path, qtype, d=d, tied=tied)
    model = g.llm_load(path)
    assert model.blocks[0].attn_qkv.qtype == qtype and model.token_embd.qtype == qtype
    got = g.llm_logits(model, TOKENS)
    want = gpt2_forward(stored, TOKENS, 4).T
    assert nmse(got, want) < bound
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.9


@pytest.mark.parametrize("qtype,d,tied,n_head_kv", [("f32", 64, False, None), ("f32", 64, True, 2),
                                                    ("f16", 64, True, None), ("q8_0", 64, False, None),
                                                    ("q4_K", 256, False, None)])
def test_llm_logits_equal_llama_cpp(tmp_path, qtype, d, tied, n_head_kv):
    require_llama_cpp()
    path, _ = tiny_gpt2(tmp_path, qtype, d=d, tied=tied, n_head_kv=n_head_kv)
    want = llama_cpp_logits(path, TOKENS)
    got = g.llm_logits(g.llm_load(path), TOKENS)
    assert got.shape == want.shape
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))


def test_gelu_tanh_values_and_derivatives():
    """Forward: ggml's f16 table. VJP and JVP: the tanh form's derivative (finite differences
    would only see the table's steps)."""
    x0 = np.linspace(-4, 4, 24).reshape(6, 4)
    x = g.ag_param(x0)
    with g.with_grad_tape():
        y = apply("gelu_tanh", x)
        loss = g.ag_sum(y)
    np.testing.assert_allclose(y.numpy(), ggml_gelu(x0), rtol=0, atol=1e-6)
    k, a = np.sqrt(2 / np.pi), 0.044715
    t = np.tanh(k * (x0 + a * x0 ** 3))
    deriv = 0.5 * (1 + t) + 0.5 * k * x0 * (1 - t * t) * (1 + 3 * a * x0 ** 2)
    np.testing.assert_allclose(g.backward(loss)[x].numpy(), deriv, rtol=1e-5, atol=1e-6)
    h = 1e-6  # the formula itself, against central differences of the unrounded tanh form
    np.testing.assert_allclose((gelu_tanh(x0 + h) - gelu_tanh(x0 - h)) / (2 * h), deriv, rtol=1e-6, atol=1e-9)
    _, tangent = g.jvp(lambda v: apply("gelu_tanh", v), [g.ag_tensor(x0)], [np.ones_like(x0)])
    np.testing.assert_allclose(tangent.numpy(), deriv, rtol=1e-5, atol=1e-6)


def test_gpt2_trains_eagerly_and_compiled():
    g.manual_seed(3)
    model = g.ag_gpt2(30, d_model=32, n_heads=4, n_layers=2, d_ff=64, context=16)
    seq = np.random.default_rng(4).integers(0, 30, size=(13, 4))
    xb, yb = g.ag_tensor(seq[:-1], dtype="i32"), g.ag_tensor(seq[1:], dtype="i32")
    opt = g.optimizer_adamw(model.parameters(), lr=3e-3)
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb], optimizer=opt)
    losses = [step(xb, yb) for _ in range(6)]
    assert losses[-1] < losses[0]
    with g.with_grad_tape():
        loss = model.loss(xb, yb)
    grads = g.backward(loss)
    assert all(grads[p] is not None for p in model.parameters())


def test_hyper_parameters_and_refusals(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "f32", tied=True)
    model = g.llm_load(path)
    h = model.hparams
    assert (h.arch, h.d_model, h.n_layers, h.n_heads, h.context, h.rope_mode, h.tied) == \
        ("gpt2", 64, 2, 4, 16, None, True)
    with pytest.raises(g.GGMLError, match="exceed the context of 16"):
        g.llm_logits(model, list(range(17)))
    import gguf
    r = gguf.GGUFReader(str(path))
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "gpt2")
    for field in r.fields.values():
        if not field.name.startswith("GGUF.") and field.name != "general.architecture":
            w.add_key_value(field.name, field.contents(), field.types[0],
                            sub_type=field.types[-1] if len(field.types) > 1 else None)
    for t in r.tensors:
        if t.name != "blk.1.ffn_up.bias":
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed(t.shape.tolist())),
                         raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(g.GGMLError, match="no tensor 'blk.1.ffn_up.bias'"):
        g.llm_load(tmp_path / "bad.gguf")


def test_a_saved_gpt2_loads_without_a_model_function(tmp_path):
    g.manual_seed(5)
    model = g.ag_gpt2(11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=1, d_ff=24, context=8, tied=False)
    seq = np.random.default_rng(6).integers(0, 11, size=6)
    g.ag_save_model(model, str(tmp_path / "m.json"))
    back = g.ag_load_model(str(tmp_path / "m.json"))
    assert isinstance(back, g.ag_gpt2) and not back.tied and back.blocks[0].n_kv_heads == 2
    np.testing.assert_array_equal(back(seq).numpy(), model(seq).numpy())


@pytest.mark.parametrize("kwargs,match", [(dict(n_heads=3), "must divide d_model"),
                                          (dict(n_heads=4, n_kv_heads=3), "must divide n_heads"),
                                          (dict(context=0), "context"), (dict(n_layers=1.5), "n_layers")])
def test_gpt2_argument_errors(kwargs, match):
    with pytest.raises(g.GGMLError, match=match):
        g.ag_gpt2(10, **{"d_model": 8, **kwargs})
