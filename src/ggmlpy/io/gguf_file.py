"""Reading GGUF files (ggmlR's R/gguf.R): a validating parser over a read-only memory map.

The whole header (key-value metadata and tensor table) is parsed and checked before
any tensor is touched, with every count and length held against the bytes left in
the file, so a damaged or hostile file costs at most its own size in memory and gets
a GGMLError naming what is wrong: magic, version, counts, string and array lengths,
value types, duplicate keys or tensor names, dimensions, element types, row lengths
that are not whole blocks, and tensor offsets (aligned, inside the file, not
overlapping). Tensor data stay in the map until asked for: `gguf_tensor_data` gives
float32 (dequantized through ggml's own kernels) or the raw blocks.

The same checks apply wherever ggmlpy reads GGUF (`ag_load_model` too).
"""
from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from .._sigint import uninterruptible
from ..bindings import lib
from ..errors import GGMLError
from ..core.quants import dequantize, ggml_validate_row_data
from ..core.types import TYPE_NAMES

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # including the terminating zero

# GGUF value types: id -> (name, struct format or None for string/array)
VALUE_TYPES = {0: ("uint8", "<B"), 1: ("int8", "<b"), 2: ("uint16", "<H"), 3: ("int16", "<h"),
               4: ("uint32", "<I"), 5: ("int32", "<i"), 6: ("float32", "<f"), 7: ("bool", "<?"),
               8: ("string", None), 9: ("array", None), 10: ("uint64", "<Q"), 11: ("int64", "<q"),
               12: ("float64", "<d")}
_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
       12: "<f8"}
# integer element types: returned as their own dtype, not float32
_INT_TYPES = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "f64": np.float64}


class _Cursor:
    """Reads little-endian values from the map, refusing to pass the end of the file."""

    def __init__(self, buf, path: str):
        self.buf, self.pos, self.size, self.path = buf, 0, len(buf), path

    def fail(self, msg: str):
        raise GGMLError(f"{self.path}: not a valid GGUF file: {msg}")

    def take(self, n: int, what: str) -> int:
        if n < 0 or n > self.size - self.pos:
            self.fail(f"{what} needs {n} bytes at offset {self.pos}, but the file ends at {self.size} (truncated?)")
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt: str, what: str):
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"the length of {what}")
        start = self.take(n, f"{what} ({n} bytes)")
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"{what} is not UTF-8")


class TensorInfo:
    """One entry of the tensor table: name, ggml type, ne (ggml order), offset in the data section."""

    __slots__ = ("name", "type", "ne", "offset", "nbytes", "file_offset")

    def __init__(self, name, type, ne, offset, nbytes, file_offset):
        self.name, self.type, self.ne, self.offset = name, type, ne, offset
        self.nbytes, self.file_offset = nbytes, file_offset

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.type]

    def as_dict(self) -> dict:
        return {"name": self.name, "type": self.type_name, "type_id": self.type, "shape": list(self.ne),
                "n_dims": len(self.ne), "offset": self.offset, "file_offset": self.file_offset,
                "size_bytes": self.nbytes, "n_elements": int(np.prod(self.ne, dtype=np.int64)) if self.ne else 1}


def _read_value(cur: _Cursor, vtype: int, key: str):
    name, fmt = VALUE_TYPES[vtype]
    if vtype == 8:
        return cur.string(f"the string value of {key!r}")
    if vtype == 7:
        b = cur.unpack("<B", f"the value of {key!r}")
        if b > 1:
            cur.fail(f"key {key!r}: a bool must be 0 or 1, got {b}")
        return bool(b)
    return cur.unpack(fmt, f"the value of {key!r}")


def _read_array(cur: _Cursor, key: str):
    etype = cur.unpack("<I", f"the element type of array {key!r}")
    if etype not in VALUE_TYPES:
        cur.fail(f"array {key!r} has unknown element type {etype}")
    if etype == 9:
        cur.fail(f"array {key!r} holds arrays; nested arrays are not supported (ggml's reader refuses them too)")
    n = cur.unpack("<Q", f"the length of array {key!r}")
    ename = VALUE_TYPES[etype][0]
    if etype == 8:
        if n > (cur.size - cur.pos) // 8:  # every string takes at least its 8-byte length
            cur.fail(f"array {key!r} claims {n} strings, more than the rest of the file can hold")
        return ename, [cur.string(f"string {i} of array {key!r}") for i in range(n)]
    itemsize = struct.calcsize(VALUE_TYPES[etype][1])
    if n > (cur.size - cur.pos) // itemsize:
        cur.fail(f"array {key!r} claims {n} {ename} values, more than the rest of the file can hold")
    start = cur.take(n * itemsize, f"array {key!r}")
    arr = np.frombuffer(cur.buf, dtype=_NP[etype], count=n, offset=start).copy()
    if etype == 7:
        if (arr > 1).any():
            cur.fail(f"array {key!r}: bools must be 0 or 1")
        arr = arr.astype(bool)
    return ename, arr


def _check_size(size: int, path: str) -> None:
    if size < 24:
        raise GGMLError(f"{path}: not a valid GGUF file: {size} bytes is shorter than a GGUF header (24)")


class GGUFFile:
    """An open GGUF file (`gguf_load`): header, metadata and tensor table, data memory-mapped.

    Also a context manager; `close()` (or `gguf_free`) releases the map. Arrays handed out
    as views keep the map alive until they are dropped."""

    _map = None

    def __init__(self, path, meta_only: bool = False):
        path = os.fspath(path)
        if not os.path.exists(path):
            raise GGMLError(f"no such GGUF file: {path}")
        if not os.path.isfile(path):
            raise GGMLError(f"{path}: not a regular file")
        self.path, self.meta_only = path, bool(meta_only)
        self._map = None
        with open(path, "rb") as f:
            _check_size(os.fstat(f.fileno()).st_size, path)
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._parse_map()

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "the GGUF bytes", meta_only: bool = False) -> "GGUFFile":
        """The same, over a GGUF file's bytes held in memory (copied into an anonymous map);
        `name` stands for the path in messages."""
        self = cls.__new__(cls)
        self.path, self.meta_only, self._map = name, bool(meta_only), None
        _check_size(len(data), name)
        self._map = mmap.mmap(-1, len(data))
        self._map.write(data)
        self._parse_map()
        return self

    def _parse_map(self) -> None:
        try:
            with memoryview(self._map) as view:
                self._parse(_Cursor(view, self.path))
        except BaseException:
            self.close()
            raise

    # -- parsing ------------------------------------------------------------------------------
    def _parse(self, cur: _Cursor) -> None:
        start = cur.take(4, "the magic")
        magic = bytes(cur.buf[start:start + 4])
        if magic != GGUF_MAGIC:
            cur.fail(f"magic is {magic!r}, expected {GGUF_MAGIC!r}")
        version = cur.unpack("<I", "the version")
        if version not in GGUF_VERSIONS:
            hint = " (a big-endian file?)" if version & 0xFFFF == 0 and version else ""
            hint = hint or (" (GGUFv1 is no longer supported)" if version == 1 else "")
            cur.fail(f"version {version} is not supported (supported: {', '.join(map(str, GGUF_VERSIONS))}){hint}")
        n_tensors = cur.unpack("<q", "the tensor count")
        n_kv = cur.unpack("<q", "the key-value count")
        left = cur.size - cur.pos
        # the smallest key-value pair is 13 bytes (8-byte length, a 1-byte key, type, 1-byte value),
        # the smallest tensor entry 24 (8-byte length, empty name, n_dims = 0, type, offset)
        if n_kv < 0 or n_kv > left // 13:
            cur.fail(f"key-value count {n_kv} is impossible for a file of {cur.size} bytes")
        if n_tensors < 0 or n_tensors > left // 24:
            cur.fail(f"tensor count {n_tensors} is impossible for a file of {cur.size} bytes")
        self.version, self.n_tensors, self.n_kv = version, n_tensors, n_kv

        self.metadata, self.metadata_types = {}, {}
        for i in range(n_kv):
            key = cur.string(f"key {i}")
            if not key:
                cur.fail(f"key {i} is empty")
            if key in self.metadata:
                cur.fail(f"duplicate key {key!r}")
            vtype = cur.unpack("<I", f"the type of {key!r}")
            if vtype not in VALUE_TYPES:
                cur.fail(f"key {key!r} has unknown value type {vtype}")
            if vtype == 9:
                ename, value = _read_array(cur, key)
                self.metadata_types[key] = f"array[{ename}]"
            else:
                value = _read_value(cur, vtype, key)
                self.metadata_types[key] = VALUE_TYPES[vtype][0]
            self.metadata[key] = value

        self.alignment = GGUF_DEFAULT_ALIGNMENT
        if "general.alignment" in self.metadata:
            if self.metadata_types["general.alignment"] != "uint32":
                cur.fail(f"general.alignment must be uint32, is {self.metadata_types['general.alignment']}")
            a = self.metadata["general.alignment"]
            if a == 0 or a & (a - 1):
                cur.fail(f"general.alignment {a} is not a power of 2")
            self.alignment = a

        self.tensors: dict[str, TensorInfo] = {}
        infos = []
        for i in range(n_tensors):
            name = cur.string(f"the name of tensor {i}")
            if len(name.encode()) >= GGML_MAX_NAME:
                cur.fail(f"tensor name {name[:80]!r} is longer than ggml's {GGML_MAX_NAME - 1} bytes")
            if name in self.tensors:
                cur.fail(f"duplicate tensor name {name!r}")
            n_dims = cur.unpack("<I", f"the dimension count of {name!r}")
            if n_dims > GGML_MAX_DIMS:
                cur.fail(f"tensor {name!r} has {n_dims} dimensions; ggml has at most {GGML_MAX_DIMS}")
            ne = [cur.unpack("<q", f"dimension {j} of {name!r}") for j in range(n_dims)]
            if any(d < 0 for d in ne):
                cur.fail(f"tensor {name!r} has a negative dimension: {ne}")
            n_el = 1
            for d in ne:
                n_el *= d
            if n_el >= 2**62:
                cur.fail(f"tensor {name!r} has absurd dimensions {ne}")
            ttype = cur.unpack("<I", f"the type of {name!r}")
            if ttype not in TYPE_NAMES or not lib.ggml_type_size(ttype):
                cur.fail(f"tensor {name!r} has unknown ggml type {ttype}")
            blck = int(lib.ggml_blck_size(ttype))
            ne0 = ne[0] if ne else 1
            if ne0 % blck:
                cur.fail(f"tensor {name!r} of type {TYPE_NAMES[ttype]} has rows of {ne0} elements, "
                         f"not a whole number of blocks of {blck}")
            nbytes = n_el // blck * int(lib.ggml_type_size(ttype))
            offset = cur.unpack("<Q", f"the data offset of {name!r}")
            if offset % self.alignment:
                cur.fail(f"tensor {name!r} has offset {offset}, not a multiple of the alignment {self.alignment}")
            info = TensorInfo(name, ttype, ne, offset, nbytes, None)
            self.tensors[name] = info
            infos.append(info)

        if n_tensors:
            pad = -cur.pos % self.alignment
            cur.take(pad, "the padding before the tensor data")
        self.data_offset = cur.pos
        data_size = cur.size - cur.pos
        for t in infos:
            if t.offset > data_size or t.nbytes > data_size - t.offset:
                cur.fail(f"tensor {t.name!r} ({t.nbytes} bytes at data offset {t.offset}) runs past the end of "
                         f"the file (the data section holds {data_size} bytes; truncated?)")
            t.file_offset = self.data_offset + t.offset
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in infos if t.nbytes)
        for (s0, e0, n0), (s1, e1, n1) in zip(spans, spans[1:]):
            if s1 < e0:
                cur.fail(f"tensors {n0!r} (bytes {s0}..{e0}) and {n1!r} (bytes {s1}..{e1}) overlap")

    # -- access ----------------------------------------------------------------------------------
    def _alive(self, what: str):
        if self._map is None:
            raise GGMLError(f"{what}: this GGUF file has been freed (gguf_free / close)")

    def info(self, name: str) -> TensorInfo:
        """The tensor's type, shape (ne), offset and size; GGMLError naming similar names if absent."""
        self._alive("gguf_tensor_info")
        if not isinstance(name, str):
            raise GGMLError(f"a tensor name is a string, got {type(name).__name__}")
        t = self.tensors.get(name)
        if t is None:
            near = [n for n in self.tensors if name.split(".")[-1] in n][:5]
            raise GGMLError(f"{self.path}: no tensor {name!r}" + (f" (similar: {near})" if near else ""))
        return t

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes, a read-only view of the map: numpy shape (ne3.., ne1, row bytes)."""
        t = self.info(name)
        self._check_data("gguf_tensor_data")
        data = np.frombuffer(self._map, dtype=np.uint8, count=t.nbytes, offset=t.file_offset)
        rows = list(reversed(t.ne[1:]))
        row_bytes = t.nbytes // max(1, int(np.prod(rows, dtype=np.int64))) if t.nbytes else 0
        return data.reshape(rows + [row_bytes]) if t.ne else data

    def _check_data(self, what: str):
        self._alive(what)
        if self.meta_only:
            raise GGMLError(f"{what}: GGUF loaded with meta_only=True, tensor data not available. "
                            "Reload with gguf_load(path, meta_only=False)")

    def data(self, name: str, raw: bool = False, validate: bool = False) -> np.ndarray:
        """The tensor as numpy, shape ne reversed: integers as they are, float types and quantized
        blocks as float32 (raw=True: the bytes; validate=True: refuse NaN and infinities)."""
        t = self.info(name)
        blocks = self.raw(name)
        if validate and t.nbytes and not ggml_validate_row_data(t.type, blocks.reshape(-1)):
            raise GGMLError(f"{self.path}: tensor {name!r} holds NaN or infinite values (or block scales)")
        if raw:
            return blocks
        shape = tuple(reversed(t.ne))
        flat = blocks.reshape(-1)
        if t.type_name in _INT_TYPES:
            return flat.view(np.dtype(_INT_TYPES[t.type_name]).newbyteorder("<")).astype(_INT_TYPES[t.type_name]).reshape(shape)
        if not t.nbytes:
            return np.zeros(shape, np.float32)
        return dequantize(t.type, flat).reshape(shape)

    def close(self) -> None:
        """Release the memory map (arrays still viewing it keep it until they go)."""
        m, self._map = self._map, None
        if m is not None:
            try:
                m.close()
            except BufferError:  # arrays still view it: the map is released when they go
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @uninterruptible
    def __del__(self):
        self.close()

    def __repr__(self):
        state = "freed" if self._map is None else f"{self.n_tensors} tensors, {self.n_kv} keys"
        return f"<GGUF file {os.path.basename(self.path)!r} v{self.version}: {state}" + (
            ", meta_only>" if self.meta_only else ">")


# -- ggmlR's functions -------------------------------------------------------------------------------
def _handle(x, what: str) -> GGUFFile:
    if not isinstance(x, GGUFFile):
        raise GGMLError(f"{what}: Expected a gguf object (from gguf_load), got {type(x).__name__}")
    return x


def gguf_load(path: str | os.PathLike[str], meta_only: bool = False) -> GGUFFile:
    """Open and validate a GGUF file; returns a handle (a context manager too). Tensor data stay
    in a read-only memory map. meta_only=True refuses tensor data, as ggmlR's does."""
    return GGUFFile(path, meta_only)


def gguf_free(x: GGUFFile) -> None:
    """Release the file's memory map now (safe to call twice)."""
    _handle(x, "gguf_free").close()


def gguf_metadata(x: GGUFFile, with_types: bool = False) -> dict:
    """Every key: value (str, int, float, bool; numeric arrays as numpy, string arrays as lists).
    with_types=True gives key: (GGUF type name, value), e.g. ("array[string]", [...])."""
    h = _handle(x, "gguf_metadata")
    h._alive("gguf_metadata")
    if with_types:
        return {k: (h.metadata_types[k], v) for k, v in h.metadata.items()}
    return dict(h.metadata)


def gguf_tensor_names(x: GGUFFile) -> list:
    """The tensors' names, in file order."""
    h = _handle(x, "gguf_tensor_names")
    h._alive("gguf_tensor_names")
    return list(h.tensors)


def gguf_tensor_info(x: GGUFFile, name: str) -> dict:
    """{"name", "shape" (ggml ne), "type" ("q4_K"), "type_id", "n_dims", "offset" (in the data
    section), "file_offset", "size_bytes", "n_elements"} of one tensor."""
    return _handle(x, "gguf_tensor_info").info(name).as_dict()


def gguf_tensor_data(x: GGUFFile, name: str, raw: bool = False, validate: bool = False) -> np.ndarray:
    """A tensor's values as numpy, shape = ggml ne reversed (the layout rule): float32 for f32,
    f16, bf16 and quantized types (dequantized with ggml's kernels), the integer types as
    themselves. raw=True: the stored bytes instead (read-only view, rows of blocks).
    validate=True: first run ggml_validate_row_data (NaN or infinite values or scales raise)."""
    return _handle(x, "gguf_tensor_data").data(name, raw=raw, validate=validate)


__all__ = ["gguf_load", "gguf_free", "gguf_metadata", "gguf_tensor_names", "gguf_tensor_info", "gguf_tensor_data",
           "GGUFFile"]
