"""Quantization through libggml's own kernels: ggmlR's quantize_* / dequantize_row_* families.

The families are generated from the declarations in cdef.h (ggml-quants.h's
exported row functions), one Python function per C function:

    quantize_row_<t>_ref(src, n_elements)          plain reference quantizer, no weights
    quantize_<t>(src, n_rows, n_per_row, imatrix)  ggml's quantizer, optional importance weights
    dequantize_row_<t>(raw, n_elements)            blocks back to float32

numpy in, numpy out: quantizers return the blocks as a flat uint8 array (R's raw
vector), dequantizers a float32 array. ggml checks almost nothing (a row length
that is not a whole number of blocks is silently truncated by the reference
quantizers and aborts the process in the others), so everything is checked here
first: counts, lengths, finite input, importance weights, and, for the types that
search a grid, magnitudes whose squared errors would overflow float32 (ggml then
finds no grid point and aborts).
"""
from __future__ import annotations

import inspect
import pathlib
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .._naming import public_function
from ..bindings import ffi, lib
from ..errors import GGMLError
from .types import TYPE_NAMES, _count, type_id

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_CDEF = (pathlib.Path(__file__).parent.parent / "bindings" / "cdef.h").read_text()
_ROW_REF = re.findall(r"void quantize_row_(\w+)_ref\(const float \* x, void \* y, int64_t k\);", _CDEF)
_DEQUANT = re.findall(r"void dequantize_row_(\w+)\(const void \* x, float \* y, int64_t k\);", _CDEF)
_QUANT = re.findall(r"size_t quantize_(\w+)\(const float \* src, void \* dst, int64_t nrows, int64_t n_per_row, "
                    r"const float \* imatrix\);", _CDEF)

# Types whose quantizer searches a lattice (grid) of codes. ggml aborts when no grid point has
# a finite error, which happens once weight * error^2 overflows float32; these need a bounded input.
_GRID_TYPES = frozenset(type_id(n) for n in ("iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"))
# |x|^3 * max(imatrix, 1) must stay below this: the grid error sums 8 terms w*(s*q - x)^2 with
# w ~ imatrix*|x| and (s*q - x) up to ~100|x|, and float32 overflows at 3.4e38 (margin kept).
GRID_MAX_CUBE = 1e30
# ggml_quantize_chunk's switch: every other type reaches an assert(false) and then aborts
_CHUNK_TYPES = frozenset(type_id(n) for n in ("q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4",
                                              "nvfp4", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "tq1_0", "tq2_0",
                                              "iq2_xxs", "iq2_xs", "iq3_xxs", "iq3_s", "iq2_s", "iq1_s", "iq1_m",
                                              "iq4_nl", "iq4_xs", "f16", "bf16", "f32"))
_IQ2_TABLE_TYPES = frozenset(type_id(n) for n in ("iq2_xxs", "iq2_xs", "iq1_s", "iq1_m", "iq2_s"))

# ggml_quantize_free releases the grids a running quantizer reads (cffi drops the GIL during
# the call), so quantizing and freeing exclude each other.
_LOCK = threading.RLock()


# -- checks -------------------------------------------------------------------------------------
def _floats(src, what: str) -> np.ndarray:
    arr = np.asarray(src)
    if arr.dtype.kind not in "biuf":
        raise GGMLError(f"{what}: expected numbers, got an array of dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float32).ravel()


def _finite(x: np.ndarray, what: str) -> None:
    if not np.isfinite(x).all():
        bad = int(np.flatnonzero(~np.isfinite(x))[0])
        raise GGMLError(f"{what}: values must be finite; element {bad} is {x[bad]} "
                        "(ggml would write NaN or infinite block scales, or abort for the IQ types)")


def _check_blocks(t: int, n: int, what: str) -> int:
    blck = int(lib.ggml_blck_size(t))
    if n % blck:
        raise GGMLError(f"{what}: {n} elements is not a whole number of {TYPE_NAMES[t]} blocks of {blck}")
    return n // blck


def _check_grid_range(t: int, x: np.ndarray, imatrix, what: str) -> None:
    if t not in _GRID_TYPES or not x.size:
        return
    amax = float(np.max(np.abs(x)))
    wmax = max(float(np.max(imatrix)), 1.0) if imatrix is not None else 1.0
    if amax ** 3 * wmax > GRID_MAX_CUBE:
        limit = (GRID_MAX_CUBE / wmax) ** (1 / 3)
        raise GGMLError(f"{what}: {TYPE_NAMES[t]} quantizes values up to about {limit:.3g} in magnitude"
                        f"{' with these importance weights' if imatrix is not None else ''}; the largest is "
                        f"{amax:.3g}. ggml's grid search overflows float32 beyond that and aborts; scale the data "
                        "first (the block scales are f16 and could not hold the result anyway)")


def _imatrix(imatrix, n_per_row: int, t: int, what: str):
    if imatrix is None:
        if bool(lib.ggml_quantize_requires_imatrix(t)):
            raise GGMLError(f"{what}: {TYPE_NAMES[t]} needs an importance matrix (imatrix, one non-negative "
                            f"weight per column, {n_per_row} values); ggml aborts without one")
        return None
    w = _floats(imatrix, f"{what}: imatrix")
    if w.size != n_per_row:
        raise GGMLError(f"{what}: imatrix must hold one weight per column ({n_per_row}), got {w.size}")
    _finite(w, f"{what}: imatrix")
    if (w < 0).any():
        raise GGMLError(f"{what}: imatrix weights must be >= 0 (they are mean squared activations)")
    return w


def _symbol(name: str):
    fn = getattr(lib, name, None)
    if fn is None:
        raise GGMLError(f"{name} is not exported by the loaded libggml")
    return fn


# -- the three families -------------------------------------------------------------------------
def _quantize_row_ref(suffix: str, src: ArrayLike, n_elements: int | None = None) -> np.ndarray:
    what = f"quantize_row_{suffix}_ref"
    t = type_id(suffix, what)
    x = _floats(src, what)
    n = x.size if n_elements is None else _count(n_elements, f"{what}: n_elements")
    if n == 0:
        raise GGMLError(f"{what}: no values to quantize")
    if x.size != n:
        raise GGMLError(f"{what}: n_elements is {n} but src holds {x.size} values")
    nb = _check_blocks(t, n, what)
    _finite(x, what)
    _check_grid_range(t, x, None, what)
    out = np.zeros(nb * int(lib.ggml_type_size(t)), dtype=np.uint8)
    with _LOCK:
        lib.ggml_quantize_init(t)  # the IQ reference quantizers read grids that init builds
        _symbol(f"quantize_row_{suffix}_ref")(ffi.from_buffer("float[]", x), ffi.from_buffer(out), n)
    return out


def _rows(src, n_rows, n_per_row, what: str):
    x = np.asarray(src)
    if n_rows is None and n_per_row is None:
        if x.ndim == 2:
            n_rows, n_per_row = x.shape
        elif x.ndim == 1:
            n_rows, n_per_row = 1, x.size
        else:
            raise GGMLError(f"{what}: give n_rows and n_per_row, or a 1-D or 2-D (n_rows, n_per_row) array")
    if n_rows is None or n_per_row is None:
        raise GGMLError(f"{what}: give both n_rows and n_per_row, or neither")
    n_rows = _count(n_rows, f"{what}: n_rows")
    n_per_row = _count(n_per_row, f"{what}: n_per_row")
    if n_per_row >= 2**31:
        raise GGMLError(f"{what}: n_per_row must be below 2^31 (ggml's kernels count a row in int)")
    xf = _floats(x, what)
    if xf.size != n_rows * n_per_row:
        raise GGMLError(f"{what}: src holds {xf.size} values, n_rows * n_per_row is {n_rows * n_per_row}")
    return xf, n_rows, n_per_row


def _quantize(suffix: str, src: ArrayLike, n_rows: int | None = None, n_per_row: int | None = None,
              imatrix: ArrayLike | None = None) -> np.ndarray:
    what = f"quantize_{suffix}"
    t = type_id(suffix, what)
    x, n_rows, n_per_row = _rows(src, n_rows, n_per_row, what)
    _check_blocks(t, n_per_row, f"{what}: n_per_row")
    _finite(x, what)
    w = _imatrix(imatrix, n_per_row, t, what)
    _check_grid_range(t, x, w, what)
    out = np.zeros(n_rows * (n_per_row // int(lib.ggml_blck_size(t))) * int(lib.ggml_type_size(t)), dtype=np.uint8)
    with _LOCK:
        lib.ggml_quantize_init(t)
        size = _symbol(what)(ffi.from_buffer("float[]", x), ffi.from_buffer(out), n_rows, n_per_row,
                             ffi.NULL if w is None else ffi.from_buffer("float[]", w))
    if int(size) != out.size:
        raise GGMLError(f"{what}: ggml wrote {size} bytes, expected {out.size}")
    return out


def _raw(raw, what: str) -> np.ndarray:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=np.uint8)
    arr = np.asarray(raw)
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr).ravel()
    if arr.dtype.kind in "iu" and arr.size and (arr.min() < 0 or arr.max() > 255):
        raise GGMLError(f"{what}: raw data must be bytes (0..255)")
    if arr.dtype.kind not in "iu":
        raise GGMLError(f"{what}: raw data must be bytes (a uint8 array), got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.uint8).ravel()


def _dequantize_row(suffix: str, raw: bytes | bytearray | memoryview | ArrayLike, n_elements: int | None = None,
                    ) -> np.ndarray:
    what = f"dequantize_row_{suffix}"
    t = type_id(suffix, what)
    data = _raw(raw, what)
    tsize, blck = int(lib.ggml_type_size(t)), int(lib.ggml_blck_size(t))
    if n_elements is None:
        if data.size % tsize:
            raise GGMLError(f"{what}: {data.size} bytes is not a whole number of {tsize}-byte blocks")
        n = data.size // tsize * blck
    else:
        n = _count(n_elements, f"{what}: n_elements")
    if n == 0:
        raise GGMLError(f"{what}: no values to dequantize")
    nb = _check_blocks(t, n, what)
    if data.size != nb * tsize:
        raise GGMLError(f"{what}: {n} elements are {nb} blocks of {tsize} bytes ({nb * tsize}), "
                        f"got {data.size} bytes")
    out = np.empty(n, dtype=np.float32)
    _symbol(what)(ffi.from_buffer(data), ffi.from_buffer("float[]", out), n)
    return out


def _make(template: Callable[..., np.ndarray], suffix: str, name: str, doc: str) -> Callable[..., np.ndarray]:
    def fn(*args, **kwargs):
        return template(suffix, *args, **kwargs)
    public_function(fn, name, doc)
    # the template's parameters and hints after `suffix`, for help(), inspect and type checkers
    sig = inspect.signature(template)
    fn.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
    fn.__annotations__ = {k: v for k, v in template.__annotations__.items() if k != "suffix"}
    return fn


_GENERATED = {}
for _s in _ROW_REF:
    _n = f"quantize_row_{_s}_ref"
    _GENERATED[_n] = _make(_quantize_row_ref, _s, _n, f"""{_n}(src, n_elements=None) -> uint8 array.

    ggml's reference {_s} quantizer (no importance weights) over n_elements finite values,
    a whole number of {_s} blocks; the result holds the blocks' bytes.""")
for _s in _QUANT:
    _n = f"quantize_{_s}"
    _GENERATED[_n] = _make(_quantize, _s, _n, f"""{_n}(src, n_rows=None, n_per_row=None, imatrix=None) -> uint8 array.

    ggml's {_s} quantizer over n_rows rows of n_per_row finite values (n_per_row a whole number
    of blocks; both are read from a 2-D array's shape when omitted). imatrix: optional importance
    weights, one non-negative value per column{'; required for ' + _s if _s in ('iq2_xxs', 'iq2_xs', 'iq1_s') else ''}.""")
for _s in _DEQUANT:
    _n = f"dequantize_row_{_s}"
    _GENERATED[_n] = _make(_dequantize_row, _s, _n, f"""{_n}(raw, n_elements=None) -> float32 array.

    ggml's {_s} dequantizer: raw holds exactly n_elements / block size blocks (n_elements is
    inferred from the byte count when omitted).""")
globals().update(_GENERATED)


# -- ggml's chunk quantizer, tables, validation -------------------------------------------------
def ggml_quantize_chunk(type: int | str, src: ArrayLike, nrows: int | None = None, n_per_row: int | None = None,
                        imatrix: ArrayLike | None = None) -> np.ndarray:
    """Quantize nrows rows of n_per_row values to `type` with ggml_quantize_chunk (any quantized
    type ggml can produce, or f16, bf16, f32); returns the blocks as a flat uint8 array. A 2-D
    (nrows, n_per_row) array needs no counts. imatrix: optional importance weights, one
    non-negative value per column (required for the types ggml_quantize_requires_imatrix names).
    ggml's `start` offset is slicing here: pass the rows themselves."""
    what = "ggml_quantize_chunk"
    t = type_id(type, what)
    if t not in _CHUNK_TYPES:
        raise GGMLError(f"{what}: ggml cannot quantize to {TYPE_NAMES[t]}; types: "
                        + ", ".join(sorted(TYPE_NAMES[c] for c in _CHUNK_TYPES)))
    x, nrows, n_per_row = _rows(src, nrows, n_per_row, what)
    _check_blocks(t, n_per_row, f"{what}: n_per_row")
    if lib.ggml_is_quantized(t):
        _finite(x, what)
    w = _imatrix(imatrix, n_per_row, t, what)
    _check_grid_range(t, x, w, what)
    row_size = int(lib.ggml_type_size(t)) * (n_per_row // int(lib.ggml_blck_size(t)))
    out = np.zeros(nrows * row_size, dtype=np.uint8)
    with _LOCK:
        size = lib.ggml_quantize_chunk(t, ffi.from_buffer("float[]", x), ffi.from_buffer(out), 0, nrows, n_per_row,
                                       ffi.NULL if w is None else ffi.from_buffer("float[]", w))
    if int(size) != out.size:
        raise GGMLError(f"{what}: ggml wrote {size} bytes, expected {out.size}")
    return out


def ggml_quantize_init(type: int | str) -> None:
    """Build the lookup grids `type` needs (the IQ types); quantizers here call it themselves."""
    t = type_id(type, "ggml_quantize_init")
    with _LOCK:
        lib.ggml_quantize_init(t)


def ggml_quantize_free() -> None:
    """Release the IQ grids. Safe to call repeatedly; a later quantization builds them again."""
    with _LOCK:
        lib.ggml_quantize_free()


def ggml_quantize_requires_imatrix(type: int | str) -> bool:
    """True for the types ggml refuses to quantize without importance weights (iq2_xxs, iq2_xs, iq1_s)."""
    return bool(lib.ggml_quantize_requires_imatrix(type_id(type, "ggml_quantize_requires_imatrix")))


def _iq2_grid_type(type, what: str) -> int:
    """The id of a type that has an IQ2 grid (iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m)."""
    t = type_id(type, what)
    if t not in _IQ2_TABLE_TYPES:
        raise GGMLError(f"{what}: {TYPE_NAMES[t]} has no IQ2 grid; types: iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m")
    return t


def iq2xs_init_impl(type: int | str) -> None:
    """Build the grid of one of the IQ2/IQ1 types (iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m)."""
    t = _iq2_grid_type(type, "iq2xs_init_impl")
    with _LOCK:
        lib.iq2xs_init_impl(t)


def iq2xs_free_impl(type: int | str) -> None:
    """Release the grid iq2xs_init_impl built for `type`."""
    t = _iq2_grid_type(type, "iq2xs_free_impl")
    with _LOCK:
        lib.iq2xs_free_impl(t)


def _grid_size(grid_size, what: str) -> int:
    if isinstance(grid_size, bool) or not isinstance(grid_size, (int, np.integer)) or int(grid_size) not in (256, 512):
        raise GGMLError(f"{what}: grid_size is 256 (iq3_xxs) or 512 (iq3_s), got {grid_size!r}")
    return int(grid_size)


def iq3xs_init_impl(grid_size: int) -> None:
    """Build the IQ3 grid of `grid_size` points: 256 for iq3_xxs, 512 for iq3_s."""
    g = _grid_size(grid_size, "iq3xs_init_impl")
    with _LOCK:
        lib.iq3xs_init_impl(g)


def iq3xs_free_impl(grid_size: int) -> None:
    """Release the IQ3 grid of `grid_size` points (256 or 512)."""
    g = _grid_size(grid_size, "iq3xs_free_impl")
    with _LOCK:
        lib.iq3xs_free_impl(g)


def ggml_validate_row_data(type: int | str, raw: bytes | bytearray | memoryview | ArrayLike) -> bool:
    """ggml's own check of encoded data: False when a block scale (or an f32/f16/bf16 value) is NaN or
    infinite. `raw` must be a whole number of blocks."""
    t = type_id(type, "ggml_validate_row_data")
    data = _raw(raw, "ggml_validate_row_data")
    tsize = int(lib.ggml_type_size(t))
    if data.size % tsize:
        raise GGMLError(f"ggml_validate_row_data: {data.size} bytes is not a whole number of "
                        f"{TYPE_NAMES[t]} blocks of {tsize} bytes")
    return bool(lib.ggml_validate_row_data(t, ffi.from_buffer(data), data.size))


def dequantize(type: int | str, raw: bytes | bytearray | memoryview | ArrayLike, n_elements: int | None = None,
               ) -> np.ndarray:
    """Any type's encoded data to float32 (quantized types through ggml's dequantizer; f16, bf16, f32
    by conversion)."""
    t = type_id(type, "dequantize")
    name = TYPE_NAMES[t]
    if f"dequantize_row_{name}" in _GENERATED:
        return _GENERATED[f"dequantize_row_{name}"](raw, n_elements)
    data = _raw(raw, "dequantize")
    if name == "f32":
        out = data.view(np.float32)
    elif name == "f16":
        out = data.view(np.float16).astype(np.float32)
    elif name == "bf16":
        out = (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        raise GGMLError(f"dequantize: no float conversion for {name}")
    if n_elements is not None and out.size != _count(n_elements, "dequantize: n_elements"):
        raise GGMLError(f"dequantize: {data.size} bytes of {name} are {out.size} values, not {n_elements}")
    return out.copy()


def quantize(type: int | str, src: ArrayLike, n_rows: int | None = None, n_per_row: int | None = None,
             imatrix: ArrayLike | None = None) -> np.ndarray:
    """Any type from float data (ggml_quantize_chunk; the shape is read from a 2-D array when the
    counts are omitted). Returns the encoded bytes."""
    return ggml_quantize_chunk(type, src, n_rows, n_per_row, imatrix)


__all__ = sorted(_GENERATED) + ["ggml_quantize_chunk", "ggml_quantize_init", "ggml_quantize_free",
                                "ggml_quantize_requires_imatrix", "iq2xs_init_impl", "iq2xs_free_impl",
                                "iq3xs_init_impl", "iq3xs_free_impl", "ggml_validate_row_data"]
