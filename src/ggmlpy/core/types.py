"""ggml's element types, read from the pinned header's enum: constants, sizes and names.

Every `GGML_TYPE_*` constant is generated from `enum ggml_type` in cdef.h, so a
type the pin adds or drops appears or disappears here without code changes.
Ids missing from the enum (ggml's removed Q4_0_4_4 family, 31-33 and 36-38)
are rejected: ggml's own tables hold zeros there and its size helpers divide
by them.
"""
from __future__ import annotations

import numpy as np

from ..bindings import ffi, lib
from ..errors import GGMLError

# name (GGML_TYPE_Q4_K) -> id, every member of the pinned enum except the count
TYPE_CONSTANTS = {n: int(v) for n, v in ffi.typeof("enum ggml_type").relements.items() if n != "GGML_TYPE_COUNT"}
GGML_TYPE_COUNT = int(lib.GGML_TYPE_COUNT)
# id -> ggml's own short name ("q4_K")
TYPE_NAMES = {v: ffi.string(lib.ggml_type_name(v)).decode() for v in TYPE_CONSTANTS.values()}
_BY_NAME = {name.lower(): v for v, name in TYPE_NAMES.items()}

globals().update(TYPE_CONSTANTS)


def type_id(type: int | str, what: str = "type") -> int:
    """A ggml type id from an id or a name ("q4_K", "Q4_K", "GGML_TYPE_Q4_K"); GGMLError otherwise."""
    if isinstance(type, str):
        key = type.lower().removeprefix("ggml_type_")
        if key not in _BY_NAME:
            raise GGMLError(f"{what}: unknown ggml type {type!r}; known: {', '.join(sorted(TYPE_NAMES.values()))}")
        return _BY_NAME[key]
    if isinstance(type, (bool, np.bool_)) or not isinstance(type, (int, np.integer)):
        raise GGMLError(f"{what}: a ggml type is an int (GGML_TYPE_*) or a name, got {type!r}")
    t = int(type)
    if t not in TYPE_NAMES:
        raise GGMLError(f"{what}: {t} is not a ggml type of this build (valid ids: "
                        f"{', '.join(str(v) for v in sorted(TYPE_NAMES))})")
    return t


def ggml_type_size(type: int | str) -> int:
    """Bytes of one block of `type` (one element for f32, f16, ...; 18 bytes per 32 for q4_0)."""
    return int(lib.ggml_type_size(type_id(type, "ggml_type_size")))


def ggml_blck_size(type: int | str) -> int:
    """Elements per block of `type`: 1 for plain types, 32 for q4_0, 256 for the K and IQ types."""
    return int(lib.ggml_blck_size(type_id(type, "ggml_blck_size")))


def ggml_type_sizef(type: int | str) -> float:
    """Average bytes per element of `type` (type size / block size): 0.5625 for q4_0.

    ggmlR computes ggml_row_size(type, 1), which ggml asserts on (one element is not a
    whole block) for every quantized type; the quotient is what the name promises."""
    t = type_id(type, "ggml_type_sizef")
    return int(lib.ggml_type_size(t)) / int(lib.ggml_blck_size(t))


def ggml_row_size(type: int | str, ne: int) -> int:
    """Bytes of a row of `ne` elements of `type`; `ne` must be a whole number of blocks."""
    t = type_id(type, "ggml_row_size")
    ne = _count(ne, "ggml_row_size: ne")
    blck = int(lib.ggml_blck_size(t))
    if ne % blck:
        raise GGMLError(f"ggml_row_size: {ne} elements is not a whole number of {TYPE_NAMES[t]} blocks of {blck}")
    return int(lib.ggml_type_size(t)) * (ne // blck)


def ggml_is_quantized(type: int | str) -> bool:
    """True for block-quantized types (q4_0, q4_K, iq2_xxs, mxfp4, ...)."""
    return bool(lib.ggml_is_quantized(type_id(type, "ggml_is_quantized")))


def ggml_quant_block_info(type: int | str) -> dict:
    """{"type_name", "type_size", "block_size", "is_quantized"} of a ggml type, as ggmlR returns it."""
    t = type_id(type, "ggml_quant_block_info")
    return {"type_name": TYPE_NAMES[t], "type_size": int(lib.ggml_type_size(t)),
            "block_size": int(lib.ggml_blck_size(t)), "is_quantized": bool(lib.ggml_is_quantized(t))}


_FTYPES = {int(v) for n, v in ffi.typeof("enum ggml_ftype").relements.items() if n != "GGML_FTYPE_UNKNOWN"}


def ggml_ftype_to_ggml_type(ftype: int) -> int:
    """The tensor type of a whole-model file type (GGML_FTYPE_MOSTLY_Q4_K -> GGML_TYPE_Q4_K)."""
    if isinstance(ftype, bool) or not isinstance(ftype, (int, np.integer)) or int(ftype) not in _FTYPES:
        raise GGMLError(f"ggml_ftype_to_ggml_type: unknown ftype {ftype!r}")
    return int(lib.ggml_ftype_to_ggml_type(int(ftype)))


def _count(n, what: str, allow_zero: bool = False) -> int:
    """A non-negative integer count (floats that are whole numbers pass, as R's numerics do)."""
    if isinstance(n, (bool, np.bool_)):
        raise GGMLError(f"{what} must be an integer, got {n!r}")
    if isinstance(n, (float, np.floating)):
        if not np.isfinite(n) or n != int(n):
            raise GGMLError(f"{what} must be a whole number, got {n!r}")
        n = int(n)
    if not isinstance(n, (int, np.integer)):
        raise GGMLError(f"{what} must be an integer, got {type(n).__name__}")
    n = int(n)
    if n < 0 or (n == 0 and not allow_zero):
        raise GGMLError(f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {n}")
    if n >= 2**40:
        raise GGMLError(f"{what} is too large: {n}")
    return n


__all__ = sorted(TYPE_CONSTANTS) + ["GGML_TYPE_COUNT", "ggml_type_size", "ggml_blck_size", "ggml_type_sizef",
                                    "ggml_row_size", "ggml_is_quantized", "ggml_quant_block_info",
                                    "ggml_ftype_to_ggml_type"]
