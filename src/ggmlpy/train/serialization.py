"""Saving and loading a model's weights: ggmlpy's model file (ggmlpy/io/model_file.py, GGUF)
of kind "ag".

Every entry of `model.state_dict()` (parameters by their `named_parameters()`
names, then buffers such as batch norm's running statistics) becomes one f32
tensor. A GGUF tensor's dims are ggml's ne, so an R matrix [nrow, ncol] is
stored with ne = [nrow, ncol] and its column-major data as is: the layout
ggml itself would use. Keys: the user's dict as JSON in `ggmlpy.metadata`, and
`ggmlpy.model_fn` when given.
"""
from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable

import numpy as np

from ..bindings import ffi, lib
from ..core.types import TYPE_NAMES
from ..errors import GGMLError, checked_path
from ..io.model_file import ARCH, gguf_type_of, read_model_file, write_model_file
from ..nn import architecture
from ..nn.module import Module
from ..runtime.state import ag_device

__all__ = ["ARCH", "ag_load_model", "ag_save_model", "read_gguf"]


def _state_of(model) -> dict:
    if not hasattr(model, "state_dict"):
        raise GGMLError(f"expected a model (an ag_sequential or ag_* layer, a Module), got {type(model).__name__}")
    return model.state_dict()


def _quantized_tensors(model) -> dict:
    """{state name: AGTensor} of the model's entries stored in a quantized type (ag_quantize)."""
    own = dict(model.named_parameters()) if hasattr(model, "named_parameters") else {}
    own.update(dict(model.named_buffers()) if hasattr(model, "named_buffers") else {})
    return {n: t for n, t in own.items() if hasattr(t, "storage") and lib.ggml_is_quantized(t.storage.type)}


def _blocks_of(t) -> np.ndarray:
    raw = np.empty(t.storage.nbytes, dtype=np.uint8)
    t.device_context.sync()
    lib.ggml_backend_tensor_get(t.storage.ptr, ffi.from_buffer(raw), 0, raw.nbytes)
    return raw


def _model_fn_name(model_fn) -> str:
    """'module:qualname' of a module-level function, the reference ag_load_model imports again."""
    module, qualname = getattr(model_fn, "__module__", None), getattr(model_fn, "__qualname__", "")
    if not callable(model_fn) or not module or not qualname or "<" in qualname:
        raise GGMLError("ag_save_model: model_fn must be a module-level function or class (it is saved by "
                        f"name, never as code), got {model_fn!r}; or pass model_fn to ag_load_model instead")
    try:
        found = _import_model_fn(f"{module}:{qualname}")
    except GGMLError:
        found = None
    if found is not model_fn:
        raise GGMLError(f"ag_save_model: model_fn {module}:{qualname} cannot be imported again by that name; "
                        "pass model_fn to ag_load_model instead")
    return f"{module}:{qualname}"


def _import_model_fn(ref: str):
    module, _, qualname = ref.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise GGMLError(f"ag_load_model: cannot import the saved model_fn {ref!r} ({e}); pass model_fn") from None
    return obj


def ag_save_model(model: Module, path: str | os.PathLike, metadata: dict | None = None,
                  model_fn: Callable[[], Module] | None = None) -> str:
    """Write the model's parameters and buffers to a GGUF file at `path`; returns the path.

    `metadata` is any JSON-serialisable dict, returned by ag_load_model(model, path). Weights
    quantized with ag_quantize are written as their blocks, in their quantized type.
    A model made of ggmlpy's own layers (ag_sequential, ag_linear, ..., ag_gpt) also gets its
    architecture written (nn.architecture), so ag_load_model(path) rebuilds it unaided.
    `model_fn` (ggmlR's): a function of no arguments that builds the architecture again, for a
    model of the user's own layers; it is stored by name (module and qualified name, so it must
    be importable: ggmlR stores the R closure itself), and ag_load_model(path) then rebuilds
    the model without being told how."""
    if not isinstance(model, Module):
        raise GGMLError(f"ag_save_model: model must be an ag_sequential or ag_* layer, got {type(model).__name__}")
    try:
        meta_json = json.dumps(metadata or {})
    except TypeError as e:
        raise GGMLError(f"ag_save_model: metadata must be JSON-serialisable: {e}") from None
    fn_ref = _model_fn_name(model_fn) if model_fn is not None else None
    state = _state_of(model)
    if not state:
        raise GGMLError("ag_save_model: the model has no parameters or buffers to save")
    keys = {"ggmlpy.metadata": meta_json}
    if fn_ref is not None:
        keys["ggmlpy.model_fn"] = fn_ref
    described = architecture.describe(model)
    if described is not None:
        keys["ggmlpy.architecture"] = described
    quantized = _quantized_tensors(model)
    tensors = []
    for name, value in state.items():
        qtype = gguf_type_of(quantized[name].storage.type) if name in quantized else None
        if qtype is not None:  # the blocks as they are: ggml rows = the R matrix's columns
            tensors.append((name, _blocks_of(quantized[name]).reshape(np.shape(value)[1], -1), qtype))
        else:  # numpy (ncol, nrow) in C order = ggml ne [nrow, ncol], column-major data
            tensors.append((name, np.asarray(value).T, None))
    return write_model_file(checked_path(path, "ag_save_model"), "ag", tensors, keys, "ag_save_model")


def _type_name(ggml_type: int) -> str:
    return TYPE_NAMES[ggml_type]


def read_gguf(path) -> tuple[dict, dict]:
    """(tensors {name: R-shaped float64 matrix}, info {"version", "metadata", "architecture",
    "blocks", "model_fn", "model_architecture"}) of an ag model file, read and checked by read_model_file."""
    f = read_model_file(checked_path(path, "ag_load_model"), ("ag",), "ag_load_model")
    info = {"architecture": ARCH, "version": f.version, "metadata": f.json("ggmlpy.metadata", {}),
            "blocks": f.blocks, "model_fn": f.keys.get("ggmlpy.model_fn"),
            "model_architecture": f.keys.get("ggmlpy.architecture")}
    tensors = {}
    for name, values in f.arrays.items():
        dims = list(f.ne[name]) + [1] * (2 - len(f.ne[name]))
        while len(dims) > 2 and dims[-1] == 1:  # as ag shapes drop them
            dims.pop()
        if len(dims) > 4:
            raise GGMLError(f"{f.where}: tensor {name!r} has {len(dims)} dims {dims}; ag tensors hold at most 4")
        # data come as numpy ne reversed (for a matrix (ncol, nrow)) in C order; .T gives R's [nrow, ncol, ...]
        tensors[name] = values.astype(np.float64).reshape(dims[::-1]).T
    return tensors, info


def ag_load_model(model_or_path: Module | str | os.PathLike, path: str | os.PathLike | None = None,
                  strict: bool = True, model_fn: Callable[[], Module] | None = None,
                  device: str | None = None) -> dict | Module:
    """Load weights saved by ag_save_model. Two forms:

    * `ag_load_model(model, path, strict=True)`: into `model`, an already built model of the
      same architecture; returns the metadata dict saved with it.
    * ggmlR's `ag_load_model(path, model_fn=None, device=None)`: builds the model with
      `model_fn()`, or the model_fn saved in the file, or (a model of ggmlpy's own layers) the
      architecture saved in the file, on `device` if given, loads the weights, switches it to
      eval mode and returns it.

    Every name and shape is checked before anything is written; strict=False ignores tensors
    in the file that the model does not have."""
    if isinstance(model_or_path, (str, os.PathLike)) and path is None:
        return _load_rebuilt(model_or_path, model_fn, device)
    if path is None:
        raise GGMLError("ag_load_model: expected ag_load_model(model, path) or ag_load_model(path, model_fn=...)")
    tensors, info = read_gguf(path)
    return _load_into(model_or_path, tensors, info, path, strict)


def _load_into(model, tensors: dict, info: dict, path, strict: bool) -> dict:
    state = _state_of(model)
    missing = [n for n in state if n not in tensors]
    unexpected = [n for n in tensors if n not in state]
    problems = []
    if missing:
        problems.append(f"missing from the file: {missing}")
    if unexpected and strict:
        problems.append(f"in the file but not in the model: {unexpected}")
    for name, value in state.items():
        if name in tensors and tensors[name].shape != np.shape(value):
            problems.append(f"{name}: the file has shape {list(tensors[name].shape)}, "
                            f"the model {list(np.shape(value))}")
    if problems:
        hint = "Was it saved from a model of the same architecture?"
        if info["blocks"] and not _quantized_tensors(model):
            types = sorted({_type_name(t) for t, _ in info["blocks"].values()})
            hint = f"The file holds weights quantized with ag_quantize ({', '.join(types)}): quantize the model " \
                   f"the same way (ag_quantize(model, {types[0]!r})) before loading."
        raise GGMLError(f"ag_load_model: {os.fspath(path)} does not fit this model (parameter mismatch: "
                        + "; ".join(problems) + "). " + hint)
    model.load_state_dict({n: tensors[n] for n in state})
    # a quantized weight of the same type takes the file's blocks as they are (re-quantizing the
    # dequantized values is not exact for every type)
    for name, t in _quantized_tensors(model).items():
        ftype, blocks = info["blocks"].get(name, (None, None))
        if ftype == t.storage.type and blocks.size == t.storage.nbytes:
            t.device_context.sync()
            lib.ggml_backend_tensor_set(t.storage.ptr, ffi.from_buffer(blocks), 0, blocks.size)
    return info["metadata"]


def _load_rebuilt(path, model_fn, device):
    tensors, info = read_gguf(path)
    if model_fn is None and info["model_fn"] is not None:
        model_fn = _import_model_fn(info["model_fn"])
    if model_fn is None and info["model_architecture"] is not None:
        where = f"ag_load_model: {os.fspath(path)}"
        model_fn = lambda: architecture.build(info["model_architecture"], where)  # noqa: E731
    if model_fn is None:
        raise GGMLError(f"ag_load_model: {os.fspath(path)} holds neither an architecture (its model has layers "
                        "of its own) nor a model_fn: pass model_fn= (a function that builds the architecture), "
                        "or save with ag_save_model(..., model_fn=)")
    if not callable(model_fn):
        raise GGMLError(f"ag_load_model: model_fn must be a function, got {type(model_fn).__name__}")
    previous = ag_device(device) if device is not None else None
    try:
        model = model_fn()
    finally:
        if previous is not None:
            ag_device(previous)
    if not isinstance(model, Module):
        raise GGMLError(f"ag_load_model: model_fn must return an ag_sequential or ag_* layer, "
                        f"got {type(model).__name__}")
    _load_into(model, tensors, info, path, strict=True)
    model.eval()
    return model
