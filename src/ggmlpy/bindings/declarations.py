"""The C declarations ggmlpy binds, as a cffi FFI, parsed once per machine instead of at every import.

cffi reads C text with pycparser, which is slow: parsing cdef.h was a large part of every
`import ggmlpy` (docs/benchmarks.md). cffi's out-of-line ABI mode (`set_source(name, None)`,
then `compile()`) writes the parsed declarations as a small pure-Python module, a type table in
a bytes literal that `_cffi_backend` reads in a small fraction of that time. It needs no C compiler, so nothing
changes at install time: the module is made on first import, into ggmlpy's cache directory.

Invariants:
* The module's name holds a hash of the declarations and of cffi's version, so a changed cdef.h
  (a pin bump) or another cffi never meets a module made from something else.
* Every process uses the loaded module when it can (the first one too, right after writing it),
  so that one kind of FFI object serves ggmlpy everywhere; the freshly parsed FFI is used only
  when the cache cannot be written or read (a read-only home, say).
* Writing is atomic (a private folder, then a rename; py_compile renames too): processes that
  race to make the same module leave one whole file, never a torn one.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pathlib
import py_compile
import shutil
import tempfile

import _cffi_backend

from .._buildinfo import cache_dir

log = logging.getLogger("ggmlpy.bindings")

HERE = pathlib.Path(__file__).resolve().parent
# cdef.h is generated from ggml's headers (scripts/gen_cdef.py); custom_ops.h is written by hand.
HEADERS = ("cdef.h", "custom_ops.h")
MODULE_PREFIX = "ggmlpy_ffi_"


def declarations() -> str:
    """The C text ggmlpy's FFI is made from."""
    return "".join((HERE / h).read_text() for h in HEADERS)


def module_path(text: str) -> pathlib.Path:
    """Where the module made from `text` by this cffi lives."""
    key = hashlib.sha256(f"{_cffi_backend.__version__}\0{text}".encode()).hexdigest()[:16]
    return cache_dir() / "cffi" / f"{MODULE_PREFIX}{key}.py"


def load_ffi():
    """The FFI holding every declaration: from the cached module, made first if it is missing."""
    text = declarations()
    path = module_path(text)
    ffi = _load_module(path)
    if ffi is not None:
        return ffi
    parsed = parse(text)
    if _write_module(parsed, path):
        ffi = _load_module(path)
    return ffi if ffi is not None else parsed


def parse(text: str):
    """An FFI made by parsing `text` (what every import did before the cache)."""
    # cffi's Python half (and pycparser under it) is imported only on this path: the cached
    # module needs _cffi_backend alone.
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(text)
    return ffi


def _load_module(path: pathlib.Path):
    """The `ffi` of the module at `path`, or None when there is none or it does not load."""
    if not path.is_file():
        return None
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.ffi
    except Exception as e:  # noqa: BLE001 - any failure means: parse the declarations instead
        log.warning("ggmlpy.bindings: could not load the cached declarations %s (%s); parsing them", path, e)
        return None


def _write_module(parsed, path: pathlib.Path) -> bool:
    """Write the out-of-line module of `parsed` at `path`; False (and a log line) if that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=path.parent, prefix=".tmp-")
        try:
            parsed.set_source(path.stem, None)
            made = parsed.compile(tmpdir=tmp, verbose=False)
            os.replace(made, path)
            # Its byte code too, even where the interpreter writes none (PYTHONDONTWRITEBYTECODE):
            # compiling the 90 KB module would cost about as much as loading it.
            py_compile.compile(str(path), doraise=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return True
    except Exception as e:  # noqa: BLE001 - the parsed FFI works without the cache
        log.info("ggmlpy.bindings: cannot cache the parsed declarations at %s (%s)", path, e)
        return False
