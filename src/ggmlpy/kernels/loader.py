"""Compiling and loading the kernels: each C source, for the best x86-64 level this CPU runs, taken
prebuilt from the installed package (ggmlpy/lib/kernels/<level>/, built with the wheel) or else built
once per machine with the system C compiler into ggmlpy's cache directory; loaded with cffi. `get()`
gives the loaded `Kernels` or None (neither prebuilt nor a compiler, a failed build, or turned off),
`host_library` a host library."""
from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import cffi

from .._buildinfo import (BLAS_LIBS, ISA_LEVELS, KERNEL_LINKS, cache_dir, cpu_tag, kernel_command,  # noqa: F401
                          kernel_digest, package_lib_dir, prebuilt_kernel)
from ..bindings import ffi, lib
from .nodes import Kernels

log = logging.getLogger("ggmlpy.kernels")
SOURCE = Path(__file__).with_name("kernels.c")
PREBUILT = package_lib_dir() / "kernels"  # empty outside a wheel's install: everything compiles at first use

_lock = threading.Lock()
_state: dict = {}  # "kernels": the loaded Kernels or None, once tried
_enabled = [os.environ.get("GGMLPY_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")]


def loaded() -> Kernels | None:
    """The kernels if get() has loaded them, without loading them."""
    return _state.get("kernels")


def enabled() -> bool:
    """Whether graphs built from now on may use the kernels (GGMLPY_KERNELS, set_enabled)."""
    return _enabled[0]


def set_enabled(on: bool) -> bool:
    """Use the kernels in graphs built from now on (or not); returns the previous setting.
    Graphs already built and cached keep what they were built with."""
    prev, _enabled[0] = _enabled[0], bool(on)
    return prev


def get() -> Kernels | None:
    """The kernels, compiled and loaded on the first call; None where they cannot be (the
    reason is logged once) or are disabled."""
    if not _enabled[0]:
        return None
    try:
        return _state["kernels"]
    except KeyError:
        pass
    with _lock:
        if "kernels" not in _state:
            _state["kernels"] = _load()
        return _state["kernels"]


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _load() -> Kernels | None:
    level = isa_level()  # a wrong $GGMLPY_KERNELS_ISA is the caller's error, not a reason to run without kernels
    cc = _compiler()
    if cc is None and _prebuilt(SOURCE, level) is None:
        log.info("ggmlpy.kernels: no C compiler (cc, gcc, clang or $CC) found and no prebuilt kernels for %s "
                 "in %s; using ggml's own ops", level, PREBUILT)
        return None
    try:
        path = _library(cc, SOURCE)
        gemm_lib = _load_optional(cc, "gemm")
        return Kernels(ffi.dlopen(str(path)), path, gemm_lib, _load_optional(cc, "conv") if gemm_lib is not None else None,
                       _load_optional(cc, "rows"), _load_optional(cc, "rnn"), _load_optional(cc, "attention"),
                       _load_optional(cc, "conv_transpose"))
    except Exception as e:  # noqa: BLE001 - any failure means: use ggml's ops
        log.warning("ggmlpy.kernels: could not build or load %s (%s); using ggml's own ops", SOURCE.name, e)
        return None


def _gemm_check(so) -> str | None:
    # gemm.c's threads each call OpenBLAS: its OpenMP build (or the sequential one) then runs on
    # the calling thread alone; a pthreads build would start its own threads inside each of ggml's
    return None if so.ggmlpy_blas_parallel() in (0, 2) else "OpenBLAS is its pthreads build"


# The libraries beside kernels.c: source, what it links, a check of the loaded library (a
# reason it cannot be used, or None), and what stays ggml's without it. conv.c links the
# OpenBLAS that gemm.c checked, so it loads only after gemm.c did.
OPTIONAL = {
    "gemm": ("gemm.c", KERNEL_LINKS["gemm.c"], _gemm_check, "products stay ggml's"),
    "conv": ("conv.c", KERNEL_LINKS["conv.c"],
             lambda so: None if so.ggmlpy_conv_params_count() == 11 else "its parameter layout does not match",
             "convolutions stay ggml's"),
    "rows": ("rows.c", KERNEL_LINKS["rows.c"], lambda so: None, "layer norms stay ggml's"),
    "rnn": ("rnn.c", KERNEL_LINKS["rnn.c"], lambda so: None, "LSTM cells stay ggml's ops"),
    "attention": ("attention.c", KERNEL_LINKS["attention.c"], lambda so: None, "attention stays two products and ggml's softmax"),
    "conv_transpose": ("conv_transpose.c", KERNEL_LINKS["conv_transpose.c"], lambda so: None,
                       "ConvTranspose is a convolution of the zero-dilated input"),
}


def _load_optional(cc: str, name: str):
    """One of OPTIONAL's libraries, or None (the reason logged)."""
    source, links, check, without = OPTIONAL[name]
    try:
        lib.ggml_custom_4d  # noqa: B018 - their ops are ggml_custom_4d's; older libggml builds lack it
        so = ffi.dlopen(str(_library(cc, Path(__file__).with_name(source), links)))
        why = check(so)
    except Exception as e:  # noqa: BLE001 - any failure means: ggml's ops
        why = str(e)
    if why:
        log.info("ggmlpy.kernels: no %s (%s); %s", source, why, without)
        return None
    return so


def host_library(source: str, declarations: str):
    """(ffi, lib) of a host library beside these sources: C functions that Python calls on numpy's
    buffers (not ggml ops), declared by `declarations` in an FFI of their own; built and loaded
    on the first call, None where that fails (the reason logged once) or the kernels are off
    (GGMLPY_KERNELS=0, set_enabled(False)): the caller then computes without them."""
    if not _enabled[0]:
        return None
    key = f"host:{source}"
    with _lock:
        if key not in _state:
            _state[key] = _load_host(source, declarations)
        return _state[key]


def _load_host(source: str, declarations: str):
    cc, path = _compiler(), Path(__file__).with_name(source)
    if cc is None and _prebuilt(path, isa_level()) is None:
        log.info("ggmlpy.kernels: no C compiler (cc, gcc, clang or $CC) found and no prebuilt %s; it is not built",
                 source)
        return None
    try:
        host_ffi = cffi.FFI()  # the bindings' FFI holds ggml's declarations, this one the library's
        host_ffi.cdef(declarations)
        return host_ffi, host_ffi.dlopen(str(_library(cc, path, KERNEL_LINKS[source])))
    except Exception as e:  # noqa: BLE001 - any failure means: the caller's own path
        log.warning("ggmlpy.kernels: could not build or load %s (%s)", source, e)
        return None


@functools.lru_cache(maxsize=None)
def _compiler_version(cc: str) -> str:
    """`cc --version` (part of the cache key), asked once per compiler, not once per library."""
    return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout


def _cpu_flags() -> set:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "flags":
                return set(val.split())
    except OSError:
        pass
    return set()


def supported_isa_levels() -> list:
    """The ISA_LEVELS this CPU runs, lowest first (none off x86-64)."""
    have, names = _cpu_flags(), list(ISA_LEVELS)
    return [name for i, name in enumerate(names)
            if set().union(*(ISA_LEVELS[n] for n in names[:i + 1])) <= have]


def isa_level() -> str:
    """The target the kernels are built for: $GGMLPY_KERNELS_ISA (an ISA_LEVELS name, or "native" for
    -march=native), by default the best level this CPU runs (supported_isa_levels()[-1]; "native" off
    x86-64). A level this CPU lacks is an error, not an illegal instruction later."""
    level = os.environ.get("GGMLPY_KERNELS_ISA", "").strip()
    if not level:
        levels = supported_isa_levels()
        return levels[-1] if levels else "native"
    if level == "native":
        return level
    if level not in ISA_LEVELS:
        raise ValueError(f"GGMLPY_KERNELS_ISA={level!r}: expected 'native' or one of {', '.join(ISA_LEVELS)}")
    if level not in supported_isa_levels():
        raise ValueError(f"GGMLPY_KERNELS_ISA={level}: this CPU does not run it (it runs "
                         f"{', '.join(supported_isa_levels()) or 'none of them'})")
    return level


# the vector paths each level's build takes (vmath.h: VW 16, VW 8, none). Without vector paths (below
# x86-64-v3, and on other architectures such as aarch64, which have no NEON paths) conv.c has no packed
# products nor pixel-major convolutions: Kernels falls back to OpenBLAS's products for those layers
SCALAR_PATHS = "scalar paths (no vector kernels: convolutions and linear layers use OpenBLAS's products)"
ISA_PATHS = {"x86-64-v2": SCALAR_PATHS, "x86-64-v3": "AVX2 paths", "x86-64-v4": "AVX-512 paths"}


def origin() -> str:
    """Where the kernels of this level come from: the package's prebuilt ones, or the compiler at
    first use (cached)."""
    level = isa_level()
    if _prebuilt(SOURCE, level) is not None:
        return f"prebuilt ({PREBUILT / level})"
    return f"compiled at first use into {cache_dir() / 'kernels'}"


def isa_summary() -> str:
    """One line for info() and the benchmarks: the level the kernels are built for, why, and the
    vector paths that build takes."""
    level, env = isa_level(), os.environ.get("GGMLPY_KERNELS_ISA", "").strip()
    why = f"GGMLPY_KERNELS_ISA={env}" if env else (
        "the best level this CPU runs; GGMLPY_KERNELS_ISA=native builds for this CPU alone" if level != "native"
        else "no x86-64 level applies to this CPU")
    if level == "native":
        flags = _cpu_flags()
        paths = ("AVX-512 paths" if "avx512f" in flags else "AVX2 paths" if {"avx2", "fma"} <= flags
                 else SCALAR_PATHS)
    else:
        paths = ISA_PATHS[level]
    return f"{level} ({why}): {paths}"


def _prebuilt(source: Path, level: str) -> Path | None:
    """The package's library of `source` for `level`, if the wheel's build made one from these very
    sources (never for "native": that is this CPU's own build)."""
    if level == "native":
        return None
    path = prebuilt_kernel(source, level, PREBUILT)
    return path if path.exists() else None


def _library(cc: str | None, source: Path, libs: tuple = ()) -> Path:
    """The library of `source` for this CPU's level: the package's prebuilt one, else compiled."""
    path = _prebuilt(source, isa_level())
    if path is not None:
        return path
    if cc is None:
        raise RuntimeError(f"no C compiler (cc, gcc, clang or $CC) to build {source.name}, and no prebuilt one")
    return _build(cc, source, libs)


def _build(cc: str, source: Path, libs: tuple = ()) -> Path:
    """The compiled library in the cache, built (atomically) unless it is there already."""
    version = _compiler_version(cc)
    level = isa_level()
    # a level's code runs on every CPU of that level; tuned for this one it is the native build's
    # instruction for instruction where this CPU's best level is that level (checked with gcc on Zen 5)
    tune = () if level == "native" else ("-mtune=native",)
    key = kernel_digest(source, level, (cc, version, *tune, *libs, cpu_tag(native=level == "native")))
    out_dir = cache_dir() / "kernels"
    path = out_dir / f"{source.stem}-{key}.so"
    if path.exists():
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"tmp-{path.stem}-", suffix=".so", dir=out_dir)  # named: whose it is
    os.close(fd)
    try:
        r = subprocess.run(kernel_command(cc, source, level, tmp, libs, tune), capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"{Path(cc).name} failed: {r.stderr.strip()[-500:]}")
        os.replace(tmp, path)  # another process may have raced us to the same file: same bytes
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
