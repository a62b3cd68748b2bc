"""cffi bindings over libggml: `ffi` (types) and `lib` (functions and enum constants).

ABI mode: no C compiler is needed at install time, and one wheel-free package
works with whichever libggml the loader finds. The price is a layout check at
load time (see loader.check) and a slightly higher per-call cost (docs/benchmarks.md,
"Bindings"). The declarations are parsed once and kept as cffi's out-of-line
module in the cache (see declarations.py), not parsed again at every import.
"""
from . import loader as _loader
from .declarations import load_ffi
from .loader import GGML_VERSION, GGMLLoadError

ffi = load_ffi()
lib, found = _loader.load(ffi)

__all__ = ["ffi", "lib", "found", "GGML_VERSION", "GGMLLoadError"]
