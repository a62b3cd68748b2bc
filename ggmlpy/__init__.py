"""ggmlpy: ggml from Python, with ggmlR's API.

Layers, bottom up (each imports only from those below it; pyproject.toml's import-linter
contracts state them and tests/test_layers.py checks them):
  bindings/   cffi over libggml (found, loaded and version-checked at import)
  core/       the checked ggml_* API: contexts, tensors, ops, graphs, backends and devices,
              the allocator and scheduler, ggml-opt, quantization; kernels/ are ggmlpy's own C ops
  graph/      building and running whole graphs, for every front end
  runtime/    per-device and per-thread state (autograd's modes in runtime/autograd_state.py),
              memory pools with generation counters, the eager executor's cached op graphs;
              io/ beside it reads and writes GGUF files
  tensor.py   ag tensors (R matrix shapes, on a device)
  autograd/   the tape, VJP/JVP rule tables, checkpointing, forward-mode AD, compiling; it sets
              the tensors' operators (autograd/tensor_methods.py)
  nn/, optim/, train/   layers, optimizers, fit loops and model files
  keras/, onnx/, quant/ the Keras-like API, ONNX import, GGUF and quantized ag tensors
  extras/     ggmlR's add-ons: matrix drop-ins, model-parallel forwards, single-cell tasks
  cli/        `python -m ggmlpy`, the demos, info()

The flat namespace is ggmlR's: every exported name is here, as in R.
"""
from .bindings import GGML_VERSION, GGMLLoadError, found
from .core.api import *  # noqa: F401,F403
from .core.api import __all__ as _core_all
from .errors import DeviceError, GGMLError, StaleTensorError
from .autograd import eager_numpy  # noqa: F401  (ggmlpy.eager_numpy.add: numpy in, numpy out)
from .core import graph_alloc  # noqa: F401
from .cli.info import info
from .core.device import enable_software_vulkan, software_vulkan_enabled
from .runtime.state import ag_default_device, ag_device, ag_dtype, release_device, set_cache_limits
from .tensor import AGTensor, ag_param, ag_tensor, ag_to_device
from .autograd import *  # noqa: F401,F403
from .autograd import ag_ops as _ag_ops
from .nn import *  # noqa: F401,F403
from .nn import __all__ as _nn_all
from .optim import *  # noqa: F401,F403
from .optim import __all__ as _optim_all
from .train import *  # noqa: F401,F403
from .train import __all__ as _train_all
from .random import get_rng_state, manual_seed, set_rng_state
from ._version import __version__

__all__ = list(_core_all) + ["GGML_VERSION", "GGMLLoadError", "GGMLError", "StaleTensorError",
                             "DeviceError", "info", "found",
                             "AGTensor", "ag_tensor", "ag_param", "ag_to_device", "ag_device",
                             "ag_default_device", "ag_dtype", "with_grad_tape", "backward", "no_grad",
                             "tape_bytes", "tape_report", "ag_gradcheck", "GradMap", "zero_grad", "manual_seed",
                             "ag_checkpoint", "CheckpointReplayError",
                             "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual",
                             "jvp", "hvp", "jacfwd", "ag_compile", "ag_backward_graph",
                             "get_rng_state", "set_rng_state", "enable_software_vulkan",
                             "software_vulkan_enabled", "release_device", "set_cache_limits"]
__all__ += _ag_ops + _nn_all + _optim_all + _train_all

from .core import backend_api  # noqa: E402
from .core.backend_api import *  # noqa: F401,F403,E402
__all__ += backend_api.__all__
from . import keras  # noqa: E402
from .keras import *  # noqa: F401,F403,E402
__all__ += keras.__all__
from .quant import *  # noqa: F401,F403,E402
from .quant import __all__ as _quant_all  # noqa: E402
__all__ += [n for n in _quant_all if n not in __all__]
from .onnx import *  # noqa: F401,F403,E402
from .onnx import __all__ as _onnx_all  # noqa: E402
__all__ += _onnx_all

# ggmlR's calling conventions and small helpers
from .runtime.state import ag_default_dtype, ag_device_name  # noqa: E402
from .params import ParamList  # noqa: E402
from .train.data import Batch  # noqa: E402
from .random import ggml_set_seed  # noqa: E402
from .train.parallel import dp_train  # noqa: E402
from .keras.functional import nn_topo_sort  # noqa: E402
__all__ += ["ag_default_dtype", "ag_device_name", "ParamList", "Batch", "ggml_set_seed", "dp_train", "nn_topo_sort"]

# ggmlR's add-ons and ggml's meta backend
from .extras import linalg, parallel_forward, sc_umap, singlecell  # noqa: E402
from .extras.linalg import *  # noqa: F401,F403,E402
from .extras.parallel_forward import *  # noqa: F401,F403,E402
from .extras.singlecell import *  # noqa: F401,F403,E402
from .core import meta_backend  # noqa: E402
from .core.meta_backend import *  # noqa: F401,F403,E402
from .extras.sc_umap import *  # noqa: F401,F403,E402
__all__ += linalg.__all__ + parallel_forward.__all__ + singlecell.__all__ + meta_backend.__all__ + sc_umap.__all__
