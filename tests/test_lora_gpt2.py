"""LoRA on ag_gpt2 models, as on ag_llama (tests/test_lora.py): adapters on gpt2's projections
(attn_qkv, attn_output, ffn_up, ffn_down) under llama.cpp's names, the base frozen in its type,
merged, saved as llama.cpp's adapter file for architecture gpt2 and read back; llama.cpp with the
saved adapter computes ggmlpy's logits (tests/test_lora.py runs those cases, the adapter file's
format, its way back and the inference graph's for both families)."""
import numpy as np
import pytest

import ggmlpy as g

from test_llm_gpt2 import tiny_gpt2
from test_llm_load import TOKENS, nmse, tiny
from test_lora import _adapter, base_state, randomize_b, seqs, train_compiled

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")


def test_adapters_on_gpt2s_projections_are_the_only_parameters_and_get_the_gradients(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "q8_0")
    model = g.llm_load(path)
    before = g.llm_logits(model, TOKENS)
    assert g.ag_lora(model, rank=4, alpha=8) is model
    np.testing.assert_array_equal(g.llm_logits(model, TOKENS), before)  # lora_b starts at zero
    lp = g.lora_parameters(model)
    assert len(lp) == 2 * 4 * 2 and list(lp)[:2] == ["blk.0.attn_qkv.weight.lora_a", "blk.0.attn_qkv.weight.lora_b"]
    assert lp["blk.1.attn_qkv.weight.lora_a"].shape == (4, 64) and lp["blk.1.attn_qkv.weight.lora_b"].shape == (192, 4)
    assert lp["blk.0.ffn_down.weight.lora_a"].shape == (4, 96) and lp["blk.0.ffn_down.weight.lora_b"].shape == (64, 4)
    assert model.blocks[0].attn_qkv.base.qtype == "q8_0"
    assert {id(p) for p in model.parameters()} == {id(p) for p in lp.values()}
    randomize_b(model)
    s = seqs(40, 1, t=8)[0]
    with g.with_grad_tape():
        loss = model.loss(s[:-1], s[1:])
    grads = g.backward(loss)
    frozen = [model.blocks[0].attn_qkv.base.b, model.blocks[0].attn_norm.gamma, model.position_embd.weight]
    assert all(not p.requires_grad and p not in grads for p in frozen)
    assert all(np.any(grads[p].numpy()) for p in lp.values())


def test_only_the_targets_are_adapted_and_the_bias_stays(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "f32")
    model = g.ag_lora(g.llm_load(path), rank=2, alpha=6, targets="attn_qkv")
    assert sorted({n.split(".")[2] for n in g.lora_parameters(model)}) == ["attn_qkv"]
    randomize_b(model)
    h = g.ag_tensor(np.random.default_rng(1).normal(size=(64, 5)))
    proj = model.blocks[0].attn_qkv
    W, bias, A, B = proj.base.W.data, proj.base.b.data, proj.lora_a.data, proj.lora_b.data
    with g.no_grad():
        got = proj(h).data
    np.testing.assert_allclose(got, W @ h.data + bias + 3.0 * B @ (A @ h.data), rtol=1e-5, atol=1e-5)
    for targets in (["attn_q"], ["ffn_gate"]):  # llama's names are not gpt2's
        with pytest.raises(g.GGMLError, match="attn_qkv, attn_output, ffn_up, ffn_down"):
            g.ag_lora(g.llm_load(path), targets=targets)


def test_compiled_training_on_a_q8_0_base_moves_only_the_adapters(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4)
    before = base_state(model)
    assert len(before) == 2 * (4 * 2 + 2 * 2) + 5  # projections and biases, norms; embeddings, output norm, head
    losses = train_compiled(model, seqs(40, 6), 3)
    assert losses[-1] < losses[0] - 0.2
    after = base_state(model)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert model.blocks[0].attn_qkv.base.qtype == "q8_0"


def test_a_built_gpt2_takes_adapters_and_trains_eagerly():
    g.manual_seed(2)
    model = g.ag_lora(g.ag_gpt2(30, d_model=32, n_heads=4, n_layers=1, d_ff=64, context=16), rank=2)
    opt = g.optimizer_adam(model.parameters(), lr=3e-2)
    s = seqs(30, 1, t=12)[0]
    losses = []
    for _ in range(6):
        with g.with_grad_tape():
            loss = model.loss(s[:-1], s[1:])
        losses.append(float(loss.numpy().item()))
        opt.step(g.backward(loss))
    assert losses[-1] < losses[0]


# f32: the merged product rounds otherwise than W x + s B (A x), and GELU's f16 table can turn a last
# bit into an f16 step (up to 3.4e-9 measured over 12 draws of the adapters); q8_0: the merged weights
# are f32, and the products no longer quantize their activations (1.2e-4 to 1.3e-4 measured)
@pytest.mark.parametrize("qtype,bound", [("f32", 1e-7), ("q8_0", 1e-3)])
def test_merging_gives_the_adapted_gpt2_in_f32(tmp_path, qtype, bound):
    path, _ = tiny_gpt2(tmp_path, qtype)
    g.manual_seed(0)
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=2)
    randomize_b(model)
    adapted = g.llm_logits(model, TOKENS)
    assert g.lora_merge(model) is model and g.lora_parameters(model) == {}
    qkv = model.blocks[0].attn_qkv
    assert type(qkv) is g.nn.llama.LlamaProjection and qkv.W.storage.type == g.GGML_TYPE_F32 and qkv.W.requires_grad
    assert qkv.b.requires_grad
    frozen_in_a_type = 0 if qtype == "f32" else 2 * 4  # the merged projections, parameters now
    assert len(model.parameters()) == len(g.llm_load(path).parameters()) + frozen_in_a_type
    assert nmse(g.llm_logits(model, TOKENS), adapted) < bound


def test_an_adapter_goes_onto_its_own_family_and_layers_only(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "q8_0")
    out = g.llm_save_lora(g.ag_lora(g.llm_load(path), rank=4, targets="ffn_up"), tmp_path / "adapter.gguf")
    llama_path, _, _ = tiny(tmp_path, "f32")
    with pytest.raises(g.GGMLError, match="architecture 'gpt2', the model is 'llama'"):
        g.llm_load_lora(g.llm_load(llama_path), out)
    llama_adapter = g.llm_save_lora(g.ag_lora(g.llm_load(llama_path), rank=2), tmp_path / "llama-adapter.gguf")
    with pytest.raises(g.GGMLError, match="architecture 'llama', the model is 'gpt2'"):
        g.llm_load_lora(g.llm_load(path), llama_adapter)
    # llama.cpp would apply an adapter on the output head too; ggmlpy adapts the layers only
    a, b = np.zeros((2, 64)), np.zeros((40, 2))
    head = _adapter(tmp_path / "head.gguf", {"output.weight.lora_a": a, "output.weight.lora_b": b}, arch="gpt2")
    with pytest.raises(g.GGMLError, match=r"'output.weight'.*attn_qkv, attn_output, ffn_up, ffn_down"):
        g.llm_load_lora(g.llm_load(path), head)


def test_a_built_gpt2s_adapter_file_names_architecture_gpt2(tmp_path):
    g.manual_seed(3)
    model = g.ag_lora(g.ag_gpt2(30, d_model=32, n_heads=4, n_layers=1, d_ff=64, context=16), rank=2)
    with g.GGUFFile(g.llm_save_lora(model, tmp_path / "a.gguf")) as f:
        assert f.metadata["general.architecture"] == "gpt2"
