"""Saving and loading models: weights alone (ggml_save_weights) or architecture + weights +
compile settings (ggml_save_model), in ggmlpy's model file (GGUF, written atomically and checked
when read: ggmlpy/io/model_file.py) of kind "keras.weights" or "keras.model".

A layer's weights are tensors "<i>.<param>" (i counts the layers that have weights, in model
order; numpy shape = ne reversed); the key `ggmlpy.keras.weights` maps each to its layer and
parameter by name (JSON [[tensor, layer, param], ...]), so that a layer name of any length is
kept. `ggmlpy.architecture` (model files) is the JSON description the model is built again from.
Files of ggmlpy's earlier format, .npz ("ggmlpy-keras-1"), still load.

Loaded weights are ordinary weights: training goes on from them (ggmlR instead keeps
preferring the loaded copy over trained weights at every graph build).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile
import zlib
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DeviceError, GGMLError, checked_path
from ..io.model_file import is_model_file, model_file_bytes, read_model_file, write_model_file
from .layers import LAYER_TYPES, ggml_to_r_shape, r_to_ggml_shape
from .functional import Functional, Node
from .sequential import Sequential

if TYPE_CHECKING:
    from .model import _Model

WEIGHTS_KEY = "ggmlpy.keras.weights"
ARCHITECTURE_KEY = "ggmlpy.architecture"
NPZ_FORMAT = "ggmlpy-keras-1"  # the .npz files of earlier ggmlpy versions: read, no longer written
COMPILE_KEYS = ("optimizer", "loss", "metrics", "backend", "lr", "beta1", "beta2", "eps", "wd")


def _weight_tensors(model) -> tuple[list, dict]:
    """The model file's weight tensors and its ggmlpy.keras.weights key."""
    tensors, index = [], []
    for i, (lname, params) in enumerate(model.get_weights().items()):
        for p, a in params.items():
            tensors.append((f"{i}.{p}", a, None))
            index.append([f"{i}.{p}", lname, p])
    return tensors, {WEIGHTS_KEY: json.dumps(index)}


def ggml_save_weights(model: _Model, path: str | os.PathLike[str]) -> _Model:
    """Write every layer's weights to `path` (a GGUF model file, atomically). Returns the model."""
    tensors, keys = _weight_tensors(model)
    write_model_file(path, "keras.weights", tensors, keys, "ggml_save_weights")
    return model


def _saved(source, kinds: tuple, reader: str) -> tuple[str, dict | None, dict]:
    """(where, architecture or None, {layer: {param: array}}) of a model file or its bytes (an
    io.BytesIO), or of an earlier ggmlpy's .npz file, checked as far as the file alone allows."""
    if isinstance(source, io.BytesIO):
        data = source.getvalue()
        if is_model_file(data):
            return _from_model_file(read_model_file(data, kinds, reader))
        return _from_npz(source, "the model bytes", kinds, reader)
    where = checked_path(source, reader)
    try:
        with open(where, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise GGMLError(f"cannot read {where}: {e}") from e
    if is_model_file(head):
        return _from_model_file(read_model_file(where, kinds, reader))
    return _from_npz(where, where, kinds, reader)


def _from_model_file(f) -> tuple[str, dict | None, dict]:
    index = f.json(WEIGHTS_KEY)
    ok = isinstance(index, list) and all(isinstance(e, list) and len(e) == 3 and all(isinstance(s, str) for s in e)
                                         for e in index)
    if not ok:
        raise GGMLError(f"{f.where}: {WEIGHTS_KEY} is missing or not a list of [tensor, layer, param]")
    weights = {}
    for tensor, lname, p in index:
        if tensor not in f.arrays:
            raise GGMLError(f"{f.where}: {WEIGHTS_KEY} names tensor {tensor!r}, which the file does not hold")
        if p in weights.get(lname, {}):
            raise GGMLError(f"{f.where}: {WEIGHTS_KEY} lists {lname}.{p} twice")
        weights.setdefault(lname, {})[p] = f.arrays[tensor]
    if len(index) != len(f.arrays):
        raise GGMLError(f"{f.where}: it holds {len(f.arrays)} tensors, {WEIGHTS_KEY} maps {len(index)}")
    arch = f.json(ARCHITECTURE_KEY) if f.kind == "keras.model" else None
    if f.kind == "keras.model" and arch is None:
        raise GGMLError(f"{f.where}: a model file without its {ARCHITECTURE_KEY}")
    return f.where, arch, weights


def _from_npz(source, where: str, kinds: tuple, reader: str) -> tuple[str, dict | None, dict]:
    try:
        z = np.load(source, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):  # a lone .npy array
            raise ValueError("not an .npz archive")
        with z:
            arrays = {k: z[k] for k in z.files}
    # a damaged archive fails in zipfile (BadZipFile, a CRC error, an unknown compression) or in numpy
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError) as e:
        raise GGMLError(f"cannot read {where}: {type(e).__name__}: {e}") from e
    fmt = str(arrays.get("__format__", ""))
    kind = {NPZ_FORMAT + "-weights": "keras.weights", NPZ_FORMAT + "-model": "keras.model"}.get(fmt)
    if kind is None:
        raise GGMLError(f"{where} is not a ggmlpy model file")
    if kind not in kinds:
        raise GGMLError(f"{where} holds weights only (ggml_save_weights): build the model, then ggml_load_weights")
    weights = {}
    for k, a in arrays.items():
        if k.startswith("w/"):
            _, lname, p = k.split("/", 2)
            weights.setdefault(lname, {})[p] = a
    arch = None
    if kind == "keras.model":
        try:
            arch = json.loads(str(arrays["__architecture__"]))
        except (KeyError, ValueError) as e:
            raise GGMLError(f"{where}: the saved architecture is missing or not JSON ({e})") from None
    return where, arch, weights


def _install(model, weights: dict, where: str) -> None:
    have = {n: {p: a.shape for p, a in ps.items()} for n, ps in model.get_weights().items()}
    got = {n: {p: a.shape for p, a in ps.items()} for n, ps in weights.items()}
    if have != got:
        raise GGMLError(f"{where}: architecture mismatch: the file holds {got}, the model has {have}")
    model.set_weights(weights)


def ggml_load_weights(model: _Model, path: str | os.PathLike[str]) -> _Model:
    """Install weights saved by ggml_save_weights (or ggml_save_model) into a model of the same
    architecture: every layer name and weight shape must match."""
    where, _, weights = _saved(path, ("keras.weights", "keras.model"), "ggml_load_weights")
    _install(model, weights, where)
    return model


def _layer_spec(l):
    spec = {"kind": l.kind, "name": l.name, "trainable": l.trainable, "config": dict(l.config)}
    if l.input_shape is not None:
        spec["input_shape"] = list(ggml_to_r_shape(l.input_shape))
    return spec


def _make_layer(spec):
    cls = LAYER_TYPES.get(spec["kind"])
    if cls is None:
        raise GGMLError(f"unknown layer kind {spec['kind']!r} in the saved model")
    kw = dict(spec["config"], name=spec["name"], trainable=spec["trainable"])
    if "input_shape" in spec:
        kw["input_shape"] = spec["input_shape"]
    return cls(**kw)


def _architecture(model) -> dict:
    if isinstance(model, Sequential):
        arch = {"type": "sequential", "layers": [_layer_spec(l) for l in model.layers],
                "input_shape": None if model.input_shape is None else list(model.input_shape)}
    else:
        layers = model._all_layers()
        index = {id(l): i for i, l in enumerate(layers)}
        nodes = {id(n): i for i, n in enumerate(model.order)}
        arch = {"type": "functional", "layers": [_layer_spec(l) for l in layers],
                "nodes": [{"layer": None if n.layer is None else index[id(n.layer)],
                           "parents": [nodes[id(p)] for p in n.parents],
                           "shape": None if n.shape is None else list(ggml_to_r_shape(n.shape)),
                           "dtype": n.dtype, "name": n.name} for n in model.order],
                "inputs": [nodes[id(n)] for n in model.inputs], "outputs": [nodes[id(n)] for n in model.outputs]}
    if model.compiled:
        arch["compile"] = {"optimizer": model.optimizer, "loss": model.loss, "metrics": model.metrics,
                           "backend": model.device, "softmax_ce": model.softmax_ce,
                           "loss_weights": list(model.loss_weights),
                           **{k: v for k, v in model.opt_settings.items()}}
    return arch


def _model_file(model) -> tuple[list, dict]:
    tensors, keys = _weight_tensors(model)
    keys[ARCHITECTURE_KEY] = json.dumps(_architecture(model))
    return tensors, keys


def model_bytes(model: _Model) -> bytes:
    """What ggml_save_model writes: architecture, weights and compile settings, as the file's bytes."""
    tensors, keys = _model_file(model)
    return model_file_bytes("keras.model", tensors, keys, "ggml_save_model")


def ggml_save_model(model: _Model, path: str | os.PathLike[str]) -> _Model:
    """Write architecture, weights and compile settings to `path` (a GGUF model file, atomically)."""
    tensors, keys = _model_file(model)
    write_model_file(path, "keras.model", tensors, keys, "ggml_save_model")
    return model


def model_from_bytes(data: bytes, backend: str | None = None) -> Sequential | Functional:
    """The model held by model_bytes()' output (ggml_load_model without the file)."""
    return ggml_load_model(io.BytesIO(bytes(data)), backend)


def ggml_load_model(path: str | os.PathLike[str] | io.BytesIO, backend: str | None = None,
                    ) -> Sequential | Functional:
    """A model saved by ggml_save_model, compiled again if it was (on `backend` if given)."""
    where, arch, weights = _saved(path, ("keras.model",), "ggml_load_model")
    _check_architecture(arch, where)
    with _building(where):
        model = _built(arch)
        c = arch.get("compile")
        if c:
            model.compile(c["optimizer"], c["loss"], c["metrics"], backend or c["backend"], lr=c["lr"],
                          beta1=c["beta1"], beta2=c["beta2"], eps=c["eps"], weight_decay=c["wd"],
                          softmax_ce=c.get("softmax_ce", "exact"), loss_weights=c.get("loss_weights"))
    _install(model, weights, where)
    return model


@contextlib.contextmanager
def _building(where: str):
    """Building a saved architecture again: what its layers' constructors or compile refuse (a
    config value of the wrong kind or type) is a GGMLError naming the file, a device that is not
    here a DeviceError naming it."""
    try:
        yield
    except DeviceError as e:
        raise DeviceError(f"{where}: {e}") from None
    except GGMLError as e:
        raise GGMLError(f"{where}: the saved model cannot be built again: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise GGMLError(f"{where}: the saved architecture is damaged ({type(e).__name__}: {e})") from None


def _built(arch: dict) -> Sequential | Functional:
    if arch["type"] == "sequential":
        model = Sequential([_make_layer(s) for s in arch["layers"]])
        if arch.get("input_shape") is not None:
            model.input_shape = tuple(arch["input_shape"])
        return model
    layers = [_make_layer(s) for s in arch["layers"]]
    nodes = []
    for spec in arch["nodes"]:
        if spec["layer"] is None:
            nodes.append(Node(None, [], r_to_ggml_shape(spec["shape"]), spec["dtype"], spec["name"]))
        else:
            nodes.append(Node(layers[spec["layer"]], [nodes[i] for i in spec["parents"]]))
    return Functional([nodes[i] for i in arch["inputs"]], [nodes[i] for i in arch["outputs"]])


def _check_architecture(arch, where: str) -> None:
    """GGMLError naming the file unless `arch` has the structure _architecture writes (the
    layers' configs are checked by their constructors)."""
    def bad(what):
        raise GGMLError(f"{where}: the saved architecture is damaged: {what}")

    def indices(v, n, what):
        if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                                              for i in v):
            bad(f"{what} must be a list of indices below {n}, got {v!r}")
    if not isinstance(arch, dict) or arch.get("type") not in ("sequential", "functional"):
        bad("expected a sequential or functional model")
    layers = arch.get("layers")
    if not isinstance(layers, list) or not all(
            isinstance(s, dict) and isinstance(s.get("kind"), str) and isinstance(s.get("name"), str)
            and isinstance(s.get("trainable"), bool) and isinstance(s.get("config"), dict) for s in layers):
        bad("layers must be a list of {kind, name, trainable, config}")
    if arch["type"] == "functional":
        nodes = arch.get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
            bad("nodes must be a list")
        for i, n in enumerate(nodes):
            if n.get("layer") is None:
                if not isinstance(n.get("shape"), list) or n.get("parents") != []:
                    bad(f"input node {i} needs a shape and no parents")
            else:
                indices([n["layer"]], len(layers), f"node {i}'s layer")
                indices(n.get("parents"), i, f"node {i}'s parents")
        indices(arch.get("inputs"), len(nodes), "inputs")
        indices(arch.get("outputs"), len(nodes), "outputs")
    c = arch.get("compile")
    if c is not None and (not isinstance(c, dict) or any(k not in c for k in COMPILE_KEYS)):
        bad(f"compile settings must hold {', '.join(COMPILE_KEYS)}")
