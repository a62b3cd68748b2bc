"""LoRA on ag_gpt2 models, as on ag_llama (tests/test_lora.py): adapters on gpt2's projections
(attn_qkv, attn_output, ffn_up, ffn_down) under llama.cpp's names, the base frozen in its type,
merged, saved as llama.cpp's adapter file for architecture gpt2 and read back; llama.cpp with the
saved adapter computes ggmlpy's logits."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.quant.ag import stored_blocks

from llama_cpp_ref import llama_cpp_logits, require_llama_cpp
from test_llm_gpt2 import tiny_gpt2
from test_llm_load import TOKENS, forward_logits, nmse
from test_lora import randomize_b, seqs

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")

PROJ = ("attn_qkv", "attn_output", "ffn_up", "ffn_down")


def base_state(model):
    """Every weight the model held before ag_lora, its bytes by name (biases and norms included)."""
    out = {}
    for i, b in enumerate(model.blocks):
        for p in PROJ:
            proj = getattr(b, p)
            proj = getattr(proj, "base", proj)
            out[f"{i}.{p}"] = stored_blocks(proj.Wt if hasattr(proj, "Wt") else proj.W)
            out[f"{i}.{p}.bias"] = stored_blocks(proj.b)
        for name in ("attn_norm", "ffn_norm"):
            norm = getattr(b, name)
            out[f"{i}.{name}"] = np.concatenate([stored_blocks(norm.gamma), stored_blocks(norm.beta)])
    out["embd"] = stored_blocks(model.token_embd.weight)
    out["pos"] = stored_blocks(model.position_embd.weight)
    return out


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
    data = seqs(40, 6)
    xb, yb = g.ag_tensor(data[0][:-1], dtype="i32"), g.ag_tensor(data[0][1:], dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb],
                        optimizer=g.optimizer_adamw(model.parameters(), lr=1e-2))
    losses = [step(g.ag_tensor(s[:-1], dtype="i32"), g.ag_tensor(s[1:], dtype="i32")) for s in data * 3]
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


@pytest.mark.parametrize("qtype,bound", [("f32", 1e-10), ("q8_0", 1e-3)])
def test_merging_gives_the_adapted_gpt2_in_f32(tmp_path, qtype, bound):
    path, _ = tiny_gpt2(tmp_path, qtype)
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


def test_the_gpt2_adapter_file_and_its_way_back(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8, targets=("attn_qkv", "ffn_up"))
    randomize_b(model)
    out = g.llm_save_lora(model, tmp_path / "adapter.gguf")
    with g.GGUFFile(out) as f:
        assert (f.metadata["general.type"], f.metadata["adapter.type"], f.metadata["general.architecture"]) == \
            ("adapter", "lora", "gpt2")
        assert f.metadata["adapter.lora.alpha"] == 8.0
        assert sorted(f.tensors) == sorted(g.lora_parameters(model))
        assert f.info("blk.1.attn_qkv.weight.lora_a").ne == [64, 4]    # [in, rank]
        assert f.info("blk.1.attn_qkv.weight.lora_b").ne == [4, 192]   # [rank, out]
    back = g.llm_load_lora(g.llm_load(path), out)
    np.testing.assert_array_equal(g.llm_logits(back, TOKENS), g.llm_logits(model, TOKENS))
    assert sorted(g.lora_parameters(back)) == sorted(g.lora_parameters(model))
    assert {id(p) for p in back.parameters()} == {id(p) for p in g.lora_parameters(back).values()}
    # an adapter for one family does not go onto the other
    from test_llm_load import tiny
    llama_path, _, _ = tiny(tmp_path, "f32")
    with pytest.raises(g.GGMLError, match="architecture 'gpt2', the model is 'llama'"):
        g.llm_load_lora(g.llm_load(llama_path), out)
    llama_adapter = g.llm_save_lora(g.ag_lora(g.llm_load(llama_path), rank=2), tmp_path / "llama-adapter.gguf")
    with pytest.raises(g.GGMLError, match="architecture 'llama', the model is 'gpt2'"):
        g.llm_load_lora(g.llm_load(path), llama_adapter)


def test_a_built_gpt2s_adapter_file_names_architecture_gpt2(tmp_path):
    g.manual_seed(3)
    model = g.ag_lora(g.ag_gpt2(30, d_model=32, n_heads=4, n_layers=1, d_ff=64, context=16), rank=2)
    with g.GGUFFile(g.llm_save_lora(model, tmp_path / "a.gguf")) as f:
        assert f.metadata["general.architecture"] == "gpt2"


def test_the_inference_graph_adds_the_adapters_as_the_forward_does(tmp_path):
    path, _ = tiny_gpt2(tmp_path, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8)
    randomize_b(model)
    got = g.llm_logits(model, TOKENS)
    assert nmse(got, forward_logits(model, TOKENS)) < 1e-10
    assert nmse(got, g.llm_logits(g.llm_load(path), TOKENS)) > 1e-3  # the adapters are in it
    seq = list(TOKENS)
    for _ in range(5):
        seq.append(int(forward_logits(model, seq)[-1].argmax()))
    assert g.llm_generate(model, TOKENS, max_new_tokens=5).tolist() == seq[len(TOKENS):]


# -- against llama.cpp -----------------------------------------------------------------------------
@pytest.mark.parametrize("qtype,targets", [("q8_0", PROJ), ("f32", ("attn_qkv", "ffn_down")),
                                           ("f16", ("attn_output", "ffn_up"))])
def test_llama_cpp_with_the_gpt2_adapter_gives_ggmlpys_logits(tmp_path, qtype, targets):
    require_llama_cpp()
    path, _ = tiny_gpt2(tmp_path, qtype)
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8, targets=targets)
    randomize_b(model)
    got = g.llm_logits(model, TOKENS)
    want = llama_cpp_logits(path, TOKENS, lora=g.llm_save_lora(model, tmp_path / "adapter.gguf"))
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
    assert nmse(g.llm_logits(g.llm_load(path), TOKENS), want) > 1e-3  # the adapter changes the model


def test_a_trained_gpt2_adapter_and_its_merged_model_run_in_llama_cpp(tmp_path):
    require_llama_cpp()
    path, _ = tiny_gpt2(tmp_path, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4)
    data = seqs(40, 4)
    xb, yb = g.ag_tensor(data[0][:-1], dtype="i32"), g.ag_tensor(data[0][1:], dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb],
                        optimizer=g.optimizer_adamw(model.parameters(), lr=1e-2))
    for s in data * 2:
        step(g.ag_tensor(s[:-1], dtype="i32"), g.ag_tensor(s[1:], dtype="i32"))
    got = g.llm_logits(model, TOKENS)
    want = llama_cpp_logits(path, TOKENS, lora=g.llm_save_lora(model, tmp_path / "adapter.gguf"))
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
    merged = g.llm_save(g.lora_merge(model), tmp_path / "merged.gguf")
    assert nmse(g.llm_logits(model, TOKENS), llama_cpp_logits(merged, TOKENS)) < 1e-5
