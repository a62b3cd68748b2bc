"""llm_logits and llm_generate on Vulkan: llama.cpp's inference graph runs there too (a GPU, or
Mesa's lavapipe, on which the last test runs this file again in a child)."""
import pytest

import ggmlpy as g

from lavapipe import rerun_on_lavapipe
from test_llm_gpt2 import tiny_gpt2
from test_llm_load import TOKENS, nmse, tiny

pytest.importorskip("gguf", reason="the gguf package (llama.cpp's GGUF writer) writes the test models")

needs_vulkan = pytest.mark.skipif(not any(d.name.startswith("Vulkan") for d in g.devices()),
                                  reason="needs a Vulkan device")


@needs_vulkan
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_inference_graph_on_vulkan_gives_the_cpus_logits_and_tokens(tmp_path, family):
    path = tiny(tmp_path, "f32")[0] if family == "llama" else tiny_gpt2(tmp_path, "f32")[0]
    cpu, vulkan = g.llm_load(path), g.llm_load(path, device="vulkan")
    # ggml-vulkan multiplies some f32 products in f16 (tests/conftest.py): measured 3e-7 on lavapipe
    assert nmse(g.llm_logits(vulkan, TOKENS), g.llm_logits(cpu, TOKENS)) < 1e-5
    want = g.llm_generate(cpu, TOKENS[:4], max_new_tokens=10).tolist()
    assert g.llm_generate(vulkan, TOKENS[:4], max_new_tokens=10).tolist() == want


def test_on_lavapipe():
    rerun_on_lavapipe("tests/test_llm_vulkan.py")
