"""cffi bindings over libggml: `ffi` (types) and `lib` (functions and enum constants).

ABI mode: no C compiler is needed at install time, and one wheel-free package
works with whichever libggml the loader finds. The price is a layout check at
load time (see loader.check) and a slightly higher per-call cost, measured in
the README.
"""
import pathlib

import cffi

from .loader import GGML_VERSION, GGMLLoadError

ffi = cffi.FFI()
ffi.cdef((pathlib.Path(__file__).with_name("cdef.h")).read_text())

from . import loader as _loader  # noqa: E402

lib, found = _loader.load(ffi)

__all__ = ["ffi", "lib", "found", "GGML_VERSION", "GGMLLoadError"]
