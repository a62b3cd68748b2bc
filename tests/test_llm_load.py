"""llm_load / llm_logits on tiny random llama.cpp model files (written with the gguf package)
against the numpy reference of the same architecture."""
import numpy as np
import pytest

import ggmlpy as g

from llama_reference import llama_forward
from llm_files import hf_weights, write_llama

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")


def nmse(got, want):
    return float(np.mean((got - want) ** 2) / np.mean(want ** 2))


def tiny(tmp_path, qtype, n_head=4, n_head_kv=2, tied=False, d=64, vocab=40, seed=0, ff=96):
    rng = np.random.default_rng(seed)
    p = hf_weights(rng, vocab, d, 2, n_head, n_head_kv, ff, tied)
    path = tmp_path / f"tiny-{qtype}.gguf"
    stored = write_llama(path, p, n_head, n_head_kv, qtype, eps=1e-5, freq_base=10000.0)
    return path, p, stored


TOKENS = [1, 7, 3, 22, 39, 5, 5, 18, 0, 31]


def forward_logits(model, ids):
    """The ag_* forward's logits [n_tokens, n_vocab]: the model one trains, beside llm_logits'
    inference graph."""
    with g.no_grad():
        return np.ascontiguousarray(model(np.asarray(ids)).numpy().T)


def test_f32_file_equals_the_hugging_face_layout_reference(tmp_path):
    """The file's permuted rows and llama.cpp's normal rotation give the model the weights were
    drawn for, computed with Hugging Face's rotation (NeoX's pairs) on the unpermuted rows."""
    path, p, stored = tiny(tmp_path, "f32")
    model = g.llm_load(path)
    got = g.llm_logits(model, TOKENS)
    assert got.shape == (len(TOKENS), 40)
    want = llama_forward(p, TOKENS, 4, 2, eps=1e-5, mode=2).T
    assert nmse(got, want) < 1e-10
    np.testing.assert_allclose(got, llama_forward(stored, TOKENS, 4, 2, mode=0).T, rtol=1e-4, atol=1e-4)


# ggml's products convert the activations to the weight's type (f16: 11 significant bits, bf16: 8)
# or, for the quantized types, to 8-bit blocks (q8_0's, q8_K's), as llama.cpp computes: each bound
# is some five times that error's measured size (NMSE 3e-7, 1.4e-5, 2e-4), far below what a wrong
# weight, rotation or grouping gives (see test_a_wrong_rotation_is_far_off). The k-quants need
# rows of 256.
@pytest.mark.parametrize("qtype,bound,d", [("f16", 2e-6, 64), ("bf16", 1e-4, 64), ("q8_0", 1e-3, 64),
                                           ("q4_0", 1e-3, 64), ("q4_K", 1e-3, 256)])
def test_typed_files_match_the_reference_on_the_stored_weights(tmp_path, qtype, bound, d):
    path, p, stored = tiny(tmp_path, qtype, d=d, ff=d if d == 256 else 96)
    model = g.llm_load(path)
    assert model.blocks[0].attn_q.qtype == qtype and model.token_embd.qtype == qtype
    got = g.llm_logits(model, TOKENS)
    want = llama_forward(stored, TOKENS, 4, 2, mode=0).T
    assert nmse(got, want) < bound
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.9


def test_a_wrong_rotation_is_far_off(tmp_path):
    path, p, stored = tiny(tmp_path, "f32")
    got = g.llm_logits(g.llm_load(path), TOKENS)
    assert nmse(got, llama_forward(stored, TOKENS, 4, 2, mode=2).T) > 1e-2


@pytest.mark.parametrize("qtype", ["f32", "q8_0"])
def test_tied_head_and_multi_head_attention(tmp_path, qtype):
    path, p, stored = tiny(tmp_path, qtype, n_head=2, n_head_kv=2, tied=True)
    model = g.llm_load(path)
    assert model.tied and model.hparams.n_kv_heads == 2
    got = g.llm_logits(model, TOKENS)
    want = llama_forward(stored, TOKENS, 2, 2, mode=0).T
    assert nmse(got, want) < (1e-9 if qtype == "f32" else 1e-3)


def test_hyper_parameters_and_vocabulary_come_from_the_metadata(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    h = g.llm_load(path).hparams
    assert (h.arch, h.vocab_size, h.d_model, h.n_layers, h.n_heads, h.n_kv_heads, h.d_ff, h.context) == \
        ("llama", 40, 64, 2, 4, 2, 96, 64)
    assert h.rope_base == 10000.0 and h.eps == pytest.approx(1e-5)
    assert h.vocab["tokenizer.ggml.tokens"][:3] == ["<unk>", "<s>", "</s>"]


def test_an_f32_file_trains_and_a_typed_one_keeps_its_weights_frozen(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    names = {n for n, _ in g.llm_load(path).named_parameters()}
    assert len(names) == 1 + 2 * 9 + 1 + 1  # token_embd, 9 per layer, output_norm, output
    path, _, _ = tiny(tmp_path, "q8_0")
    model = g.llm_load(path)
    assert len(list(model.named_parameters())) == 2 * 2 + 1  # only the (f32) norm weights
    assert {n.rsplit("_", 1)[-1] for n, _ in model.named_buffers()} >= {"Wt", "weight"}


def test_bad_token_ids_and_models_are_clear_errors(tmp_path):
    path, _, _ = tiny(tmp_path, "f32")
    model = g.llm_load(path)
    for bad, match in (([], "non-empty"), ([1, 40], "0..39"), ([-1], "0..39"), ([[1, 2]], "1-D"),
                       ([0.5], "integers")):
        with pytest.raises(g.GGMLError, match=match):
            g.llm_logits(model, bad)
    with pytest.raises(g.GGMLError, match="llm_load"):
        g.llm_logits(g.ag_gpt(5, d_model=8, n_heads=2, n_layers=1), [1])


def _rewrite(tmp_path, drop=(), **meta):
    """A copy of a tiny file with metadata entries replaced (None: removed) or tensors dropped."""
    import gguf
    src, _, _ = tiny(tmp_path, "f32")
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "llama")
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name in meta:
            if meta[field.name] is not None:
                w.add_key_value(field.name, meta[field.name], field.types[0])
            continue
        w.add_key_value(field.name, field.contents(), field.types[0],
                        sub_type=field.types[-1] if len(field.types) > 1 else None)
    for key, value in meta.items():
        if key not in r.fields and value is not None:
            {str: w.add_string, int: w.add_uint32, float: w.add_float32}[type(value)](key, value)
    for t in r.tensors:
        if t.name not in drop:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed(t.shape.tolist())),
                         raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tmp_path / "bad.gguf"


@pytest.mark.parametrize("change,match", [
    (dict(drop=("blk.1.ffn_up.weight",)), "no tensor 'blk.1.ffn_up.weight'"),
    ({"llama.attention.head_count": None}, "llama.attention.head_count"),
    ({"llama.attention.head_count_kv": 3}, "do not divide"),
    ({"llama.feed_forward_length": 95}, "has shape"),
    ({"llama.rope.dimension_count": 8}, "rope.dimension_count"),
    ({"llama.rope.scaling.type": "yarn"}, "rope scaling"),
])
def test_inconsistent_files_are_refused_with_the_reason(tmp_path, change, match):
    bad = _rewrite(tmp_path, **change)
    with pytest.raises(g.GGMLError, match=match):
        g.llm_load(bad)


def test_other_architectures_are_refused(tmp_path):
    import gguf
    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "mamba")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(g.GGMLError, match="architecture 'mamba' is not supported"):
        g.llm_load(tmp_path / "x.gguf")
