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
from .backend import eager_numpy, graph_alloc  # noqa: F401
from .info import info
from .backend.device import enable_software_vulkan, software_vulkan_enabled
from .backend.state import ag_default_device, ag_device, ag_dtype, release_device, set_cache_limits
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

__version__ = "0.1.0"
__all__ = list(_core_all) + ["GGML_VERSION", "GGMLLoadError", "GGMLError", "StaleTensorError",
                             "DeviceError", "info", "found",
                             "AGTensor", "ag_tensor", "ag_param", "ag_to_device", "ag_device",
                             "ag_default_device", "ag_dtype", "with_grad_tape", "backward", "no_grad",
                             "tape_bytes", "tape_report", "ag_gradcheck", "GradMap", "zero_grad", "manual_seed", "ag_checkpoint", "CheckpointReplayError",
                             "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual",
                             "jvp", "hvp", "jacfwd", "ag_compile", "ag_backward_graph",
                             "get_rng_state", "set_rng_state", "enable_software_vulkan",
                             "software_vulkan_enabled", "release_device", "set_cache_limits"] + _ag_ops + _nn_all + _optim_all + _train_all
from .core import backend_api  # noqa: E402
from .core.backend_api import *  # noqa: F401,F403,E402
__all__ += backend_api.__all__
from .keras import *  # noqa: F401,F403,E402
__all__ += keras.__all__  # noqa: F405
from .quant import *; from .quant import __all__ as _quant_all; __all__ += [n for n in _quant_all if n not in __all__]  # noqa: F401,F403,E402,E702
from .onnx import *  # noqa: F401,F403,E402
from .onnx import __all__ as _onnx_all  # noqa: E402
__all__ += _onnx_all
from .backend.state import ag_default_dtype, ag_device_name  # noqa: E402  (ggmlR's calling conventions, issue 16)
__all__ += ["ag_default_dtype", "ag_device_name"]
from .params import ParamList  # noqa: E402
__all__ += ["ParamList"]
from .train.data import Batch  # noqa: E402
__all__ += ["Batch"]
from .random import ggml_set_seed  # noqa: E402
__all__ += ["ggml_set_seed"]
from .train.parallel import dp_train  # noqa: E402
__all__ += ["dp_train"]
from . import linalg, parallel_forward, singlecell  # noqa: E402  (issue 16, suite2: matrix drop-ins, model-parallel forwards, single-cell tasks)
from .linalg import *; from .parallel_forward import *; from .singlecell import *; from .keras.functional import nn_topo_sort  # noqa: F401,F403,E402,E702
__all__ += linalg.__all__ + parallel_forward.__all__ + singlecell.__all__ + ["nn_topo_sort"]
from .core import meta_backend; from .core.meta_backend import *; __all__ += meta_backend.__all__  # noqa: F401,F403,E402,E702  (issue 16: ggml's meta backend)
from . import sc_umap; from .sc_umap import *; __all__ += sc_umap.__all__  # noqa: F401,F403,E402,E702  (issue 16: single-cell op "umap")
