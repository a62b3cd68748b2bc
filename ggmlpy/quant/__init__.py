"""ggml's types and quantization (ggmlR's R/quants.R), and reading GGUF files (R/gguf.R)."""
from .types import *  # noqa: F401,F403
from .types import __all__ as _types_all
from .kernels import *  # noqa: F401,F403
from .kernels import __all__ as _kernels_all
from .kernels import dequantize, quantize  # noqa: F401
from .gguf_file import *  # noqa: F401,F403
from .gguf_file import __all__ as _gguf_all

from .ag import ag_quantize  # noqa: F401

__all__ = list(_types_all) + list(_kernels_all) + list(_gguf_all) + ["ag_quantize"]
