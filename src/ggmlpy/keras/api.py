"""ggmlR's Keras-like functions, same names and arguments.

R's `model |> ggml_layer_dense(16, activation = "relu")` is
`model = ggml_layer_dense(model, 16, activation="relu")`; the first argument may also be a
Functional node (`ggml_input(...)`, or a list of nodes for add/concatenate), which returns a
new node. Methods chain too: `Sequential().add(Dense(16)).compile(...)`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.device import get_backend
from ..core.sched import Scheduler
from ..errors import GGMLError
from . import layers as keras_layers
from .fit_opt import ggml_fit_opt
from .history import ggml_training_history  # noqa: F401
from .functional import Functional, Node
from .model import _Model
from .sequential import Sequential
from .layers import r_to_ggml_shape

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike


def ggml_model_sequential(layers: Iterable[keras_layers.Layer] = ()) -> Sequential:
    """An empty Sequential model (optionally with `layers`)."""
    return Sequential(layers)


def _attach(target, layer):
    if isinstance(target, Sequential):
        if target.compiled:
            target.compiled = False  # a new layer changes the graph: compile again
        return target.add(layer)
    if isinstance(target, Node):
        if layer.input_shape is not None:
            raise GGMLError("input_shape belongs to ggml_input() in the Functional API")
        return Node(layer, [target])
    if isinstance(target, (list, tuple)) and target and all(isinstance(t, Node) for t in target):
        return Node(layer, list(target))
    raise GGMLError(f"expected a Sequential model or a Functional node, got {type(target).__name__}")


def ggml_layer_dense(model: Sequential | Node | Sequence[Node], units: int, activation: str | None = None,
                     input_shape: int | Sequence[int] | None = None, name: str | None = None,
                     trainable: bool = True) -> Sequential | Node:
    """Fully connected layer: act(x W + b), Glorot-uniform W, zero b."""
    return _attach(model, keras_layers.Dense(units, activation, name, trainable, input_shape))


def ggml_layer_conv_2d(model: Sequential | Node | Sequence[Node], filters: int, kernel_size: int | Sequence[int],
                       activation: str | None = None, input_shape: int | Sequence[int] | None = None,
                       strides: int | Sequence[int] = (1, 1), padding: str = "valid", name: str | None = None,
                       trainable: bool = True) -> Sequential | Node:
    """2-d convolution over images [N, H, W, C]; kernel_size and strides are (height, width)."""
    return _attach(model, keras_layers.Conv2D(filters, kernel_size, activation, strides, padding, name, trainable, input_shape))


def ggml_layer_conv_1d(model: Sequential | Node | Sequence[Node], filters: int, kernel_size: int | Sequence[int],
                       activation: str | None = None, input_shape: int | Sequence[int] | None = None,
                       strides: int | Sequence[int] = 1, padding: str = "valid", name: str | None = None,
                       trainable: bool = True) -> Sequential | Node:
    """1-d convolution over sequences [N, L, C] -> [N, L_out, filters]."""
    return _attach(model, keras_layers.Conv1D(filters, kernel_size, activation, strides, padding, name, trainable, input_shape))


def ggml_layer_max_pooling_2d(model: Sequential | Node | Sequence[Node], pool_size: int | Sequence[int] = (2, 2),
                              strides: int | Sequence[int] | None = None, name: str | None = None,
                              trainable: bool = True) -> Sequential | Node:
    """Max pooling, no padding; strides default to pool_size."""
    return _attach(model, keras_layers.MaxPooling2D(pool_size, strides, name, trainable))


def ggml_layer_global_average_pooling_2d(model: Sequential | Node | Sequence[Node], name: str | None = None,
                                         trainable: bool = True) -> Sequential | Node:
    """Mean over H and W for each channel."""
    return _attach(model, keras_layers.GlobalAveragePooling2D(name, trainable))


def ggml_layer_global_max_pooling_2d(model: Sequential | Node | Sequence[Node], name: str | None = None,
                                     trainable: bool = True) -> Sequential | Node:
    """Max over H and W for each channel."""
    return _attach(model, keras_layers.GlobalMaxPooling2D(name, trainable))


def ggml_layer_flatten(model: Sequential | Node | Sequence[Node], name: str | None = None,
                       trainable: bool = True) -> Sequential | Node:
    """Flatten each sample in ggml order (image element (h, w, c) -> w + W*(h + H*c))."""
    return _attach(model, keras_layers.Flatten(name, trainable))


def ggml_layer_batch_norm(model: Sequential | Node | Sequence[Node], eps: float = 1e-5, name: str | None = None,
                          trainable: bool = True, mode: str = "rms", momentum: float = 0.1) -> Sequential | Node:
    """ggmlR's batch_norm: per-sample RMS norm with learned gamma/beta; mode="batch" is a true
    batch norm with running averages (see BatchNorm)."""
    return _attach(model, keras_layers.BatchNorm(eps, name, trainable, mode, momentum))


def ggml_layer_dropout(model: Sequential | Node | Sequence[Node], rate: float, stochastic: bool = False,
                       name: str | None = None, trainable: bool = False) -> Sequential | Node:
    """ggmlR's dropout (see Dropout): identity in inference."""
    return _attach(model, keras_layers.Dropout(rate, stochastic, name, trainable))


def ggml_layer_embedding(model: Sequential | Node | Sequence[Node], vocab_size: int, dim: int,
                         input_shape: int | Sequence[int] | None = None, name: str | None = None,
                         trainable: bool = True) -> Sequential | Node:
    """Token ids [N, T] (0-based) -> vectors [N, T, dim]. Works in Sequential models too
    (ggmlR aborts there); give input_shape = T for the first layer."""
    return _attach(model, keras_layers.Embedding(vocab_size, dim, name, trainable, input_shape))


def ggml_layer_lstm(model: Sequential | Node | Sequence[Node], units: int, return_sequences: bool = False,
                    activation: str | None = "tanh", recurrent_activation: str = "sigmoid",
                    input_shape: int | Sequence[int] | None = None, name: str | None = None,
                    trainable: bool = True) -> Sequential | Node:
    """LSTM over sequences [N, T, C]: the last state [N, units], or all states [N, T, units]."""
    return _attach(model, keras_layers.LSTM(units, return_sequences, activation, recurrent_activation, name, trainable,
                                 input_shape))


def ggml_layer_gru(model: Sequential | Node | Sequence[Node], units: int, return_sequences: bool = False,
                   activation: str | None = "tanh", recurrent_activation: str = "sigmoid",
                   input_shape: int | Sequence[int] | None = None, name: str | None = None,
                   trainable: bool = True) -> Sequential | Node:
    """GRU (ggmlR's: h = h + z (n - h), z weighting the new state) over sequences [N, T, C]."""
    return _attach(model, keras_layers.GRU(units, return_sequences, activation, recurrent_activation, name, trainable,
                                input_shape))


# -- Functional API ----------------------------------------------------------------------------------
def ggml_input(shape: int | Sequence[int], name: str | None = None, dtype: str = "float32") -> Node:
    """A model input: `shape` is one sample's R shape ((F,), (T, C) or (H, W, C));
    dtype "int32" for token ids."""
    if dtype not in ("float32", "int32"):
        raise GGMLError(f"dtype must be 'float32' or 'int32', got {dtype!r}")
    return Node(None, [], r_to_ggml_shape(shape), dtype, name)


def ggml_model(inputs: Node | Sequence[Node], outputs: Node | Sequence[Node]) -> Functional:
    """A Functional model from input nodes to output nodes."""
    return Functional(inputs, outputs)


def _node_list(tensors, what):
    if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, Node) for t in tensors):
        raise GGMLError(f"{what} needs a list of nodes")
    if len(tensors) < 2:
        raise GGMLError(f"{what} needs at least 2 nodes, got {len(tensors)}")
    return list(tensors)


def ggml_layer_add(tensors: Sequence[Node], name: str | None = None) -> Node:
    """Element-wise sum of same-shape nodes."""
    return _attach(_node_list(tensors, "ggml_layer_add"), keras_layers.Add(name))


def ggml_layer_concatenate(tensors: Sequence[Node], axis: int = 0, name: str | None = None) -> Node:
    """Concatenate nodes along a 0-based ggml axis (0 = features for flat nodes)."""
    return _attach(_node_list(tensors, "ggml_layer_concatenate"), keras_layers.Concatenate(axis, name))


def ggml_dense(units: int, activation: str | None = None, name: str | None = None, trainable: bool = True) -> keras_layers.Dense:
    """A reusable dense layer object (apply it with ggml_apply; applications share weights)."""
    return keras_layers.Dense(units, activation, name, trainable)


def ggml_batch_norm(eps: float = 1e-5, name: str | None = None, trainable: bool = True, mode: str = "rms",
                    momentum: float = 0.1) -> keras_layers.BatchNorm:
    """A reusable batch_norm layer object."""
    return keras_layers.BatchNorm(eps, name, trainable, mode, momentum)


def ggml_embedding(vocab_size: int, dim: int, name: str | None = None, trainable: bool = True) -> keras_layers.Embedding:
    """A reusable embedding layer object."""
    return keras_layers.Embedding(vocab_size, dim, name, trainable)


def ggml_lstm(units: int, return_sequences: bool = False, activation: str | None = "tanh",
              recurrent_activation: str = "sigmoid", name: str | None = None, trainable: bool = True) -> keras_layers.LSTM:
    """A reusable LSTM layer object."""
    return keras_layers.LSTM(units, return_sequences, activation, recurrent_activation, name, trainable)


def ggml_gru(units: int, return_sequences: bool = False, activation: str | None = "tanh",
             recurrent_activation: str = "sigmoid", name: str | None = None, trainable: bool = True) -> keras_layers.GRU:
    """A reusable GRU layer object."""
    return keras_layers.GRU(units, return_sequences, activation, recurrent_activation, name, trainable)


def ggml_apply(tensor: Node | Sequence[Node], layer: keras_layers.Layer) -> Node:
    """Apply a layer object to a node (or a list of nodes); every application shares its weights."""
    if not isinstance(layer, keras_layers.Layer):
        raise GGMLError(f"ggml_apply needs a layer object, got {type(layer).__name__}")
    if not isinstance(tensor, (Node, list, tuple)):
        raise GGMLError(f"ggml_apply needs a node (ggml_input or a layer output), got {type(tensor).__name__}")
    return _attach(tensor if isinstance(tensor, Node) else list(tensor), layer)


# -- training ----------------------------------------------------------------------------------------
def _model(m, what):
    if not isinstance(m, _Model):
        raise GGMLError(f"{what}: expected a model, got {type(m).__name__}")
    return m


def ggml_compile(model: _Model, optimizer: str = "adam",
                 loss: str | Sequence[str | None] | Mapping[str, str] = "categorical_crossentropy",
                 metrics: Sequence[str] | None = ("accuracy",), backend: str | None = "cpu",
                 **options: Any) -> _Model:
    """Configure training (see _Model.compile); returns the model."""
    return _model(model, "ggml_compile").compile(optimizer, loss, metrics, backend, **options)


def _fit_model(model, x, y, epochs=1, batch_size=32, validation_split=0.0, validation_data=None,
               class_weight=None, sample_weight=None, callbacks=(), verbose=1, **options):
    _model(model, "ggml_fit").fit(x, y, epochs, batch_size, validation_split, validation_data, class_weight,
                                  sample_weight, callbacks, verbose, **options)
    return model


def ggml_fit(*args: Any, **kwargs: Any) -> _Model | dict[str, list]:
    """ggml_fit(model, x, y, epochs=1, batch_size=32, validation_split=0.0, validation_data=None,
    class_weight=None, sample_weight=None, callbacks=(), verbose=1, **options): train with ggml_opt
    (see _Model.fit); returns the model, its history in model.history.

    As in ggmlR, a call whose first argument is a backend scheduler (or that names sched=) is the
    low-level loop: ggml_fit(sched, ctx_compute, inputs, outputs, dataset, ...) is
    ggml_fit_opt(...) and returns its history."""
    first = args[0] if args else kwargs.get("sched", kwargs.get("model"))
    if isinstance(first, Scheduler):
        return ggml_fit_opt(*args, **kwargs)
    return _fit_model(*args, **kwargs)


def ggml_evaluate(model: _Model, x: ArrayLike | Sequence[ArrayLike],
                  y: ArrayLike | Sequence[ArrayLike | None] | Mapping[str, ArrayLike], batch_size: int = 32,
                  sample_weight: ArrayLike | None = None,
                  class_weight: Mapping[int, float] | None = None, verbose: bool | int = False) -> dict[str, float]:
    """dict(loss, accuracy, n_samples[, mae, mse, rmse]); with a target per output (list or dict),
    loss is the weighted sum and each output adds <name>_loss, <name>_accuracy, ...
    `verbose` prints them on one line."""
    return _model(model, "ggml_evaluate").evaluate(x, y, batch_size, sample_weight, class_weight, verbose)


def ggml_predict(model: _Model, x: ArrayLike | Sequence[ArrayLike],
                 batch_size: int = 32) -> np.ndarray | list[np.ndarray]:
    """Predictions, samples as rows (a list for multi-output models)."""
    return _model(model, "ggml_predict").predict(x, batch_size)


def ggml_predict_classes(model: _Model, x: ArrayLike | Sequence[ArrayLike], batch_size: int = 32) -> np.ndarray:
    """1-based class of each row (which.max)."""
    return _model(model, "ggml_predict_classes").predict_classes(x, batch_size)


def _select(model, from_, to, layer_names):
    layers = model._all_layers()
    if layer_names is not None:
        names = [layer_names] if isinstance(layer_names, str) else list(layer_names)
        known = {l.name for l in layers}
        bad = [n for n in names if n not in known]
        if bad:
            raise GGMLError(f"no layer named {bad}")
        return [l for l in layers if l.name in names]
    n = len(layers)
    from_ = 1 if from_ is None else int(from_)
    to = n if to is None else int(to)
    if n == 0:
        raise GGMLError("Model has no layers.")
    if not 1 <= from_ <= to <= n:
        raise GGMLError(f"Invalid range: from={from_} to={to} (model has {n} layers).")
    return layers[from_ - 1:to]


def ggml_freeze_weights(model: _Model, from_: int | None = None, to: int | None = None,
                        layer_names: str | Sequence[str] | None = None, **kw: int) -> _Model:
    """Mark layers not trainable (1-based from/to inclusive, or layer_names; default all)."""
    from_ = kw.pop("from", from_)
    if kw:
        raise TypeError(f"unexpected arguments {sorted(kw)}")
    for l in _select(model, from_, to, layer_names):
        l.trainable = False
    return model


def ggml_unfreeze_weights(model: _Model, from_: int | None = None, to: int | None = None,
                          layer_names: str | Sequence[str] | None = None, **kw: int) -> _Model:
    """Mark layers trainable again (same selection as ggml_freeze_weights)."""
    from_ = kw.pop("from", from_)
    if kw:
        raise TypeError(f"unexpected arguments {sorted(kw)}")
    for l in _select(model, from_, to, layer_names):
        if not isinstance(l, keras_layers.Dropout):
            l.trainable = True
    return model


def ggml_get_layer(model: _Model, index: int | None = None, name: str | None = None) -> keras_layers.Layer:
    """A layer by 1-based index or by name."""
    if (index is None) == (name is None):
        raise GGMLError("Provide either index or name, not both." if index is not None else "Provide either index or name.")
    layers = model._all_layers()
    if index is not None:
        if not 1 <= int(index) <= len(layers):
            raise GGMLError(f"Layer index {index} out of range (model has {len(layers)} layers).")
        return layers[int(index) - 1]
    for l in layers:
        if l.name == name:
            return l
    raise GGMLError(f"No layer with name '{name}'.")


def ggml_pop_layer(model: Sequential) -> Sequential:
    """Remove the last layer of an uncompiled Sequential model."""
    if not isinstance(model, Sequential):
        raise GGMLError("ggml_pop_layer works on Sequential models")
    if model.compiled:
        raise GGMLError("Cannot pop layers from a compiled model.")
    if not model.layers:
        raise GGMLError("Model has no layers to remove.")
    model.layers.pop()
    model._built_for = None
    if not model.layers:
        model.input_shape = None
    return model


def ggml_model_summary(model: _Model, print_fn: Callable[[str], object] | None = print) -> str | None:
    """Layers, output shapes and parameter counts, printed (then None is returned, so a REPL shows
    the table once); with print_fn=None, the text is returned instead."""
    return model.summary(print_fn)


def nn_infer_shapes(model: _Model) -> _Model:
    """ggmlR's nn_infer_shapes: work out every layer's input and output shape (and make its
    weights) without building a graph; returns the model, whose layers then answer
    `output_shape` (R order, per sample). A GGMLError says what is missing (input_shape)."""
    _model(model, "nn_infer_shapes")._build()
    return model


def ggml_default_mlp(n_features: int, n_out: int, task_type: str = "classif",
                     hidden_layers: Sequence[int] = (128, 64), activation: str | None = "relu",
                     dropout: float = 0.2) -> Sequential:
    """ggmlR's ready-made MLP: dense(h, activation) [+ dropout] per hidden size, then a softmax
    (classif) or linear (regr) output layer. Uncompiled."""
    if task_type not in ("classif", "regr"):
        raise GGMLError("task_type must be 'classif' or 'regr'")
    if int(n_features) < 1 or int(n_out) < 1:
        raise GGMLError("`n_features` and `n_out` must be positive integers.")
    if any(int(h) < 1 for h in hidden_layers):
        raise GGMLError("`hidden_layers` must contain positive integers.")
    if not 0 <= float(dropout) < 1:
        raise GGMLError("`dropout` must be a single numeric in [0, 1).")
    m = ggml_model_sequential()
    first = True
    for h in hidden_layers:
        m = ggml_layer_dense(m, int(h), activation, input_shape=(int(n_features),) if first else None)
        first = False
        if dropout > 0:
            m = ggml_layer_dropout(m, float(dropout))
    return ggml_layer_dense(m, int(n_out), "softmax" if task_type == "classif" else None,
                            input_shape=(int(n_features),) if first else None)


def ggml_model_backend(model: _Model, verbose: bool = False) -> str | dict[str, str | bool]:
    """The device a compiled model trains and predicts on: "cpu", "vulkan", ... (verbose: a dict
    with the requested and the used backend and the device name)."""
    _model(model, "ggml_model_backend")._need_compiled("ggml_model_backend")
    b = get_backend(model.device)
    used = "cpu" if b.is_cpu else b.name.lower().rstrip("0123456789")
    if not verbose:
        return used
    requested = str(model.device).lower()
    return {"requested": requested, "used": used, "device": "cpu" if b.is_cpu else b.device_name,
            "fallback": used == "cpu" and requested not in ("cpu",)}
