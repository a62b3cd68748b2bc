"""Saving and loading models: weights alone (ggml_save_weights) or architecture + weights +
compile settings (ggml_save_model), as one .npz file written atomically (a temporary file in
the same folder, fsync, rename), so a crash never leaves a half-written file behind.

Loaded weights are ordinary weights: training goes on from them (ggmlR instead keeps
preferring the loaded copy over trained weights at every graph build).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DeviceError, GGMLError, checked_path
from .layers import LAYER_TYPES, ggml_to_r_shape, r_to_ggml_shape
from .functional import Functional, Node
from .sequential import Sequential

if TYPE_CHECKING:
    from .model import _Model

FORMAT = "ggmlpy-keras-1"


def _atomic_write(path, payload: bytes, what: str) -> None:
    path = checked_path(path, what)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _weight_arrays(model) -> dict:
    out = {}
    for lname, params in model.get_weights().items():
        for p, a in params.items():
            out[f"w/{lname}/{p}"] = a
    return out


def ggml_save_weights(model: _Model, path: str | os.PathLike[str]) -> _Model:
    """Write every layer's weights to `path` (.npz, atomically). Returns the model."""
    arrays = _weight_arrays(model)
    arrays["__format__"] = np.array(FORMAT + "-weights")
    _atomic_write(path, _npz_bytes(arrays), "ggml_save_weights")
    return model


def _where(path) -> str:
    return "the model bytes" if isinstance(path, io.BytesIO) else repr(os.fspath(path))


def _read(path, what: str):
    if not isinstance(path, io.BytesIO):
        path = checked_path(path, what)
    try:
        z = np.load(os.fspath(path) if not isinstance(path, io.BytesIO) else path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):  # a lone .npy array
            raise ValueError("not an .npz archive")
        with z:
            return {k: z[k] for k in z.files}
    # a missing file; a damaged archive fails in zipfile (BadZipFile, a CRC error, an unknown
    # compression) or in numpy
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError) as e:
        raise GGMLError(f"cannot read {_where(path)}: {type(e).__name__}: {e}") from e


def _install(model, arrays):
    weights = {}
    for k, a in arrays.items():
        if k.startswith("w/"):
            _, lname, p = k.split("/", 2)
            weights.setdefault(lname, {})[p] = a
    have = {n: {p: a.shape for p, a in ps.items()} for n, ps in model.get_weights().items()}
    got = {n: {p: a.shape for p, a in ps.items()} for n, ps in weights.items()}
    if have != got:
        raise GGMLError(f"architecture mismatch: the file holds {got}, the model has {have}")
    model.set_weights(weights)


def ggml_load_weights(model: _Model, path: str | os.PathLike[str]) -> _Model:
    """Install weights saved by ggml_save_weights into a model of the same architecture."""
    arrays = _read(path, "ggml_load_weights")
    if str(arrays.get("__format__", "")) not in (FORMAT + "-weights", FORMAT + "-model"):
        raise GGMLError(f"{_where(path)} is not a ggmlpy weights file")
    with _damaged(path):
        _install(model, arrays)
    return model


@contextlib.contextmanager
def _damaged(path):
    """A file that reads but whose contents do not describe a model (JSON that does not parse, a
    field missing or of another type) is a GGMLError naming it, not the KeyError of the first
    look-up that failed."""
    try:
        yield
    except GGMLError:
        raise
    except DeviceError as e:  # the device it was compiled for is not here (or its name is damaged)
        raise DeviceError(f"{_where(path)}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # json's errors are ValueErrors
        raise GGMLError(f"{_where(path)} is not a valid ggmlpy model file ({type(e).__name__}: {e})") from e


def _layer_spec(l):
    spec = {"kind": l.kind, "name": l.name, "trainable": l.trainable, "config": l.config()}
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


def model_bytes(model: _Model) -> bytes:
    """What ggml_save_model writes: architecture, weights and compile settings as .npz bytes."""
    arrays = _weight_arrays(model)
    arrays["__format__"] = np.array(FORMAT + "-model")
    arrays["__architecture__"] = np.array(json.dumps(_architecture(model)))
    return _npz_bytes(arrays)


def ggml_save_model(model: _Model, path: str | os.PathLike[str]) -> _Model:
    """Write architecture, weights and compile settings to `path` (.npz, atomically)."""
    _atomic_write(path, model_bytes(model), "ggml_save_model")
    return model


def model_from_bytes(data: bytes, backend: str | None = None) -> Sequential | Functional:
    """The model held by model_bytes()' output (ggml_load_model without the file)."""
    return ggml_load_model(io.BytesIO(bytes(data)), backend)


def ggml_load_model(path: str | os.PathLike[str] | io.BytesIO, backend: str | None = None,
                    ) -> Sequential | Functional:
    """A model saved by ggml_save_model, compiled again if it was (on `backend` if given)."""
    arrays = _read(path, "ggml_load_model")
    fmt = str(arrays.get("__format__", ""))
    if fmt == FORMAT + "-weights":
        raise GGMLError(f"{_where(path)} holds weights only (ggml_save_weights): build the model, then "
                        "ggml_load_weights")
    if fmt != FORMAT + "-model":
        raise GGMLError(f"{_where(path)} is not a ggmlpy model file")
    with _damaged(path):
        return _rebuild(arrays, backend)


def _rebuild(arrays: dict, backend):
    arch = json.loads(str(arrays["__architecture__"]))
    if arch["type"] == "sequential":
        model = Sequential([_make_layer(s) for s in arch["layers"]])
        if arch.get("input_shape") is not None:
            model.input_shape = tuple(arch["input_shape"])
    else:
        layers = [_make_layer(s) for s in arch["layers"]]
        nodes = []
        for spec in arch["nodes"]:
            if spec["layer"] is None:
                nodes.append(Node(None, [], r_to_ggml_shape(spec["shape"]), spec["dtype"], spec["name"]))
            else:
                nodes.append(Node(layers[spec["layer"]], [nodes[i] for i in spec["parents"]]))
        model = Functional([nodes[i] for i in arch["inputs"]], [nodes[i] for i in arch["outputs"]])
    c = arch.get("compile")
    if c:
        model.compile(c["optimizer"], c["loss"], c["metrics"], backend or c["backend"], lr=c["lr"],
                      beta1=c["beta1"], beta2=c["beta2"], eps=c["eps"], weight_decay=c["wd"],
                      softmax_ce=c.get("softmax_ce", "exact"), loss_weights=c.get("loss_weights"))
    _install(model, arrays)
    return model
