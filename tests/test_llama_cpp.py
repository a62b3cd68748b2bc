"""llm_logits against llama.cpp itself on the same tiny files (llama-cpp-python from the pinned
sdist, in a child process; skipped with the reason where it is not built)."""
import numpy as np
import pytest

import ggmlpy as g

from llama_cpp_ref import llama_cpp_logits, require_llama_cpp
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
