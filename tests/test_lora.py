"""LoRA on ag_llama models (ag_lora, lora_parameters, lora_merge, llm_save_lora): adapters train
with the optimizers, ag_fit and compiled steps while the base weights stay frozen in their type;
llama.cpp with the saved adapter computes ggmlpy's logits, for llama and gpt2 bases (gpt2's other
cases: tests/test_lora_gpt2.py)."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.quant.ag import stored_blocks

from llama_cpp_ref import llama_cpp_logits, require_llama_cpp
from test_llm_gpt2 import tiny_gpt2
from test_llm_load import TOKENS, forward_logits, nmse, tiny

gguf = pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")

PROJ = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
GPT2_PROJ = ("attn_qkv", "attn_output", "ffn_up", "ffn_down")


def base_file(tmp_path, family, qtype):
    """The path of a tiny llama.cpp model file of the family ("llama" or "gpt2"), weights in qtype."""
    return tiny(tmp_path, qtype)[0] if family == "llama" else tiny_gpt2(tmp_path, qtype)[0]


def seqs(vocab, steps, t=16, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=(t + 1, batch)) for _ in range(steps)]


def randomize_b(model, seed=0, std=0.1):
    """lora_b away from its zero start, so that every adapter changes the model."""
    rng = np.random.default_rng(seed)
    for name, p in g.lora_parameters(model).items():
        if name.endswith(".lora_b"):
            p.data = rng.normal(0.0, std, p.shape)


def base_state(model):
    """The bytes of every tensor the model holds but its adapters (weights in their stored type,
    norms, biases, embeddings), by its place in the model (layer indices as children() orders them)."""
    adapters = {id(p) for p in g.lora_parameters(model).values()}
    out = {}

    def walk(module, prefix):
        for name, value in module.__dict__.items():
            if isinstance(value, g.AGTensor) and id(value) not in adapters:
                out[prefix + name] = stored_blocks(value)
        for i, child in enumerate(module.children()):
            walk(child, f"{prefix}{i}.")
    walk(model, "")
    return out


def train_compiled(model, data, rounds):
    """The losses of a compiled AdamW step (lr 1e-2) of the model's loss, run `rounds` times over
    the sequences `data`, each [T + 1, B]."""
    xb, yb = g.ag_tensor(data[0][:-1], dtype="i32"), g.ag_tensor(data[0][1:], dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb],
                        optimizer=g.optimizer_adamw(model.parameters(), lr=1e-2))
    return [step(g.ag_tensor(s[:-1], dtype="i32"), g.ag_tensor(s[1:], dtype="i32")) for s in data * rounds]


@pytest.mark.parametrize("qtype", ["f32", "q8_0"])
def test_adapters_start_as_the_base_model_and_are_the_only_parameters(tmp_path, qtype):
    path, _, _ = tiny(tmp_path, qtype)
    model = g.llm_load(path)
    before = g.llm_logits(model, TOKENS)
    assert g.ag_lora(model, rank=4, alpha=8) is model
    np.testing.assert_array_equal(g.llm_logits(model, TOKENS), before)
    lp = g.lora_parameters(model)
    assert len(lp) == 2 * 7 * 2 and list(lp)[:2] == ["blk.0.attn_q.weight.lora_a", "blk.0.attn_q.weight.lora_b"]
    assert lp["blk.1.attn_k.weight.lora_a"].shape == (4, 64) and lp["blk.1.attn_k.weight.lora_b"].shape == (32, 4)
    assert lp["blk.0.ffn_down.weight.lora_a"].shape == (4, 96) and lp["blk.0.ffn_down.weight.lora_b"].shape == (64, 4)
    assert {id(p) for p in model.parameters()} == {id(p) for p in lp.values()}
    assert all(p.requires_grad for p in lp.values())
    assert not np.any(lp["blk.0.attn_q.weight.lora_b"].numpy())


def test_only_the_targets_are_adapted_and_alpha_scales_them(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    model = g.ag_lora(g.llm_load(path), rank=2, alpha=6, targets=["attn_q", "ffn_down"])
    assert sorted({n.split(".")[2] for n in g.lora_parameters(model)}) == ["attn_q", "ffn_down"]
    randomize_b(model)
    h = g.ag_tensor(np.random.default_rng(1).normal(size=(64, 5)))
    proj = model.blocks[0].attn_q
    W, A, B = proj.base.W.data, proj.lora_a.data, proj.lora_b.data
    with g.no_grad():
        got = proj(h).data
    np.testing.assert_allclose(got, W @ h.data + 3.0 * B @ (A @ h.data), rtol=1e-5, atol=1e-5)


def test_adapter_gradients_match_finite_differences():
    g.manual_seed(4)
    model = g.ag_llama(7, d_model=8, n_heads=2, n_kv_heads=1, n_layers=1, d_ff=8)
    for p in model.parameters():
        p.data = np.random.default_rng(p.size).normal(0, 0.3, p.shape) + (1 if p.shape[1] == 1 else 0)
    g.ag_lora(model, rank=2, alpha=3)
    randomize_b(model, std=0.3)
    s = seqs(7, 1, t=5, batch=2)[0]
    ok, errs = g.ag_gradcheck(lambda: model.loss(s[:-1], s[1:]), list(g.lora_parameters(model).values()),
                              atol=2e-3, return_errors=True)
    assert ok, errs


def test_a_quantized_base_gives_the_gradients_of_its_dequantized_weights(tmp_path):
    """Through a q8_0 base the adapters get the gradients the same model with the dequantized
    weights in f32 gives them, but for q8_0's quantizing of the activations in the forward products."""
    path, _, _ = tiny(tmp_path, "q8_0")
    q = g.llm_load(path)
    f = g.llm_load(g.llm_save(q, tmp_path / "f32.gguf", dtype="f32"))
    grads = []
    for model in (q, f):
        g.manual_seed(5)
        g.ag_lora(model, rank=4)
        randomize_b(model)
        s = seqs(40, 1)[0]
        with g.with_grad_tape():
            loss = model.loss(s[:-1], s[1:])
        gr = g.backward(loss)
        grads.append({n: gr[p].numpy() for n, p in g.lora_parameters(model).items()})
    for name in grads[0]:
        a, b = grads[0][name], grads[1][name]
        assert np.linalg.norm(a - b) < 0.03 * np.linalg.norm(b), name


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "f16", "f32"])
def test_compiled_training_moves_only_the_adapters(tmp_path, qtype):
    path, _, _ = tiny(tmp_path, qtype)
    model = g.ag_lora(g.llm_load(path), rank=4)
    before = base_state(model)
    assert len(before) == 2 * (7 + 2) + 3  # projections, norms; embedding, output norm and head
    losses = train_compiled(model, seqs(40, 6), 3)
    assert losses[-1] < losses[0] - 0.2
    after = base_state(model)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    if qtype != "f32":
        assert model.blocks[0].attn_q.base.qtype == qtype


def test_eager_steps_and_ag_fit_train_the_adapters(tmp_path):
    path, _, _ = tiny(tmp_path, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4, targets=("attn_q", "attn_v"))
    before = base_state(model)
    opt = g.optimizer_adam(model.parameters(), lr=1e-2)
    s = seqs(40, 1)[0]
    with g.with_grad_tape():
        loss = model.loss(s[:-1], s[1:])
    opt.step(g.backward(loss))
    assert np.any(g.lora_parameters(model)["blk.0.attn_q.weight.lora_b"].numpy())
    batches = [(g.ag_tensor(x[:-1], dtype="i32"), g.ag_tensor(x[1:], dtype="i32")) for x in seqs(40, 4)]
    hist = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, batches, epochs=3, progress=False)
    assert hist["loss"][-1] < hist["loss"][0]
    after = base_state(model)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


def held_tensors(module, out=None):
    """{id: tensor} of every tensor the model holds, in any of its layers."""
    out = {} if out is None else out
    for value in module.__dict__.values():
        if isinstance(value, g.AGTensor):
            out[id(value)] = value
    for child in module.children():
        held_tensors(child, out)
    return out


def lora_step_buffer(model, vocab):
    s = seqs(vocab, 1, t=32, batch=2)[0]
    xb, yb = g.ag_tensor(s[:-1], dtype="i32"), g.ag_tensor(s[1:], dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb], optimizer=g.optimizer_adamw(model.parameters(), lr=1e-3))
    step(xb, yb)
    return step.buffer_bytes


def test_memory_is_the_quantized_base_plus_the_adapters(tmp_path):
    """No f32 copy of a base weight exists, in the model or in a compiled step's buffer."""
    from llm_files import hf_weights, write_llama
    d, ff, vocab = 256, 512, 256
    models = {}
    for qtype in ("q4_K", "f32"):
        path = tmp_path / f"{qtype}.gguf"
        write_llama(path, hf_weights(np.random.default_rng(0), vocab, d, 2, 4, 2, ff, False), 4, 2, qtype)
        models[qtype] = g.ag_lora(g.llm_load(path), rank=8)
    model = models["q4_K"]
    base = [getattr(b, p).base.Wt for b in model.blocks for p in PROJ]
    assert all(t.storage.type == g.GGML_TYPE_Q4_K for t in base)
    f32_bytes, held_bytes = sum(t.size * 4 for t in base), sum(t.storage.nbytes for t in base)
    assert held_bytes * 7 < f32_bytes  # q4_K: 4.5 bits a weight
    adapters = sum(p.size * 4 for p in g.lora_parameters(model).values())
    norms = sum(2 * b.attn_norm.weight.storage.nbytes for b in model.blocks) + model.output_norm.weight.storage.nbytes
    embd_out = model.token_embd.weight.storage.nbytes + model.output.Wt.storage.nbytes
    assert sum(t.storage.nbytes for t in held_tensors(model).values()) == held_bytes + adapters + norms + embd_out
    # the step's compute buffer holds activations: no more than with the f32 base, whose weights
    # are never in it (a dequantized copy of the base would add its f32 size)
    assert lora_step_buffer(model, vocab) <= lora_step_buffer(models["f32"], vocab)


# f32: the merged product differs from W x + s B (A x) by rounding; q8_0: the merged weights are
# f32, and the products no longer quantize their activations to q8_0's blocks (NMSE 2.4e-4 measured)
@pytest.mark.parametrize("qtype,bound", [("f32", 1e-10), ("q8_0", 1e-3)])
def test_merging_gives_the_adapted_model_in_f32(tmp_path, qtype, bound):
    path, _, _ = tiny(tmp_path, qtype)
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=2)
    randomize_b(model)
    adapted = g.llm_logits(model, TOKENS)
    assert g.lora_merge(model) is model
    assert g.lora_parameters(model) == {}
    assert type(model.blocks[0].attn_q) is g.nn.llama.LlamaProjection
    assert model.blocks[1].ffn_down.W.storage.type == g.GGML_TYPE_F32 and model.blocks[1].ffn_down.W.requires_grad
    frozen_in_a_type = 0 if qtype == "f32" else 2 * 7  # the merged projections, parameters now
    assert len(model.parameters()) == len(g.llm_load(path).parameters()) + frozen_in_a_type
    merged = g.llm_logits(model, TOKENS)
    assert nmse(merged, adapted) < bound


def test_lora_errors(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    model = g.llm_load(path)
    for kwargs, match in [(dict(rank=0), "rank"), (dict(rank=2.5), "rank"), (dict(alpha=0), "alpha"),
                          (dict(alpha=float("nan")), "alpha"), (dict(targets=["attn_x"]), "targets"),
                          (dict(targets=[]), "targets"), (dict(targets=["attn_q", "attn_q"]), "targets")]:
        with pytest.raises(g.GGMLError, match=match):
            g.ag_lora(model, **kwargs)
    with pytest.raises(g.GGMLError, match="no LoRA adapters"):
        g.llm_save_lora(model, tmp_path / "a.gguf")
    with pytest.raises(g.GGMLError, match="no LoRA adapters"):
        g.lora_merge(model)
    g.ag_lora(model)
    with pytest.raises(g.GGMLError, match="already"):
        g.ag_lora(model)
    with pytest.raises(g.GGMLError, match="lora_merge"):
        g.llm_save(model, tmp_path / "m.gguf")
    with pytest.raises(g.GGMLError, match="ag_llama"):
        g.ag_lora(g.ag_linear(4, 4))


@pytest.mark.parametrize("family,adapted,n_out", [("llama", "attn_v", 32), ("gpt2", "attn_qkv", 3 * 64)])
def test_the_adapter_file_is_llama_cpps_format(tmp_path, family, adapted, n_out):
    path = base_file(tmp_path, family, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8, targets=(adapted, "ffn_up"))
    randomize_b(model)
    out = g.llm_save_lora(model, tmp_path / "adapter.gguf")
    with g.GGUFFile(out) as f:
        assert (f.metadata["general.type"], f.metadata["adapter.type"], f.metadata["general.architecture"]) == \
            ("adapter", "lora", family)
        assert f.metadata["adapter.lora.alpha"] == 8.0 and f.metadata_types["adapter.lora.alpha"] == "float32"
        assert sorted(f.tensors) == sorted(g.lora_parameters(model))
        assert f.info(f"blk.1.{adapted}.weight.lora_a").ne == [64, 4]   # [in, rank]
        assert f.info(f"blk.1.{adapted}.weight.lora_b").ne == [4, n_out]   # [rank, out]
        np.testing.assert_array_equal(f.data("blk.1.ffn_up.weight.lora_b"),
                                      g.lora_parameters(model)["blk.1.ffn_up.weight.lora_b"].numpy())
    with pytest.raises(g.GGMLError, match="not a model"):
        g.llm_load(out)


@pytest.mark.parametrize("family,targets", [("llama", ("attn_q", "ffn_down")), ("gpt2", ("attn_qkv", "ffn_up"))])
def test_an_adapter_file_comes_back_onto_the_base_model(tmp_path, family, targets):
    path = base_file(tmp_path, family, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8, targets=targets)
    randomize_b(model)
    out = g.llm_save_lora(model, tmp_path / "adapter.gguf")
    back = g.llm_load_lora(g.llm_load(path), out)
    np.testing.assert_array_equal(g.llm_logits(back, TOKENS), g.llm_logits(model, TOKENS))
    assert sorted(g.lora_parameters(back)) == sorted(g.lora_parameters(model))
    assert {id(p) for p in back.parameters()} == {id(p) for p in g.lora_parameters(back).values()}
    with pytest.raises(g.GGMLError, match="already"):
        g.llm_load_lora(back, out)
    data = bytearray(open(out, "rb").read())
    data[-3] ^= 1
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(g.GGMLError, match="digest"):
        g.llm_load_lora(g.llm_load(path), tmp_path / "bad.gguf")


def _adapter(path, tensors, alpha=4.0, arch="llama", kind="adapter"):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.type", kind)
    w.add_string("adapter.type", "lora")
    if alpha is not None:
        w.add_float32("adapter.lora.alpha", alpha)
    for name, arr in tensors.items():
        w.add_tensor(name, np.asarray(arr, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_adapter_files_from_elsewhere_and_what_is_refused(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(3, 64)), rng.normal(0, 0.1, size=(32, 3))   # numpy (rank, in), (out, rank)
    ok = {"blk.1.attn_v.weight.lora_a": a, "blk.1.attn_v.weight.lora_b": b, "blk.0.attn_norm.weight": np.ones(64)}
    for alpha, scale in ((6.0, 2.0), (0.0, 1.0), (None, 1.0)):  # alpha 0 or absent: llama.cpp's scale 1
        model = g.llm_load_lora(g.llm_load(path), _adapter(tmp_path / "x.gguf", ok, alpha))
        proj = model.blocks[1].attn_v
        assert proj.rank == 3 and proj.scale == scale
        np.testing.assert_allclose(proj.lora_a.data, a, rtol=1e-6)
    base = g.llm_load(path)
    for tensors, kw, match in [
            ({"blk.1.attn_v.weight.lora_a": a}, {}, "only"),
            ({"token_embd.weight.lora_a": a, "token_embd.weight.lora_b": b}, {}, "projections"),
            ({"blk.2.attn_v.weight.lora_a": a, "blk.2.attn_v.weight.lora_b": b}, {}, "2 layers"),
            ({"blk.1.attn_q.weight.lora_a": a, "blk.1.attn_q.weight.lora_b": b}, {}, r"\[3, 32\]"),
            ({"blk.1.attn_v.weight.lora_x": a}, {}, "neither"),
            ({"blk.0.attn_norm.weight": np.ones(64)}, {}, "no adapter"),
            (ok, {"arch": "gpt2"}, "architecture 'gpt2'"),
            (ok, {"kind": "model"}, "not a LoRA adapter"),
            (ok, {"alpha": -1.0}, "alpha")]:
        with pytest.raises(g.GGMLError, match=match):
            g.llm_load_lora(base, _adapter(tmp_path / "bad.gguf", tensors, **{"alpha": 4.0, **kw}))
    assert g.lora_parameters(base) == {} and len(base.parameters()) > 0  # a refused file changes nothing


@pytest.mark.parametrize("family,qtype,targets", [("llama", "f32", ["attn_q", "attn_v", "ffn_down"]),
                                                  ("llama", "q8_0", ["attn_q", "attn_v", "ffn_down"]),
                                                  ("gpt2", "q8_0", None), ("gpt2", "f32", ["attn_qkv"])])
def test_the_inference_graph_adds_the_adapters_as_the_forward_does(tmp_path, family, qtype, targets):
    """llm_logits and llm_generate run llama.cpp's inference graph, with each adapter's product
    added to its projection's; the ag_* forward (training's) computes the same model."""
    path = base_file(tmp_path, family, qtype)
    g.manual_seed(0)
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8, targets=targets)
    randomize_b(model)
    got = g.llm_logits(model, TOKENS)
    # the two sum in other orders (attention; gpt2's bias); gpt2's GELU reads an f16 table, where a
    # last-bit difference of its input can move an activation by an f16 step: on the f32 gpt2 file
    # up to 6.3e-10 measured over 12 draws of lora_a, 1.7e-13 on llama's
    assert nmse(got, forward_logits(model, TOKENS)) < (1e-8 if family == "gpt2" else 1e-10)
    assert nmse(got, g.llm_logits(g.llm_load(path), TOKENS)) > 1e-3  # the adapters are in it
    n_new = 5 if family == "gpt2" else 8  # the gpt2 file has 16 learned positions
    seq = list(TOKENS)
    for _ in range(n_new):
        seq.append(int(forward_logits(model, seq)[-1].argmax()))
    assert g.llm_generate(model, TOKENS, max_new_tokens=n_new).tolist() == seq[len(TOKENS):]


# -- against llama.cpp -----------------------------------------------------------------------------
@pytest.mark.parametrize("family,qtype,targets", [
    ("llama", "f32", PROJ), ("llama", "q8_0", PROJ), ("llama", "q4_0", ("attn_q", "attn_k", "ffn_down")),
    ("llama", "f16", ("attn_output", "ffn_gate")), ("gpt2", "q8_0", GPT2_PROJ),
    ("gpt2", "f32", ("attn_qkv", "ffn_down")), ("gpt2", "f16", ("attn_output", "ffn_up"))])
def test_llama_cpp_with_the_adapter_gives_ggmlpys_logits(tmp_path, family, qtype, targets):
    require_llama_cpp()
    path = base_file(tmp_path, family, qtype)
    model = g.ag_lora(g.llm_load(path), rank=4, alpha=8, targets=targets)
    randomize_b(model)
    got = g.llm_logits(model, TOKENS)
    want = llama_cpp_logits(path, TOKENS, lora=g.llm_save_lora(model, tmp_path / "adapter.gguf"))
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
    assert nmse(g.llm_logits(g.llm_load(path), TOKENS), want) > 1e-3  # the adapter changes the model


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_trained_adapter_and_its_merged_model_run_in_llama_cpp(tmp_path, family):
    require_llama_cpp()
    path = base_file(tmp_path, family, "q8_0")
    model = g.ag_lora(g.llm_load(path), rank=4)
    train_compiled(model, seqs(40, 4), 2)
    got = g.llm_logits(model, TOKENS)
    want = llama_cpp_logits(path, TOKENS, lora=g.llm_save_lora(model, tmp_path / "adapter.gguf"))
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
    # merged: f32 projections; the embedding and head as the file held them (q8_0)
    merged = g.llm_save(g.lora_merge(model), tmp_path / "merged.gguf")
    want = llama_cpp_logits(merged, TOKENS)
    assert nmse(g.llm_logits(model, TOKENS), want) < 1e-5


# -- on Vulkan (a GPU, or Mesa's lavapipe: GGMLPY_SOFTWARE_VULKAN=1 GGML_VK_VISIBLE_DEVICES=0) -------------
def _on(device, fn):
    previous = g.ag_device(device)
    try:
        return fn()
    finally:
        g.ag_device(previous)


@pytest.mark.skipif(not any(d.name.startswith("Vulkan") for d in g.devices()), reason="needs a Vulkan device")
def test_adapters_on_an_f32_base_train_on_vulkan_as_on_the_cpu(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    s = seqs(40, 1, t=8, batch=2)[0]
    grads = []
    for device in ("cpu", "vulkan"):
        g.manual_seed(1)
        model = g.ag_lora(g.llm_load(path, device=device), rank=4)
        assert {t.device_context.name for t in held_tensors(model).values()} == {"CPU" if device == "cpu" else "Vulkan0"}
        randomize_b(model)

        def grad():
            with g.with_grad_tape():
                loss = model.loss(g.ag_tensor(s[:-1], dtype="i32"), g.ag_tensor(s[1:], dtype="i32"))
            gr = g.backward(loss)
            return {n: gr[p].numpy() for n, p in g.lora_parameters(model).items()}
        grads.append(_on(device, grad))
    # ggml-vulkan's products round differently from the CPU's: relative errors up to 2e-3 measured (lavapipe)
    for name, want in grads[0].items():
        assert np.linalg.norm(grads[1][name] - want) < 1e-2 * np.linalg.norm(want), name


@pytest.mark.skipif(not any(d.name.startswith("Vulkan") for d in g.devices()), reason="needs a Vulkan device")
def test_a_quantized_base_on_vulkan_is_a_clear_error_in_the_backward_pass(tmp_path):
    """ggml's Vulkan backend has no out_prod for a quantized weight: training adapters over a
    quantized base runs on the CPU (the forward pass runs anywhere)."""
    path, _, _ = tiny(tmp_path, "q8_0")
    model = g.ag_lora(g.llm_load(path, device="vulkan"), rank=4)
    assert g.llm_logits(model, TOKENS).shape == (len(TOKENS), 40)
    s = seqs(40, 1, t=8, batch=2)[0]

    def step():
        with g.with_grad_tape():
            loss = model.loss(g.ag_tensor(s[:-1], dtype="i32"), g.ag_tensor(s[1:], dtype="i32"))
        g.backward(loss)
    with pytest.raises(g.GGMLError, match="no kernel for OUT_PROD"):
        _on("vulkan", step)
