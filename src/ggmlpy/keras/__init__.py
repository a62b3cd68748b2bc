"""ggmlR's Keras-like model API: Sequential and Functional models trained by ggml's ggml_opt loop.

Samples are rows (R's Keras convention): x [N, F], sequences [N, T, C], images [N, H, W, C].
"""
from .api import *  # noqa: F401,F403
from .callbacks import (ggml_callback_early_stopping, ggml_schedule_cosine_decay,  # noqa: F401
                        ggml_schedule_reduce_on_plateau, ggml_schedule_step_decay)
from .history import ggml_history, ggml_training_history  # noqa: F401
from .layers import (GRU, LSTM, Add, BatchNorm, Concatenate, Conv1D, Conv2D, Dense, Dropout,  # noqa: F401
                     Embedding, Flatten, GlobalAveragePooling2D, GlobalMaxPooling2D, Layer, MaxPooling2D)
from .io import ggml_load_model, ggml_load_weights, ggml_save_model, ggml_save_weights  # noqa: F401
from .marshal import MarshaledModel, ggml_marshal_model, ggml_unmarshal_model  # noqa: F401
from ..core.opt import *  # noqa: F401,F403  (ggml-opt's bindings, exported with the Keras-like API as in ggmlR)
from ..core.opt import __all__ as _opt_all
from .fit_opt import ggml_fit_opt  # noqa: F401
from .functional import Functional, Node  # noqa: F401
from .model import CE_LOSSES, MSE_LOSSES  # noqa: F401
from .sequential import Sequential  # noqa: F401
from ..errors import GGMLError  # noqa: F401

from . import marshal

marshal.install_pickling()  # models pickle through ggml_marshal_model

KNOWN_LOSSES = CE_LOSSES | MSE_LOSSES

__all__ = [
    "ggml_model_sequential", "ggml_layer_dense", "ggml_layer_conv_2d", "ggml_layer_conv_1d",
    "ggml_layer_max_pooling_2d", "ggml_layer_global_average_pooling_2d", "ggml_layer_global_max_pooling_2d",
    "ggml_layer_flatten", "ggml_layer_batch_norm", "ggml_layer_dropout", "ggml_layer_embedding",
    "ggml_layer_lstm", "ggml_layer_gru", "ggml_input", "ggml_model", "ggml_layer_add", "ggml_layer_concatenate",
    "ggml_dense", "ggml_batch_norm", "ggml_embedding", "ggml_lstm", "ggml_gru", "ggml_apply",
    "ggml_compile", "ggml_fit", "ggml_evaluate", "ggml_predict", "ggml_predict_classes",
    "ggml_freeze_weights", "ggml_unfreeze_weights", "ggml_get_layer", "ggml_pop_layer", "ggml_model_summary",
    "nn_infer_shapes",
    "ggml_default_mlp", "ggml_training_history", "ggml_history", "ggml_model_backend",
    "ggml_callback_early_stopping", "ggml_schedule_step_decay", "ggml_schedule_cosine_decay",
    "ggml_schedule_reduce_on_plateau",
    "Sequential", "Functional", "Node", "Layer", "Dense", "Conv1D", "Conv2D", "MaxPooling2D",
    "GlobalAveragePooling2D", "GlobalMaxPooling2D", "Flatten", "BatchNorm", "Dropout", "Embedding", "LSTM", "GRU",
    "Add", "Concatenate",
    "ggml_save_weights", "ggml_load_weights", "ggml_save_model", "ggml_load_model",
    "ggml_marshal_model", "ggml_unmarshal_model", "MarshaledModel",
] + _opt_all + ["ggml_fit_opt"]
