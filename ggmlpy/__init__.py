"""ggmlpy: ggml from Python, with ggmlR's API.

Layers, bottom up:
  bindings/   cffi over libggml (found, loaded and version-checked at import)
  core/       the low-level ggml_* API: contexts, tensors, ops, graphs
  backend/    devices, memory pools with generation counters, cached op graphs
  tensor.py   ag tensors (R matrix shapes, on a device)
  autograd/   the tape, VJP/JVP rule tables, checkpointing, forward-mode AD
  nn/, optim/ layers, optimizers and training
"""
from .bindings import GGML_VERSION, GGMLLoadError, found
from .core.api import *  # noqa: F401,F403
from .core.api import __all__ as _core_all
from .errors import DeviceError, GGMLError, StaleTensorError
from . import backend  # noqa: F401
from .backend import graph_alloc  # noqa: F401
from .info import info

__version__ = "0.1.0"
__all__ = list(_core_all) + ["GGML_VERSION", "GGMLLoadError", "GGMLError", "StaleTensorError",
                             "DeviceError", "info", "found"]
