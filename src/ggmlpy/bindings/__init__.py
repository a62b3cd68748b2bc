"""cffi bindings over libggml: `ffi` (types) and `lib` (functions and enum constants).

ABI mode: no C compiler is needed at install time, and one wheel-free package
works with whichever libggml the loader finds. The price is a layout check at
load time (see loader.check) and a slightly higher per-call cost (docs/benchmarks.md,
"Bindings"). The declarations are parsed once and kept as cffi's out-of-line
module in the cache (see declarations.py), not parsed again at every import.
"""
from .._naming import public_function
from . import loader as _loader
from .declarations import load_ffi
from .loader import GGML_VERSION, GGMLLoadError

ffi = load_ffi()
lib, found = _loader.load(ffi)


def c_str(p) -> str:
    """A C string (char *) as str: "" for NULL, bytes that are not UTF-8 replaced."""
    return ffi.string(p).decode(errors="replace") if p != ffi.NULL else ""


def enum_constants(module: str, table: dict) -> dict:
    """ggml's enum constants as ggmlR's zero-argument functions: {name: (constant, doc)} -> {name: function},
    each function of `module`, returning the constant's value."""
    def getter(name: str, cname: str, doc: str):
        value = int(getattr(lib, cname))

        def get() -> int:
            return value
        return public_function(get, name, doc, module)
    return {name: getter(name, cname, doc) for name, (cname, doc) in table.items()}


__all__ = ["ffi", "lib", "found", "GGML_VERSION", "GGMLLoadError", "c_str", "enum_constants"]
