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

The flat namespace is ggmlR's: every exported name is here, as in R. The ag_* API (core,
autograd, nn, optim) is imported with the package; the other families (training loops, the
Keras-like API, ONNX, quantization and GGUF, the add-ons, the CLI) are imported on first use
of one of their names, through PEP 562's module __getattr__, so that `import ggmlpy` does not
pay for onnx (its import alone takes longer than all of the rest) until a program touches it.
dir(), `from ggmlpy import *` and every name mean what they meant when all loaded at once:
_LAZY_FAMILIES keeps the order their star-imports ran in (a later family's name wins), no
eager import binds a name a lazy family gives, unless to the same object (tests/test_namespace.py).
"""
import importlib as _importlib
import weakref as _weakref

from .bindings import GGML_VERSION, GGMLLoadError, found
from .core.api import *  # noqa: F401,F403
from .core.api import __all__ as _core_all
from .errors import DeviceError, DeviceLostError, GGMLError, StaleTensorError
from .autograd import eager_numpy  # noqa: F401  (ggmlpy.eager_numpy.add: numpy in, numpy out)
from .core import graph_alloc  # noqa: F401
from .core.registry import enable_software_vulkan, software_vulkan_enabled
from .core.rpc import set_rpc_timeout
from .runtime.state import ag_default_device, ag_device, ag_dtype, release_device, set_cache_limits
from .tensor import AGTensor, ag_param, ag_tensor, ag_to_device
from .autograd import *  # noqa: F401,F403
from .autograd import ag_ops as _ag_ops
from .nn import *  # noqa: F401,F403
from .nn import __all__ as _nn_all
from .optim import *  # noqa: F401,F403
from .optim import __all__ as _optim_all
from .random import get_rng_state, manual_seed, set_rng_state
from ._version import __version__

# ggmlR's calling conventions and small helpers
from .runtime.state import ag_default_dtype, ag_device_name
from .params import ParamList
from .random import ggml_set_seed
from .core.threads import get_dynamic_threads, get_num_threads, set_dynamic_threads, set_num_threads
from . import _sigint

# Ctrl-C never lands half-way through a release (see _sigint): weakref.finalize runs the
# contexts' and forward-AD levels' finalizers, so its call is marked too.
_sigint.mark(_weakref.finalize.__call__)
_sigint.install()

__all__ = list(_core_all) + ["GGML_VERSION", "GGMLLoadError", "GGMLError", "StaleTensorError",
                             "DeviceError", "DeviceLostError", "set_rpc_timeout", "info", "found",
                             "AGTensor", "ag_tensor", "ag_param", "ag_to_device", "ag_device",
                             "ag_default_device", "ag_dtype", "with_grad_tape", "backward", "no_grad",
                             "tape_bytes", "tape_report", "ag_gradcheck", "GradMap", "zero_grad", "manual_seed",
                             "ag_checkpoint", "CheckpointReplayError",
                             "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual",
                             "jvp", "hvp", "jacfwd", "ag_compile", "ag_backward_graph",
                             "get_rng_state", "set_rng_state", "enable_software_vulkan",
                             "software_vulkan_enabled", "release_device", "set_cache_limits",
                             "get_num_threads", "set_num_threads",
                             "get_dynamic_threads", "set_dynamic_threads"]
__all__ += _ag_ops + _nn_all + _optim_all + ["ag_default_dtype", "ag_device_name", "ParamList", "ggml_set_seed"]

# The families loaded on first use: (module, the names it gives the namespace), in the order
# their star-imports ran when all loaded at import. tests/test_namespace.py checks each tuple
# against its module's __all__.
_LAZY_FAMILIES = (
    (".cli.info", ("info",)),
    (".train", ("ag_accuracy", "ag_dataloader", "ag_evaluate", "ag_fit", "ag_load_model", "ag_predict",
                "ag_save_model", "early_stopping", "scheduler_step")),
    (".core.backend_api", (
        "ggml_backend_buffer_clear", "ggml_backend_buffer_free", "ggml_backend_buffer_get_size",
        "ggml_backend_buffer_get_usage", "ggml_backend_buffer_is_host", "ggml_backend_buffer_is_multi_buffer",
        "ggml_backend_buffer_name", "ggml_backend_buffer_reset", "ggml_backend_buffer_set_usage",
        "ggml_backend_buffer_usage_any", "ggml_backend_buffer_usage_compute",
        "ggml_backend_buffer_usage_weights", "ggml_backend_dev_by_name", "ggml_backend_dev_by_type",
        "ggml_backend_dev_description", "ggml_backend_dev_get", "ggml_backend_dev_get_props",
        "ggml_backend_dev_init", "ggml_backend_dev_memory", "ggml_backend_dev_name",
        "ggml_backend_dev_offload_op", "ggml_backend_dev_supports_buft", "ggml_backend_dev_supports_op",
        "ggml_backend_dev_type", "ggml_backend_device_register", "ggml_backend_device_type_accel",
        "ggml_backend_device_type_cpu", "ggml_backend_device_type_gpu", "ggml_backend_device_type_igpu",
        "ggml_backend_event_free", "ggml_backend_event_new", "ggml_backend_event_record",
        "ggml_backend_event_synchronize", "ggml_backend_event_wait", "ggml_backend_get_device",
        "ggml_backend_graph_compute_async", "ggml_backend_graph_plan_compute", "ggml_backend_graph_plan_create",
        "ggml_backend_graph_plan_free", "ggml_backend_init_by_type", "ggml_backend_load",
        "ggml_backend_load_all", "ggml_backend_multi_buffer_alloc_buffer",
        "ggml_backend_multi_buffer_set_usage", "ggml_backend_reg_by_name", "ggml_backend_reg_count",
        "ggml_backend_reg_dev_count", "ggml_backend_reg_dev_get", "ggml_backend_reg_get",
        "ggml_backend_reg_name", "ggml_backend_register", "ggml_backend_sched_alloc_graph",
        "ggml_backend_sched_free", "ggml_backend_sched_get_backend", "ggml_backend_sched_get_n_backends",
        "ggml_backend_sched_get_n_copies", "ggml_backend_sched_get_n_splits",
        "ggml_backend_sched_get_tensor_backend", "ggml_backend_sched_graph_compute_async",
        "ggml_backend_sched_reserve", "ggml_backend_sched_reset", "ggml_backend_sched_set_tensor_backend",
        "ggml_backend_sched_synchronize", "ggml_backend_synchronize", "ggml_backend_tensor_copy_async",
        "ggml_backend_tensor_get_and_sync", "ggml_backend_tensor_get_async", "ggml_backend_tensor_get_data",
        "ggml_backend_tensor_set_async", "ggml_backend_tensor_set_data", "ggml_backend_unload",
        "ggml_cpu_features", "ggml_cpu_get_rvv_vlen", "ggml_cpu_get_sve_cnt", "ggml_cpu_has_amx_int8",
        "ggml_cpu_has_arm_fma", "ggml_cpu_has_avx", "ggml_cpu_has_avx2", "ggml_cpu_has_avx512",
        "ggml_cpu_has_avx512_bf16", "ggml_cpu_has_avx512_vbmi", "ggml_cpu_has_avx512_vnni",
        "ggml_cpu_has_avx_vnni", "ggml_cpu_has_bmi2", "ggml_cpu_has_dotprod", "ggml_cpu_has_f16c",
        "ggml_cpu_has_fma", "ggml_cpu_has_fp16_va", "ggml_cpu_has_llamafile", "ggml_cpu_has_matmul_int8",
        "ggml_cpu_has_neon", "ggml_cpu_has_riscv_v", "ggml_cpu_has_sme", "ggml_cpu_has_sse3",
        "ggml_cpu_has_ssse3", "ggml_cpu_has_sve", "ggml_cpu_has_vsx", "ggml_cpu_has_vxe",
        "ggml_cpu_has_wasm_simd", "ggml_gallocr_free", "ggml_gallocr_reserve", "ggml_vulkan_available",
        "ggml_vulkan_backend_name", "ggml_vulkan_device_caps", "ggml_vulkan_device_count",
        "ggml_vulkan_device_description", "ggml_vulkan_device_groups", "ggml_vulkan_device_memory",
        "ggml_vulkan_free", "ggml_vulkan_hard_exit_available", "ggml_vulkan_init", "ggml_vulkan_is_backend",
        "ggml_vulkan_list_devices", "ggml_vulkan_split_row_ranges", "ggml_vulkan_status", "Device", "Registry",
        "Event", "GraphPlan", "MultiBuffer",
    )),
    (".keras", (
        "ggml_model_sequential", "ggml_layer_dense", "ggml_layer_conv_2d", "ggml_layer_conv_1d",
        "ggml_layer_max_pooling_2d", "ggml_layer_global_average_pooling_2d", "ggml_layer_global_max_pooling_2d",
        "ggml_layer_flatten", "ggml_layer_batch_norm", "ggml_layer_dropout", "ggml_layer_embedding",
        "ggml_layer_lstm", "ggml_layer_gru", "ggml_input", "ggml_model", "ggml_layer_add",
        "ggml_layer_concatenate", "ggml_dense", "ggml_batch_norm", "ggml_embedding", "ggml_lstm", "ggml_gru",
        "ggml_apply", "ggml_compile", "ggml_fit", "ggml_evaluate", "ggml_predict", "ggml_predict_classes",
        "ggml_freeze_weights", "ggml_unfreeze_weights", "ggml_get_layer", "ggml_pop_layer",
        "ggml_model_summary", "nn_infer_shapes", "ggml_default_mlp", "ggml_training_history", "ggml_history",
        "ggml_model_backend",
        "ggml_callback_early_stopping", "ggml_schedule_step_decay", "ggml_schedule_cosine_decay",
        "ggml_schedule_reduce_on_plateau", "Sequential", "Functional", "Node", "Layer", "Dense", "Conv1D",
        "Conv2D", "MaxPooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling2D", "Flatten", "BatchNorm",
        "Dropout", "Embedding", "LSTM", "GRU", "Add", "Concatenate", "ggml_save_weights", "ggml_load_weights",
        "ggml_save_model", "ggml_load_model", "ggml_marshal_model", "ggml_unmarshal_model", "MarshaledModel",
        "ggml_opt_alloc", "ggml_opt_context_optimizer_type", "ggml_opt_dataset_data", "ggml_opt_dataset_free",
        "ggml_opt_dataset_get_batch", "ggml_opt_dataset_init", "ggml_opt_dataset_labels",
        "ggml_opt_dataset_ndata", "ggml_opt_dataset_shuffle", "ggml_opt_dataset_weights",
        "ggml_opt_default_params", "ggml_opt_epoch", "ggml_opt_eval", "ggml_opt_fit", "ggml_opt_free",
        "ggml_opt_get_lr", "ggml_opt_grad_acc", "ggml_opt_init", "ggml_opt_init_for_fit", "ggml_opt_inputs",
        "ggml_opt_labels", "ggml_opt_loss", "ggml_opt_loss_type_cross_entropy", "ggml_opt_loss_type_mean",
        "ggml_opt_loss_type_mse", "ggml_opt_loss_type_sum", "ggml_opt_loss_type_weighted_mse",
        "ggml_opt_ncorrect", "ggml_opt_optimizer_name", "ggml_opt_optimizer_type_adamw",
        "ggml_opt_optimizer_type_sgd", "ggml_opt_outputs", "ggml_opt_pred", "ggml_opt_prepare_alloc",
        "ggml_opt_reset", "ggml_opt_result_accuracy", "ggml_opt_result_free", "ggml_opt_result_init",
        "ggml_opt_result_loss", "ggml_opt_result_ndata", "ggml_opt_result_pred", "ggml_opt_result_reset",
        "ggml_opt_set_lr", "ggml_opt_static_graphs", "ggml_fit_opt",
    )),
    (".quant", (
        "GGML_TYPE_BF16", "GGML_TYPE_F16", "GGML_TYPE_F32", "GGML_TYPE_F64", "GGML_TYPE_I16", "GGML_TYPE_I32",
        "GGML_TYPE_I64", "GGML_TYPE_I8", "GGML_TYPE_IQ1_M", "GGML_TYPE_IQ1_S", "GGML_TYPE_IQ2_S",
        "GGML_TYPE_IQ2_XS", "GGML_TYPE_IQ2_XXS", "GGML_TYPE_IQ3_S", "GGML_TYPE_IQ3_XXS", "GGML_TYPE_IQ4_NL",
        "GGML_TYPE_IQ4_XS", "GGML_TYPE_MXFP4", "GGML_TYPE_NVFP4", "GGML_TYPE_Q1_0", "GGML_TYPE_Q2_0",
        "GGML_TYPE_Q2_K", "GGML_TYPE_Q3_K", "GGML_TYPE_Q4_0", "GGML_TYPE_Q4_1", "GGML_TYPE_Q4_K",
        "GGML_TYPE_Q5_0", "GGML_TYPE_Q5_1", "GGML_TYPE_Q5_K", "GGML_TYPE_Q6_K", "GGML_TYPE_Q8_0",
        "GGML_TYPE_Q8_1", "GGML_TYPE_Q8_K", "GGML_TYPE_TQ1_0", "GGML_TYPE_TQ2_0", "GGML_TYPE_COUNT",
        "ggml_type_size", "ggml_blck_size", "ggml_type_sizef", "ggml_row_size", "ggml_is_quantized",
        "ggml_quant_block_info", "ggml_ftype_to_ggml_type", "dequantize_row_iq1_m", "dequantize_row_iq1_s",
        "dequantize_row_iq2_s", "dequantize_row_iq2_xs", "dequantize_row_iq2_xxs", "dequantize_row_iq3_s",
        "dequantize_row_iq3_xxs", "dequantize_row_iq4_nl", "dequantize_row_iq4_xs", "dequantize_row_mxfp4",
        "dequantize_row_nvfp4", "dequantize_row_q1_0", "dequantize_row_q2_0", "dequantize_row_q2_K",
        "dequantize_row_q3_K", "dequantize_row_q4_0", "dequantize_row_q4_1", "dequantize_row_q4_K",
        "dequantize_row_q5_0", "dequantize_row_q5_1", "dequantize_row_q5_K", "dequantize_row_q6_K",
        "dequantize_row_q8_0", "dequantize_row_q8_K", "dequantize_row_tq1_0", "dequantize_row_tq2_0",
        "quantize_iq1_m", "quantize_iq1_s", "quantize_iq2_s", "quantize_iq2_xs", "quantize_iq2_xxs",
        "quantize_iq3_s", "quantize_iq3_xxs", "quantize_iq4_nl", "quantize_iq4_xs", "quantize_mxfp4",
        "quantize_nvfp4", "quantize_q1_0", "quantize_q2_0", "quantize_q2_K", "quantize_q3_K", "quantize_q4_0",
        "quantize_q4_1", "quantize_q4_K", "quantize_q5_0", "quantize_q5_1", "quantize_q5_K", "quantize_q6_K",
        "quantize_q8_0", "quantize_row_iq2_s_ref", "quantize_row_iq3_s_ref", "quantize_row_iq3_xxs_ref",
        "quantize_row_iq4_nl_ref", "quantize_row_iq4_xs_ref", "quantize_row_mxfp4_ref",
        "quantize_row_nvfp4_ref", "quantize_row_q1_0_ref", "quantize_row_q2_0_ref", "quantize_row_q2_K_ref",
        "quantize_row_q3_K_ref", "quantize_row_q4_0_ref", "quantize_row_q4_1_ref", "quantize_row_q4_K_ref",
        "quantize_row_q5_0_ref", "quantize_row_q5_1_ref", "quantize_row_q5_K_ref", "quantize_row_q6_K_ref",
        "quantize_row_q8_0_ref", "quantize_row_q8_1_ref", "quantize_row_q8_K_ref", "quantize_row_tq1_0_ref",
        "quantize_row_tq2_0_ref", "quantize_tq1_0", "quantize_tq2_0", "ggml_quantize_chunk",
        "ggml_quantize_init", "ggml_quantize_free", "ggml_quantize_requires_imatrix", "iq2xs_init_impl",
        "iq2xs_free_impl", "iq3xs_init_impl", "iq3xs_free_impl", "ggml_validate_row_data", "gguf_load",
        "gguf_free", "gguf_metadata", "gguf_tensor_names", "gguf_tensor_info", "gguf_tensor_data", "GGUFFile",
        "ag_quantize", "llm_load", "llm_logits",
        "llm_save", "ag_lora", "lora_parameters", "lora_merge", "llm_save_lora", "llm_load_lora",
        "llm_generate",
    )),
    (".onnx", (
        "onnx_load", "onnx_run", "onnx_summary", "onnx_inputs", "onnx_profile", "onnx_device_info", "OnnxModel",
        "OnnxError",
    )),
    (".train.data", ("Batch",)),
    (".train.parallel", ("dp_train",)),
    (".keras.functional", ("nn_topo_sort",)),
    (".extras.linalg", (
        "ggml_matmul", "ggml_matmul_f64", "ggml_crossprod", "ggml_tcrossprod", "as_gpu_matrix", "GGMLMatrix",
    )),
    (".extras.parallel_forward", (
        "ggml_pp_forward", "ggml_pp_dp_forward", "ggml_tp_dp_forward",
    )),
    (".extras.singlecell", (
        "ggml_task", "ggml_result", "ggml_ops_registry", "ggml_run", "GGMLTask", "GGMLResult", "OpEntry",
    )),
    (".core.meta_backend", (
        "ggml_backend_meta_device", "ggml_backend_meta_split_axis_name", "MetaDevice", "SplitState",
        "GGML_BACKEND_SPLIT_AXIS_0", "GGML_BACKEND_SPLIT_AXIS_1", "GGML_BACKEND_SPLIT_AXIS_2",
        "GGML_BACKEND_SPLIT_AXIS_3", "GGML_BACKEND_SPLIT_AXIS_MIRRORED", "GGML_BACKEND_SPLIT_AXIS_PARTIAL",
        "GGML_BACKEND_SPLIT_AXIS_NONE", "GGML_BACKEND_SPLIT_AXIS_UNKNOWN",
    )),
    (".extras.sc_umap", (
        "umap_find_ab", "umap_knn", "umap_fuzzy_graph", "umap_spectral_init", "umap_sgd", "umap_pcg_hash",
    )),
    (".extras.vulkan_parallel", (
        "ggml_vulkan_p2p_selftest", "ggml_vulkan_shutdown", "ggml_vulkan_split_buffer_type",
        "ggml_vulkan_split_mul_mat",
    )),
    (".extras.parsnip", ("ggmlr_parsnip_fit_classif", "ggmlr_parsnip_fit_regr")),
    (".extras.sc_anndata", ("RunGGML", "ggml_extract", "ggml_inject")),
)
# Modules reachable as attributes of the package: ggmlpy.onnx, ggmlpy.linalg, ...
_LAZY_MODULES = {
    "backend_api": ".core.backend_api", "meta_backend": ".core.meta_backend", "keras": ".keras", "quant": ".quant",
    "onnx": ".onnx", "io": ".io", "extras": ".extras", "linalg": ".extras.linalg",
    "parallel_forward": ".extras.parallel_forward", "singlecell": ".extras.singlecell", "sc_umap": ".extras.sc_umap",
    "vulkan_parallel": ".extras.vulkan_parallel",
    "cli": ".cli", "train": ".train",
}

_LAZY = {}  # name -> module; the later family wins
for _module, _names in _LAZY_FAMILIES:
    _LAZY.update(dict.fromkeys(_names, _module))
_eager = set(__all__)
__all__ += [n for n in _LAZY if n not in _eager]
del _module, _names, _eager


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(_importlib.import_module(module, __name__), name)
    elif name in _LAZY_MODULES:
        value = _importlib.import_module(_LAZY_MODULES[name], __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once: later look-ups never come here
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))
