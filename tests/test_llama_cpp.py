"""llm_logits against llama.cpp itself on the same tiny files (llama-cpp-python from the pinned
sdist, in a child process; skipped with the reason where it is not built)."""
import numpy as np
import pytest

import ggmlpy as g

from llama_cpp_ref import llama_cpp_logits, require_llama_cpp
from llm_files import hf_weights, write_llama
from test_llm_load import TOKENS, nmse, tiny

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")


@pytest.mark.parametrize("qtype,d,n_head,n_head_kv,tied", [
    ("f32", 64, 4, 2, False),   # grouped-query attention
    ("f32", 64, 2, 2, True),    # tied head
    ("f16", 64, 4, 2, False),
    ("bf16", 64, 2, 1, False),
    ("q8_0", 64, 4, 1, False),
    ("q4_0", 64, 4, 2, True),
    ("q4_K", 256, 4, 2, False),
])
def test_llm_logits_equal_llama_cpp(tmp_path, qtype, d, n_head, n_head_kv, tied):
    require_llama_cpp()
    path, _, _ = tiny(tmp_path, qtype, n_head=n_head, n_head_kv=n_head_kv, tied=tied, d=d,
                      ff=d if d == 256 else 96)
    want = llama_cpp_logits(path, TOKENS)
    got = g.llm_logits(g.llm_load(path), TOKENS)
    assert got.shape == want.shape
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))


@pytest.mark.parametrize("n_tokens", [128, 600])
def test_llm_logits_equal_llama_cpp_on_a_larger_q8_0_model_at_length(tmp_path, n_tokens):
    """Large and long enough that attention summed in another order than llama.cpp's (the ag_*
    forward's flash attention, measured: NMSE 4.9e-5 at 128 tokens, one argmax apart) moves a q8_0
    product's 8-bit activations by a step; 600 tokens take llama.cpp's two micro-batches of up to
    512 and attended spans of 256, 512 and 768 cells."""
    require_llama_cpp()
    d, n_head, n_head_kv = 256, 8, 2
    p = hf_weights(np.random.default_rng(0), 256, d, 4, n_head, n_head_kv, 512, False)
    path = tmp_path / "q8_0.gguf"
    write_llama(path, p, n_head, n_head_kv, "q8_0", context=1024)
    tokens = np.random.default_rng(100).integers(0, 256, size=n_tokens).tolist()
    want = llama_cpp_logits(path, tokens)
    got = g.llm_logits(g.llm_load(path), tokens)
    assert got.shape == want.shape == (n_tokens, 256)
    assert nmse(got, want) < 1e-5
    np.testing.assert_array_equal(got.argmax(1), want.argmax(1))
