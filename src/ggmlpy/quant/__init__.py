"""ggml's types and quantization (ggmlR's R/quants.R), reading GGUF files (R/gguf.R), and llama.cpp's
model files as ag_* models (llm_load)."""
from ..core.types import *  # noqa: F401,F403
from ..core.types import __all__ as _types_all
from ..core.quants import *  # noqa: F401,F403
from ..core.quants import __all__ as _kernels_all
from ..core.quants import dequantize, quantize  # noqa: F401
from ..io.gguf_file import *  # noqa: F401,F403
from ..io.gguf_file import __all__ as _gguf_all

from .ag import ag_quantize  # noqa: F401
from .llm import llm_load  # noqa: F401
from .llm_decode import llm_generate, llm_logits  # noqa: F401
from .llm_export import llm_save  # noqa: F401
from .lora import ag_lora, llm_load_lora, llm_save_lora, lora_merge, lora_parameters  # noqa: F401

__all__ = list(_types_all) + list(_kernels_all) + list(_gguf_all) + ["ag_quantize", "llm_load", "llm_logits"] + [
    "llm_save", "ag_lora", "lora_parameters", "lora_merge", "llm_save_lora",
    "llm_load_lora", "llm_generate"]
