"""llm_generate: the KV-cache graphs against the ag_* forward and against llama.cpp's greedy tokens,
the decode step built once, sampling by seed, and clear errors."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.quant.llm_decode import decoder_for, decoder_of

from llama_cpp_ref import llama_cpp_greedy, llama_cpp_logits, require_llama_cpp
from test_llm_gpt2 import tiny_gpt2
from test_llm_load import forward_logits, nmse, tiny

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")

PROMPT = [1, 7, 3, 22]


def _file(tmp_path, kind, qtype, **kw):
    if kind == "llama":
        return tiny(tmp_path, qtype, seed=5, d=256 if qtype == "q4_K" else 64,
                    ff=256 if qtype == "q4_K" else 96, **kw)[0]
    return tiny_gpt2(tmp_path, qtype, context=64, d=256 if qtype == "q4_K" else 64, **kw)[0]


def _greedy_by_forward(model, prompt, n):
    """Greedy continuation recomputing every position with the ag_* forward (no cache)."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(forward_logits(model, seq)[-1].argmax()))
    return seq[len(prompt):]


@pytest.mark.parametrize("kind,qtype", [("llama", "f32"), ("llama", "q8_0"), ("llama", "q4_K"), ("gpt2", "f32"),
                                        ("gpt2", "f16"), ("gpt2", "q8_0")])
def test_greedy_tokens_equal_llama_cpp(tmp_path, kind, qtype):
    require_llama_cpp()
    path = _file(tmp_path, kind, qtype)
    got = g.llm_generate(g.llm_load(path), PROMPT, max_new_tokens=30)
    assert got.dtype == np.int32 and got.shape == (30,)
    assert len(set(got.tolist())) > 3  # a sequence that tells models apart, not one token repeated
    assert got.tolist() == llama_cpp_greedy(path, PROMPT, 30)


@pytest.mark.parametrize("kind,qtype", [("llama", "f32"), ("llama", "q4_K"), ("gpt2", "q8_0")])
def test_greedy_tokens_equal_the_uncached_forward(tmp_path, kind, qtype):
    model = g.llm_load(_file(tmp_path, kind, qtype))
    assert g.llm_generate(model, PROMPT, max_new_tokens=12).tolist() == _greedy_by_forward(model, PROMPT, 12)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_cached_logits_equal_the_forward_at_every_step(tmp_path, kind):
    model = g.llm_load(_file(tmp_path, kind, "f32"))
    seq = PROMPT + [5, 9, 30, 2, 11, 0]
    want = forward_logits(model, seq)
    dec = decoder_for(model, 64)
    steps = [dec.run(np.array(seq[:4]), 0)] + [dec.run(np.array([t]), i) for i, t in enumerate(seq[4:], 4)]
    got = np.stack(steps)
    assert nmse(got, want[3:]) < 1e-10


def test_typed_weights_ggml_repacks_are_multiplied_as_repacked_copies(tmp_path):
    """As llama.cpp places them: q4_K projections in the CPU backend's repacking buffer type (on
    CPUs with AVX2, where ggml has interleaved kernels for it), q8_0 ones as they are (x86 has none)."""
    if not g.ggml_cpu_has_avx2():
        pytest.skip("ggml repacks q4_K for CPUs with AVX2 (or NEON) only")
    for qtype, repacked in (("q4_K", 15), ("q8_0", 0)):
        model = g.llm_load(_file(tmp_path, "llama", qtype))
        g.llm_generate(model, PROMPT, max_new_tokens=2)
        copies = decoder_of(model).repacked.copies
        assert len(copies) == 15  # 7 projections in each of 2 layers, and the head
        assert sum(int(g.bindings.ffi.cast("uintptr_t", c)) != k for k, c in copies.items()) == repacked
        assert len(decoder_of(model).repacked.owned) == repacked


@pytest.mark.parametrize("kind,qtype", [("llama", "q8_0"), ("gpt2", "q4_K")])
def test_cached_logits_equal_llama_cpps_at_every_step(tmp_path, kind, qtype):
    require_llama_cpp()
    path = _file(tmp_path, kind, qtype)
    seq = np.random.default_rng(3).integers(0, 40, size=48).tolist()
    want = llama_cpp_logits(path, seq)
    model = g.llm_load(path)
    dec = decoder_for(model, 64)
    got = np.stack([dec.run(np.array(seq[:8]), 0)] + [dec.run(np.array([t]), i) for i, t in enumerate(seq[8:], 8)])
    assert max(nmse(a, b) for a, b in zip(got, want[7:])) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want[7:].argmax(1))


def test_the_decode_step_is_built_once_and_re_run(tmp_path):
    model = g.llm_load(_file(tmp_path, "llama", "q8_0"))
    g.llm_generate(model, PROMPT, max_new_tokens=20)
    dec = decoder_of(model)
    assert dec.n_cache == 256  # cells padded to 256 as llama.cpp pads its cache, though the context is 64
    assert dec.builds == 2  # the decode step, the prompt of 4: not one per token
    g.llm_generate(model, [3, 4, 5, 6], max_new_tokens=20)
    assert decoder_of(model) is dec and dec.builds == 2  # the same cache and graphs
    g.llm_generate(model, [3, 4, 5], max_new_tokens=20)
    assert dec.builds == 3  # a new prompt length: its graph
    g.llm_logits(model, [3, 4, 5])
    assert decoder_of(model) is dec and dec.builds == 4  # every position's logits: a graph of their own


def test_trained_values_are_read_and_replaced_weights_rebuild(tmp_path):
    model = g.llm_load(_file(tmp_path, "llama", "f32"))
    first = g.llm_generate(model, PROMPT, max_new_tokens=10)
    dec = decoder_of(model)
    w = model.blocks[0].ffn_down.W
    w.data = w.data * -3.0  # in place, as an optimizer step writes: the same graphs read it
    after = g.llm_generate(model, PROMPT, max_new_tokens=10)
    assert decoder_of(model) is dec
    assert after.tolist() == _greedy_by_forward(model, PROMPT, 10) and after.tolist() != first.tolist()
    model.blocks[0].ffn_down.W = g.ag_param(w.data)  # a new tensor: a new decoder reads it
    assert g.llm_generate(model, PROMPT, max_new_tokens=10).tolist() == after.tolist()
    assert decoder_of(model) is not dec


def test_sampling_is_reproducible_by_seed(tmp_path):
    model = g.llm_load(_file(tmp_path, "gpt2", "f32"))
    kw = dict(max_new_tokens=25, greedy=False, temperature=1.5)
    a = g.llm_generate(model, PROMPT, seed=1, **kw)
    assert a.tolist() == g.llm_generate(model, PROMPT, seed=1, **kw).tolist()
    assert a.tolist() != g.llm_generate(model, PROMPT, seed=2, **kw).tolist()
    greedy = g.llm_generate(model, PROMPT, max_new_tokens=25).tolist()
    assert g.llm_generate(model, PROMPT, seed=3, top_k=1, **kw).tolist() == greedy
    assert g.llm_generate(model, PROMPT, seed=3, top_p=1e-6, **kw).tolist() == greedy
    assert g.llm_generate(model, PROMPT, seed=3, top_k=3, top_p=0.9, **kw).tolist() != greedy


def test_stop_ids_end_the_continuation(tmp_path):
    model = g.llm_load(_file(tmp_path, "gpt2", "f32"))
    full = g.llm_generate(model, PROMPT, max_new_tokens=20).tolist()
    stop = full[5]
    got = g.llm_generate(model, PROMPT, max_new_tokens=20, stop_ids=[stop]).tolist()
    assert got == full[:full.index(stop) + 1]
    assert g.llm_generate(model, PROMPT, max_new_tokens=0).shape == (0,)


def test_clear_errors(tmp_path):
    model = g.llm_load(_file(tmp_path, "llama", "f32"))  # context 64
    with pytest.raises(g.GGMLError, match="exceed the model's context length of 64"):
        g.llm_generate(model, PROMPT, max_new_tokens=61)
    assert g.llm_generate(model, PROMPT, max_new_tokens=60).shape == (60,)  # exactly the context
    for kw, match in ((dict(max_new_tokens=-1), "max_new_tokens"), (dict(max_new_tokens=2.5), "max_new_tokens"),
                      (dict(greedy=False, temperature=0.0), "temperature"),
                      (dict(greedy=False, top_p=0.0), "top_p"), (dict(top_k=-1), "top_k"),
                      (dict(stop_ids=["x"]), "stop_ids")):
        with pytest.raises(g.GGMLError, match=match):
            g.llm_generate(model, PROMPT, **kw)
    for bad, match in (([], "non-empty"), ([1, 40], "0..39"), ([[1]], "1-D")):
        with pytest.raises(g.GGMLError, match=match):
            g.llm_generate(model, bad)
    with pytest.raises(g.GGMLError, match="llm_load"):
        g.llm_generate(g.ag_gpt(5, d_model=8, n_heads=2, n_layers=1), [1])


def test_models_built_in_ggmlpy_generate_and_the_cache_is_padded_to_256():
    g.manual_seed(0)
    model = g.ag_llama(50, d_model=32, n_heads=4, n_kv_heads=2, n_layers=1, d_ff=64, context=1024, tied=True)
    got = g.llm_generate(model, PROMPT, max_new_tokens=8)
    assert got.tolist() == _greedy_by_forward(model, PROMPT, 8)
    assert decoder_of(model).n_cache == 256
    g.llm_generate(model, PROMPT, max_new_tokens=300)
    assert decoder_of(model).n_cache == 512
    assert sorted(decoder_of(model).steps) == [256, 512]  # a decode step per attended span, as llama.cpp's n_kv
