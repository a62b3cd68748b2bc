"""Saving and loading a model's weights as GGUF: written with llama.cpp's own `gguf` package,
read back through ggmlpy's validating GGUF parser (ggmlpy/io/gguf_file.py).

Every entry of `model.state_dict()` (parameters by their `named_parameters()`
names, then buffers such as batch norm's running statistics) becomes one f32
tensor. A GGUF tensor's dims are ggml's ne, so an R matrix [nrow, ncol] is
stored with ne = [nrow, ncol] and its column-major data as is: the layout
ggml itself would use. Metadata: `general.architecture = "ggmlpy"`,
`ggmlpy.version`, and the user's dict as JSON in `ggmlpy.metadata`.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import tempfile
from collections.abc import Callable

import numpy as np

from .._version import __version__
from ..bindings import ffi, lib
from ..core.types import TYPE_NAMES
from ..errors import GGMLError, checked_path
from ..io.gguf_file import GGUFFile
from ..nn import architecture
from ..nn.layers import Module
from ..runtime.state import ag_device

ARCH = "ggmlpy"
_MAX_NAME = 63  # GGML_MAX_NAME (64) including the terminating zero


def _gguf():
    try:
        import gguf  # loaded when a model file is written or read: its import is slow
    except ImportError as e:  # a declared dependency, but say how to fix it if it is missing
        raise GGMLError("saving and loading models needs the gguf package: pip install gguf") from e
    return gguf


def _state_of(model) -> dict:
    if not hasattr(model, "state_dict"):
        raise GGMLError(f"expected a model (an ag_sequential or ag_* layer, a Module), got {type(model).__name__}")
    return model.state_dict()


def _quantized_tensors(model) -> dict:
    """{state name: AGTensor} of the model's entries stored in a quantized type (ag_quantize)."""
    own = dict(model.named_parameters()) if hasattr(model, "named_parameters") else {}
    own.update(dict(model.named_buffers()) if hasattr(model, "named_buffers") else {})
    return {n: t for n, t in own.items() if hasattr(t, "st") and lib.ggml_is_quantized(t.st.type)}


def _blocks_of(t) -> np.ndarray:
    raw = np.empty(t.st.nbytes, dtype=np.uint8)
    t.dc.sync()
    lib.ggml_backend_tensor_get(t.st.ptr, ffi.from_buffer(raw), 0, raw.nbytes)
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
    gguf = _gguf()
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
    for name in state:
        if len(name.encode()) > _MAX_NAME:
            raise GGMLError(f"ag_save_model: tensor name {name!r} is longer than GGUF's {_MAX_NAME} bytes")
    path = checked_path(path, "ag_save_model")
    with atomic_write(path) as tmp:
        writer = gguf.GGUFWriter(tmp, ARCH)
        try:
            writer.add_string("ggmlpy.version", __version__)
            writer.add_string("ggmlpy.metadata", meta_json)
            if fn_ref is not None:
                writer.add_string("ggmlpy.model_fn", fn_ref)
            described = architecture.describe(model)
            if described is not None:
                writer.add_string("ggmlpy.architecture", described)
            quantized = _quantized_tensors(model)
            for name, value in state.items():
                qtype = _gguf_qtype(gguf, quantized[name].st.type) if name in quantized else None
                if qtype is not None:  # the blocks as they are: ggml rows = the R matrix's columns
                    blocks = _blocks_of(quantized[name])
                    writer.add_tensor(name, blocks.reshape(np.shape(value)[1], -1), raw_dtype=qtype)
                    continue
                # numpy (ncol, nrow) in C order = ggml ne [nrow, ncol], column-major data
                writer.add_tensor(name, np.ascontiguousarray(np.asarray(value).T, dtype=np.float32))
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    return path


def _file_mode(path: str) -> int:
    """The mode the replaced file had, or what a new file gets under the current umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_write(path: str):
    """Yield a temporary path beside `path`; when the block succeeds, its file (flushed to disk)
    replaces `path` in one rename. A failure, a full disk or a killed process leaves the old
    file as it was, and a failure (not a kill) leaves no temporary file behind."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode(path))  # mkstemp made it private
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise GGMLError(f"could not write {path}: {e}; the previous file, if any, is unchanged") from e
        raise
    with contextlib.suppress(OSError):  # the rename itself, on disk (not possible everywhere)
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _type_name(ggml_type: int) -> str:
    return TYPE_NAMES[ggml_type]


def _gguf_qtype(gguf, ggml_type: int):
    try:
        return gguf.GGMLQuantizationType(int(ggml_type))
    except ValueError:  # a type newer than the gguf package: written as f32 values instead
        return None


def read_gguf(path) -> tuple[dict, dict]:
    """(tensors {name: R-shaped float64 matrix}, info {"version", "metadata", "architecture"}).

    The file goes through ggmlpy's validating GGUF parser (magic, version, counts, types,
    tensor offsets: aligned, inside the file, not overlapping) before any tensor is read."""
    path = checked_path(path, "ag_load_model")
    if not os.path.exists(path):
        raise GGMLError(f"no such model file: {path}")
    try:
        f = GGUFFile(path)
    except GGMLError as e:
        raise GGMLError(f"{path} is not a readable GGUF file (not a ggmlpy model container): {e}") from None
    with f:
        meta = f.metadata
        arch = meta.get("general.architecture")
        if arch != ARCH:
            raise GGMLError(f"{path}: GGUF architecture is {arch!r}, not {ARCH!r}: not a ggmlpy model file "
                           "(container)")
        for key in ("ggmlpy.version", "ggmlpy.metadata", "ggmlpy.model_fn", "ggmlpy.architecture"):
            if key in meta and f.metadata_types[key] != "string":
                raise GGMLError(f"{path}: {key} must be a string, is {f.metadata_types[key]}")
        try:
            user_meta = json.loads(meta["ggmlpy.metadata"]) if "ggmlpy.metadata" in meta else {}
        except ValueError as e:
            raise GGMLError(f"{path}: ggmlpy.metadata is not valid JSON: {e}") from None
        info = {"architecture": arch, "version": meta.get("ggmlpy.version"), "metadata": user_meta,
                "blocks": {}, "model_fn": meta.get("ggmlpy.model_fn"),
                "model_architecture": meta.get("ggmlpy.architecture")}
        tensors = {}
        for name, t in f.tensors.items():
            if t.type_name != "f32" and not lib.ggml_is_quantized(t.type):
                raise GGMLError(f"{path}: tensor {name!r} is {t.type_name}, expected f32 or a quantized type")
            if lib.ggml_is_quantized(t.type):  # ag_quantize'd weights: kept as blocks too
                info["blocks"][name] = (t.type, np.array(f.data(name, raw=True)).reshape(-1))
            ne = list(t.ne)
            nrow, ncol = (ne + [1, 1])[:2]
            if len(ne) > 2 and any(d != 1 for d in ne[2:]):
                raise GGMLError(f"{path}: tensor {name!r} has {len(ne)} dims {ne}; ggmlpy models hold matrices")
            # data come as numpy (ncol, nrow) C order; .T gives R's [nrow, ncol]
            tensors[name] = np.array(f.data(name), dtype=np.float64).reshape(ncol, nrow).T
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
        if ftype == t.st.type and blocks.size == t.st.nbytes:
            t.dc.sync()
            lib.ggml_backend_tensor_set(t.st.ptr, ffi.from_buffer(blocks), 0, blocks.size)
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
