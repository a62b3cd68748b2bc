"""ggmlpy's model file, one format for every front end: GGUF, written atomically, checked when read.

A model file is a GGUF file whose `general.architecture` is "ggmlpy", with string keys

* `ggmlpy.version`: the ggmlpy that wrote it;
* `ggmlpy.kind`: what it holds, one of KINDS ("ag": ag_save_model's; "keras.model": a Keras-like
  model, ggml_save_model's; "keras.weights": its weights alone, ggml_save_weights'). Files
  written before kinds existed have none: they are ag_save_model's;
* the front end's own, JSON where they describe structure: `ggmlpy.architecture` (how to build
  the model again), `ggmlpy.metadata` (the user's dict), `ggmlpy.model_fn`, ...

and one tensor per weight: f32 values, or the blocks of a quantized type as they are. A tensor's
dims are ggml's ne, so a numpy array is stored with its shape reversed and its bytes as they are.
Written with llama.cpp's own `gguf` package; read through ggmlpy's validating GGUF parser
(io/gguf_file.py), then held to the rules above before a front end sees any of it.

A file comes back bit for bit or not at all: `ggmlpy.digest` holds the SHA-256 (DIGEST) of its
kind, its other ggmlpy.* keys (the architecture among them) and every tensor's name, type, ne and
bytes (GGUF has no checksum of its own: a flipped byte in the weights would load as other
predictions). The writer computes it on the file it wrote, through the reader's own parser (one
function, digest(), for both), and writes it over a placeholder of the same length; the reader
checks it before a front end sees anything, and warns, once a file, of one written without.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import warnings
from collections.abc import Iterable

import numpy as np

from .._version import __version__
from ..bindings import lib
from ..errors import GGMLError, checked_path
from .atomic import atomic_write
from .gguf_file import GGML_MAX_NAME, GGUFFile

ARCH = "ggmlpy"
# kind: (what it holds, the function that writes it, the function that reads it)
KINDS = {
    "ag": ("an ag_* model", "ag_save_model", "ag_load_model"),
    "keras.model": ("a Keras-like model", "ggml_save_model", "ggml_load_model"),
    "keras.weights": ("the weights of a Keras-like model", "ggml_save_weights", "ggml_load_weights"),
}
UNKINDED = "ag"  # the kind of files written before ggmlpy.kind existed
DIGEST_KEY = ARCH + ".digest"
DIGEST = "sha256"  # hashlib's, over the file's mapped bytes: at the speed of reading them (SHA-NI)
PLACEHOLDER = DIGEST + ":" + "0" * 64  # the digest's length, written first and overwritten
_DIGEST_VERSION = b"ggmlpy model file digest 1\0"  # what is hashed, and how, changes with this
# a llama.cpp file ggmlpy wrote (llm_save): its architecture lives in llama.cpp's keys, so every key counts
_EVERY_KEY_VERSION = b"ggmlpy llama.cpp file digest 1\0"

__all__ = ["ARCH", "DIGEST_KEY", "KINDS", "ModelFile", "PLACEHOLDER", "atomic_write", "digest", "gguf_package",
           "is_model_file", "model_file_bytes", "read_model_file", "seal", "write_model_file"]


def gguf_package():
    try:
        import gguf  # loaded when a model file is written or read: its import is slow
    except ImportError as e:  # a declared dependency, but say how to fix it if it is missing
        raise GGMLError("saving and loading models needs the gguf package: pip install gguf") from e
    return gguf


def gguf_type_of(ggml_type: int):
    """The gguf package's enum for a ggml type, or None for a type newer than the package."""
    try:
        return gguf_package().GGMLQuantizationType(int(ggml_type))
    except ValueError:
        return None


def _check_entries(tensors, keys: dict, writer: str) -> list:
    tensors = list(tensors)
    seen = set()
    for name, _, _ in tensors:
        if len(name.encode()) >= GGML_MAX_NAME:
            raise GGMLError(f"{writer}: tensor name {name!r} is longer than GGUF's {GGML_MAX_NAME - 1} bytes")
        if name in seen:
            raise GGMLError(f"{writer}: two tensors are named {name!r}")
        seen.add(name)
    for key, value in keys.items():
        if not key.startswith(ARCH + ".") or not isinstance(value, str):
            raise GGMLError(f"{writer}: model file keys are strings named {ARCH}.*, got {key!r} = {value!r}")
        if key in (DIGEST_KEY, ARCH + ".kind", ARCH + ".version"):
            raise GGMLError(f"{writer}: {key} is written by ggmlpy itself, not given")
    return tensors


def _value_bytes(value) -> bytes:
    """A metadata value as hashed by the every-key digest: arrays by type and bytes, strings joined."""
    if isinstance(value, np.ndarray):
        return value.dtype.str.encode() + b"\0" + value.tobytes()
    if isinstance(value, list):  # an array of strings
        return b"[" + b"\0".join(s.encode() for s in value) + b"]"
    return type(value).__name__.encode() + b":" + str(value).encode()


def digest(f: GGUFFile, every_key: bool = False) -> str:
    """The digest of a model file's contents (DIGEST_KEY's value): its ggmlpy.* keys (with
    `every_key`, all its keys) but the digest, and its tensors, each by name, type, ne and bytes,
    in name order."""
    h = hashlib.new(DIGEST, _EVERY_KEY_VERSION if every_key else _DIGEST_VERSION)
    for key in sorted(f.metadata):
        if key == DIGEST_KEY:
            continue
        if every_key:
            h.update(key.encode() + b"\0" + _value_bytes(f.metadata[key]) + b"\0")
        elif key.startswith(ARCH + "."):
            h.update(key.encode() + b"\0" + str(f.metadata[key]).encode() + b"\0")
    for name in sorted(f.tensors):
        t = f.tensors[name]
        ne = list(t.ne) + [1] * (4 - len(t.ne))
        h.update(name.encode() + b"\0" + struct.pack("<i4q", t.type, *ne[:4]))
        h.update(f.raw(name).reshape(-1).data)  # a view of the map: hashed as it is read
    return DIGEST + ":" + h.hexdigest()


def seal(path: str, every_key: bool = False) -> None:
    """Overwrite the PLACEHOLDER written as DIGEST_KEY's value in `path`'s header with the digest
    (`every_key` as digest()) of what the file holds."""
    with GGUFFile(path) as f:
        value = digest(f, every_key)
    with open(path, "r+b") as out:
        head = out.read(1 << 16)
        at = head.find(PLACEHOLDER.encode())
        while at < 0 and len(head) < os.fstat(out.fileno()).st_size:  # a long architecture before it
            out.seek(0)
            head = out.read(2 * len(head))
            at = head.find(PLACEHOLDER.encode())
        if at < 0:  # never expected: the writer wrote it
            raise GGMLError(f"{path}: the digest's placeholder is missing from the header just written")
        out.seek(at)
        out.write(value.encode())


def _write(path: str, kind: str, tensors: list, keys: dict) -> None:
    gguf = gguf_package()
    writer = gguf.GGUFWriter(path, ARCH)
    try:
        writer.add_string(ARCH + ".version", __version__)
        writer.add_string(ARCH + ".kind", kind)
        writer.add_string(DIGEST_KEY, PLACEHOLDER)
        for key, value in keys.items():
            writer.add_string(key, value)
        for name, array, raw_type in tensors:
            if raw_type is not None:  # quantized blocks, rows of bytes: the gguf package derives ne
                writer.add_tensor(name, array, raw_dtype=raw_type)
            else:
                writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32).reshape(np.shape(array) or (1,)))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    seal(path)


def write_model_file(path: str | os.PathLike, kind: str, tensors: Iterable, keys: dict, writer: str) -> str:
    """Write a model file atomically; returns its path.

    `tensors`: (name, array, raw type) triples, in file order: a float array (stored as f32,
    ne = its shape reversed), or with a gguf quantization type the blocks as uint8 rows.
    `keys`: the front end's `ggmlpy.*` string keys. `writer` names the calling function in errors."""
    if kind not in KINDS:
        raise GGMLError(f"{writer}: unknown model file kind {kind!r}")
    path = checked_path(path, writer)
    tensors = _check_entries(tensors, keys, writer)
    with atomic_write(path) as tmp:
        _write(tmp, kind, tensors, keys)
    return path


def model_file_bytes(kind: str, tensors: Iterable, keys: dict, writer: str) -> bytes:
    """The bytes write_model_file would write."""
    tensors = _check_entries(tensors, keys, writer)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.gguf")
        _write(path, kind, tensors, keys)
        with open(path, "rb") as f:
            return f.read()


class ModelFile:
    """A model file's contents, read and checked (read_model_file): its kind, `version`, string
    `keys`, and per tensor `arrays` (float32, numpy shape = ne reversed), `ne` and, for quantized
    tensors, `blocks` (ggml type, the raw bytes)."""

    def __init__(self, where: str, kind: str, version, keys: dict, arrays: dict, ne: dict, blocks: dict):
        self.where, self.kind, self.version, self.keys = where, kind, version, keys
        self.arrays, self.ne, self.blocks = arrays, ne, blocks

    def json(self, key: str, default=None):
        """A key's JSON value (default when absent); GGMLError naming the file when it is not JSON."""
        if key not in self.keys:
            return default
        try:
            return json.loads(self.keys[key])
        except ValueError as e:
            raise GGMLError(f"{self.where}: {key} is not valid JSON: {e}") from None


def is_model_file(data: bytes) -> bool:
    """Whether bytes (a file's first four are enough) start like a GGUF file."""
    return bytes(data[:4]) == b"GGUF"


def read_model_file(source: str | os.PathLike | bytes, kinds: Iterable[str], reader: str) -> ModelFile:
    """Read and check a model file (a path, or its bytes): a GGUF file (the parser's checks), of
    ggmlpy's architecture, string ggmlpy.* keys, of one of `kinds` (the kinds `reader`, the
    calling function, loads; another kind is an error saying which function loads it), and
    tensors of f32 or a quantized type. Every tensor is read into memory; the file is closed."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        where = "the model bytes"
        opener = lambda: GGUFFile.from_bytes(bytes(source), where)  # noqa: E731
    else:
        where = checked_path(source, reader)
        if not os.path.exists(where):
            raise GGMLError(f"no such model file: {where}")
        opener = lambda: GGUFFile(where)  # noqa: E731
    try:
        f = opener()
    except GGMLError as e:
        raise GGMLError(f"{where} is not a readable GGUF file (not a ggmlpy model container): {e}") from None
    with f:
        meta = f.metadata
        arch = meta.get("general.architecture")
        if arch != ARCH:
            raise GGMLError(f"{where}: GGUF architecture is {arch!r}, not {ARCH!r}: not a ggmlpy model file "
                            "(container)")
        keys = {}
        for key, value in meta.items():
            if key.startswith(ARCH + "."):
                if f.metadata_types[key] != "string":
                    raise GGMLError(f"{where}: {key} must be a string, is {f.metadata_types[key]}")
                keys[key] = value
        written = keys.pop(DIGEST_KEY, None)
        if written is None:
            warnings.warn(f"{where} has no digest ({DIGEST_KEY}: written before ggmlpy checked model files): "
                          "its contents cannot be checked; saving it again adds one", UserWarning, stacklevel=3)
        elif digest(f) != written:
            raise GGMLError(f"{where}: the file's weights or architecture do not match the digest written with "
                            "them: the file is damaged or was changed after it was saved")
        kind, version, arrays, ne, blocks = _contents(f, keys, where, kinds, reader)
    return ModelFile(where, kind, version, keys, arrays, ne, blocks)


def _contents(f: GGUFFile, keys: dict, where: str, kinds, reader: str) -> tuple:
    """(kind, version, arrays, ne, blocks) of model file `f`, its keys checked and taken from `keys`."""
    kind = keys.pop(ARCH + ".kind", UNKINDED)
    version = keys.pop(ARCH + ".version", None)
    if kind not in KINDS:
        raise GGMLError(f"{where}: unknown model file kind {kind!r} (written by ggmlpy {version}?)")
    kinds = tuple(kinds)
    if kind not in kinds:
        what, saver, loader = KINDS[kind]
        raise GGMLError(f"{where} holds {what} (written by {saver}), which {reader} cannot load: use {loader}")
    arrays, ne, blocks = {}, {}, {}
    for name, t in f.tensors.items():
        if t.type_name != "f32" and not lib.ggml_is_quantized(t.type):
            raise GGMLError(f"{where}: tensor {name!r} is {t.type_name}, expected f32 or a quantized type")
        if lib.ggml_is_quantized(t.type):
            blocks[name] = (t.type, np.array(f.data(name, raw=True)).reshape(-1))
        ne[name] = list(t.ne)
        arrays[name] = np.array(f.data(name), dtype=np.float32)
    return kind, version, arrays, ne, blocks
