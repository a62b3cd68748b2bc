"""llm_save: ag_llama and ag_gpt2 models (built and trained in ggmlpy, or loaded) written as
llama.cpp model files, read back by llm_load and, where it is built, run by llama.cpp itself."""
import numpy as np
import pytest

import ggmlpy as g

from llama_cpp_ref import llama_cpp_logits, llama_cpp_tokenize, require_llama_cpp
from test_llm_gpt2 import tiny_gpt2
from test_llm_load import TOKENS, nmse, tiny

gguf = pytest.importorskip("gguf", reason="the gguf package writes GGUF files")

TEXT = ("the quick brown fox jumps over the lazy dog.\nà la façon d'un café, the dog sleeps;\n"
        "a fox is quick, a dog is lazy, and both are brown.\n")
CHARS = sorted(set(TEXT))


def built(seed=0, vocab=40, d=64, **kw):
    g.manual_seed(seed)
    args = dict(d_model=d, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=96, context=64)
    return g.ag_llama(vocab, **{**args, **kw})


def built_gpt2(seed=0, vocab=40, d=64, **kw):
    """An ag_gpt2 with every parameter moved off its start (biases off zero, norms off one), so that
    each tensor written shows in the logits."""
    g.manual_seed(seed)
    model = g.ag_gpt2(vocab, **{**dict(d_model=d, n_heads=4, n_layers=2, d_ff=96, context=64, tied=False), **kw})
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        p.data = p.data + rng.normal(0.0, 0.1, p.shape)
    return model


def char_model(steps=30, family="llama"):
    """A tiny char model (ag_llama or ag_gpt2) trained in ggmlpy on TEXT (compiled steps)."""
    g.manual_seed(3)
    if family == "gpt2":
        model = g.ag_gpt2(len(CHARS), d_model=32, n_heads=2, n_layers=1, d_ff=64, context=64, tied=False)
    else:
        model = g.ag_llama(len(CHARS), d_model=32, n_heads=2, n_kv_heads=1, n_layers=1, d_ff=64, context=64)
    ids = np.array([CHARS.index(c) for c in TEXT])
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(ids) - 17, size=(steps, 8))
    seq = np.stack([ids[s:s + 17] for s in starts[0]], axis=1)
    xb, yb = g.ag_tensor(seq[:-1], dtype="i32"), g.ag_tensor(seq[1:], dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb], optimizer=g.optimizer_adamw(model.parameters(),
                                                                                              lr=1e-2))
    losses = []
    for s in starts:
        seq = np.stack([ids[i:i + 17] for i in s], axis=1)
        losses.append(step(g.ag_tensor(seq[:-1], dtype="i32"), g.ag_tensor(seq[1:], dtype="i32")))
    assert losses[-1] < losses[0] - 0.5
    return model, ids


def test_an_f32_model_comes_back_bit_for_bit(tmp_path):
    model = built()
    path = g.llm_save(model, tmp_path / "m.gguf", vocab=[f"t{i}" for i in range(40)])
    back = g.llm_load(path)
    np.testing.assert_array_equal(g.llm_logits(back, TOKENS), g.llm_logits(model, TOKENS))
    h = back.hparams
    assert (h.vocab_size, h.d_model, h.n_layers, h.n_heads, h.n_kv_heads, h.d_ff, h.context, h.tied) == \
        (40, 64, 2, 4, 2, 96, 64, False)
    assert h.vocab["tokenizer.ggml.tokens"][:2] == ["t0", "t1"] and h.vocab["tokenizer.ggml.model"] == "llama"


def test_a_tied_model_writes_no_output_tensor(tmp_path):
    model = built(tied=True)
    path = g.llm_save(model, tmp_path / "m.gguf", vocab=[f"t{i}" for i in range(40)])
    with g.GGUFFile(path) as f:
        assert "output.weight" not in f.tensors
    np.testing.assert_array_equal(g.llm_logits(g.llm_load(path), TOKENS), g.llm_logits(model, TOKENS))


# the bounds: some three to ten times the NMSE each encoding gives these random weights (f16 1.6e-7, q8_0 1.1e-4,
# q4_K 0.03 measured); that the file holds ggml's own encoding is checked bit for bit
@pytest.mark.parametrize("dtype,d,bound", [("f16", 64, 2e-6), ("q8_0", 64, 1e-3), ("q4_K", 256, 0.1)])
def test_typed_files_hold_ggmls_encoding_of_the_weights(tmp_path, dtype, d, bound):
    model = built(d=d, d_ff=d)
    path = g.llm_save(model, tmp_path / "m.gguf", vocab=[f"t{i}" for i in range(40)], dtype=dtype)
    W = model.blocks[1].ffn_up.W.numpy()
    with g.GGUFFile(path) as f:
        assert f.info("blk.1.ffn_up.weight").type_name == dtype
        assert f.info("blk.1.ffn_norm.weight").type_name == "f32"
        raw = f.raw("blk.1.ffn_up.weight").reshape(-1)
    np.testing.assert_array_equal(raw, g.ggml_quantize_chunk(dtype, W.astype(np.float32)))
    back = g.llm_load(path)
    assert back.blocks[0].attn_q.qtype == dtype and back.token_embd.qtype == dtype
    got, want = g.llm_logits(back, TOKENS), g.llm_logits(model, TOKENS)
    assert nmse(got, want) < bound


@pytest.mark.parametrize("family,qtype", [("llama", "f32"), ("llama", "q8_0"), ("llama", "f16"), ("gpt2", "f32"),
                                          ("gpt2", "q8_0"), ("gpt2", "f16")])
def test_a_loaded_model_is_written_as_it_was_read(tmp_path, family, qtype):
    """dtype=None keeps every tensor's type and bytes, the hyper-parameters' keys and the file's
    vocabulary."""
    src = tiny(tmp_path, qtype)[0] if family == "llama" else tiny_gpt2(tmp_path, qtype, tied=qtype == "f16")[0]
    path = g.llm_save(g.llm_load(src), tmp_path / "again.gguf")
    with g.GGUFFile(src) as a, g.GGUFFile(path) as b:
        assert set(a.tensors) == set(b.tensors)
        for name in a.tensors:
            assert a.info(name).type == b.info(name).type, name
            np.testing.assert_array_equal(a.raw(name), b.raw(name))
        for key, value in a.metadata.items():
            if key.startswith("tokenizer.") or key.startswith(family + "."):
                np.testing.assert_array_equal(b.metadata[key], value, err_msg=key)
                assert b.metadata_types[key] == a.metadata_types[key], key


def test_a_loaded_model_is_requantized_from_what_it_holds(tmp_path):
    src, _, _ = tiny(tmp_path, "q8_0")
    model = g.llm_load(src)
    path = g.llm_save(model, tmp_path / "f32.gguf", dtype="f32")
    with g.GGUFFile(src) as a, g.GGUFFile(path) as b:
        assert b.info("blk.0.attn_q.weight").type_name == "f32"
        np.testing.assert_array_equal(b.data("blk.0.attn_q.weight"), a.data("blk.0.attn_q.weight"))


@pytest.mark.parametrize("tied,n_kv_heads", [(False, None), (True, 2)])
def test_a_gpt2_model_comes_back_bit_for_bit(tmp_path, tied, n_kv_heads):
    model = built_gpt2(tied=tied, n_kv_heads=n_kv_heads)
    path = g.llm_save(model, tmp_path / "gpt2.gguf", vocab=[f"t{i}" for i in range(40)])
    back = g.llm_load(path)
    assert isinstance(back, g.ag_gpt2)
    np.testing.assert_array_equal(g.llm_logits(back, TOKENS), g.llm_logits(model, TOKENS))
    h = back.hparams
    assert (h.arch, h.vocab_size, h.d_model, h.n_layers, h.n_heads, h.n_kv_heads, h.d_ff, h.context, h.tied) == \
        ("gpt2", 40, 64, 2, 4, n_kv_heads or 4, 96, 64, tied)
    with g.GGUFFile(path) as f:
        assert f.metadata["gpt2.attention.layer_norm_epsilon"] == np.float32(1e-5)
        assert not [k for k in f.metadata if "rope" in k]  # learned positions: no rotation to describe
        assert ("output.weight" in f.tensors) != tied
        np.testing.assert_array_equal(f.data("blk.1.attn_qkv.bias"), model.blocks[1].attn_qkv.b.numpy().ravel()
                                      .astype(np.float32))
        np.testing.assert_array_equal(f.data("output_norm.bias"), model.output_norm.beta.numpy().ravel()
                                      .astype(np.float32))


def test_a_gpt2_model_in_a_quantized_type(tmp_path):
    """Every weight matrix in the type; norms, biases and the position table stay f32, as llama.cpp's
    quantize tool leaves them."""
    model = built_gpt2()
    path = g.llm_save(model, tmp_path / "q.gguf", vocab=[f"t{i}" for i in range(40)], dtype="q8_0")
    W = model.blocks[0].attn_qkv.W.numpy()
    with g.GGUFFile(path) as f:
        types = {name: f.info(name).type_name for name in f.tensors}
        raw = f.raw("blk.0.attn_qkv.weight").reshape(-1)
    assert {n for n, t in types.items() if t == "q8_0"} == \
        {"token_embd.weight", "output.weight"} | {f"blk.{i}.{p}.weight" for i in range(2)
                                                 for p in ("attn_qkv", "attn_output", "ffn_up", "ffn_down")}
    assert all(t == "f32" for n, t in types.items() if t != "q8_0")
    np.testing.assert_array_equal(raw, g.ggml_quantize_chunk("q8_0", W.astype(np.float32)))
    back = g.llm_load(path)
    assert back.blocks[1].ffn_down.qtype == "q8_0"
    assert nmse(g.llm_logits(back, TOKENS), g.llm_logits(model, TOKENS)) < 1e-3


def test_the_digest_catches_a_changed_file(tmp_path):
    path = g.llm_save(built(), tmp_path / "m.gguf", vocab=[f"t{i}" for i in range(40)])
    data = bytearray(open(path, "rb").read())
    with g.GGUFFile(path) as f:
        weight_at = f.info("blk.0.attn_v.weight").file_offset
    for at, what in ((weight_at + 5, "weight"), (data.find(b"t17"), "token text")):
        bad = bytearray(data)
        bad[at] ^= 0x01
        (tmp_path / "bad.gguf").write_bytes(bytes(bad))
        with pytest.raises(g.GGMLError, match="digest"):
            g.llm_load(tmp_path / "bad.gguf")


def test_bad_arguments_are_refused_and_leave_the_old_file(tmp_path):
    model = built()
    path = g.llm_save(model, tmp_path / "m.gguf", vocab=[f"t{i}" for i in range(40)])
    before = open(path, "rb").read()
    for kwargs, match in [({}, "no vocabulary of its own"), ({"vocab": ["a"] * 40}, "same token twice"),
                          ({"vocab": [f"t{i}" for i in range(39)]}, "39 tokens, the model 40"),
                          ({"vocab": "bytes"}, "256 tokens, the model 40"),
                          ({"vocab": {"general.name": "x"}}, "tokenizer"),
                          ({"vocab": [f"t{i}" for i in range(40)], "dtype": "q4_K"}, "rows of 64"),
                          ({"vocab": [f"t{i}" for i in range(40)], "dtype": "iq2_xxs"}, "importance matrix"),
                          ({"vocab": [f"t{i}" for i in range(40)], "dtype": "i32"}, "not a weight type")]:
        with pytest.raises(g.GGMLError, match=match):
            g.llm_save(model, path, **kwargs)
        assert open(path, "rb").read() == before
    with pytest.raises(g.GGMLError, match="ag_llama"):
        g.llm_save(object(), path, vocab=CHARS)
    neox = built(rope_mode=2)
    with pytest.raises(g.GGMLError, match="rope_mode 0"):
        g.llm_save(neox, path, vocab=[f"t{i}" for i in range(40)])
    gpt2 = built_gpt2()
    for kwargs, match in [({"dtype": "q4_K"}, "rows of 64"), ({"vocab": "bytes"}, "256 tokens, the model 40")]:
        with pytest.raises(g.GGMLError, match=match):
            g.llm_save(gpt2, path, **{"vocab": [f"t{i}" for i in range(40)], **kwargs})
    gpt2.blocks[1].ffn_norm.eps = 1e-6
    with pytest.raises(g.GGMLError, match="layers differ"):
        g.llm_save(gpt2, path, vocab=[f"t{i}" for i in range(40)])
    assert open(path, "rb").read() == before


def test_metadata_is_written_in_the_types_llama_cpp_reads():
    from ggmlpy.io.llm_write import value_type
    T = gguf.GGUFValueType
    for value, want in [(True, (T.BOOL, None)), ("x", (T.STRING, None)), (7, (T.UINT32, None)),
                        (-1, (T.INT64, None)), (1e-5, (T.FLOAT32, None)), (["a", "b"], (T.ARRAY, T.STRING)),
                        ([], (T.ARRAY, T.STRING)), ([1, 3, 6], (T.ARRAY, T.INT32)), ([0.5, -1], (T.ARRAY, T.FLOAT32)),
                        (np.zeros(3, np.float32), (T.ARRAY, T.FLOAT32)), (np.ones(2, np.int32), (T.ARRAY, T.INT32))]:
        assert value_type("k", value) == want, value
    for bad in (None, [[1]], {"a": 1}, np.zeros((2, 2), np.float32), ["a", 1]):
        with pytest.raises(g.GGMLError, match="cannot write metadata"):
            value_type("k", bad)


def test_char_and_byte_vocabularies():
    from ggmlpy.io.llm_write import byte_vocab, char_vocab
    v = char_vocab(["<unk>", "<s>", "</s>", "a", " ", "<0x0A>"])
    assert v["tokenizer.ggml.tokens"][4] == "\u2581"
    assert list(v["tokenizer.ggml.token_type"]) == [2, 3, 3, 1, 1, 6]
    assert (v["tokenizer.ggml.unknown_token_id"], v["tokenizer.ggml.bos_token_id"],
            v["tokenizer.ggml.eos_token_id"]) == (0, 1, 2)
    assert "tokenizer.ggml.eos_token_id" not in char_vocab("abc")
    with pytest.raises(g.GGMLError, match="same token twice"):
        char_vocab(["a", " ", "\u2581"])
    b = byte_vocab()["tokenizer.ggml.tokens"]
    assert len(b) == 256 and b[0x41] == "<0x41>" and b[0x20] == "\u2581"


# -- against llama.cpp -----------------------------------------------------------------------------
@pytest.mark.parametrize("family,dtype,d", [("llama", "f32", 64), ("llama", "f16", 64), ("llama", "bf16", 64),
                                            ("llama", "q8_0", 64), ("llama", "q4_K", 256), ("gpt2", "f32", 64),
                                            ("gpt2", "f16", 64), ("gpt2", "q8_0", 64), ("gpt2", "q4_K", 256)])
def test_llama_cpp_runs_a_saved_model_as_ggmlpy_does(tmp_path, family, dtype, d):
    require_llama_cpp()
    ff = d if d == 256 else 96
    model = built(d=d, d_ff=ff) if family == "llama" else built_gpt2(d=d, d_ff=ff, tied=dtype == "f16")
    path = g.llm_save(model, tmp_path / "m.gguf", vocab=[f"t{i}" for i in range(40)], dtype=dtype)
    want = llama_cpp_logits(path, TOKENS)
    got = g.llm_logits(g.llm_load(path), TOKENS)
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
    if dtype == "f32":  # the file is the model: the model's own logits too
        assert nmse(g.llm_logits(model, TOKENS), want) < 1e-10


@pytest.mark.parametrize("family,dtype", [("llama", "f32"), ("llama", "q8_0"), ("gpt2", "f32"), ("gpt2", "q8_0")])
def test_a_char_model_trained_in_ggmlpy_runs_in_llama_cpp(tmp_path, family, dtype):
    require_llama_cpp()
    model, ids = char_model(family=family)
    path = g.llm_save(model, tmp_path / "char.gguf", vocab=CHARS, dtype=dtype)
    assert llama_cpp_tokenize(path, TEXT) == ids.tolist()  # its vocabulary, as llama.cpp reads it
    want = llama_cpp_logits(path, ids[:48])
    got = g.llm_logits(model if dtype == "f32" else g.llm_load(path), ids[:48])
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_byte_vocabulary_tokenizes_text_into_its_bytes(tmp_path, family):
    require_llama_cpp()
    model = built(vocab=256) if family == "llama" else built_gpt2(vocab=256)
    path = g.llm_save(model, tmp_path / "bytes.gguf", vocab="bytes")
    assert llama_cpp_tokenize(path, TEXT) == list(TEXT.encode())


def test_a_loaded_f32_model_fine_tuned_in_full_runs_in_llama_cpp(tmp_path):
    require_llama_cpp()
    src, _, _ = tiny(tmp_path, "f32")
    model = g.llm_load(src)
    rng = np.random.default_rng(2)
    seq = rng.integers(0, 40, size=(17, 4))
    xb, yb = g.ag_tensor(seq[:-1], dtype="i32"), g.ag_tensor(seq[1:], dtype="i32")
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb], optimizer=g.optimizer_adamw(model.parameters(),
                                                                                              lr=1e-2))
    losses = [step(xb, yb) for _ in range(5)]
    assert losses[-1] < losses[0]
    path = g.llm_save(model, tmp_path / "tuned.gguf")
    want = llama_cpp_logits(path, TOKENS)
    got = g.llm_logits(model, TOKENS)
    assert nmse(got, want) < 1e-10
    assert nmse(g.llm_logits(g.llm_load(src), TOKENS), want) > 1e-4  # the tuning changed the model
