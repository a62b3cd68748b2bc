"""The pin, the build cache's naming and the recipe of ggmlpy's own kernels, shared by build_ggml.py,
the wheel's CMake build (CMakeLists.txt, through build_ggml.py) and the runtime loaders.

Standard library only, and free of package imports: build_ggml.py loads this
file by path before any libggml exists.
"""
from __future__ import annotations

import hashlib
import os
import platform
import sys
from pathlib import Path

GGML_VERSION = "0.25.3"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

# Layout facts of the pinned ggml the bindings rely on (ABI mode writes these fields directly) and the
# kernels are compiled with (-DOFF_NE=16, ...).
TENSOR_SIZE = 336
TENSOR_OFFSETS = {"ne": 16, "nb": 48, "op": 80, "src": 152, "data": 248, "name": 256}

# The x86-64 levels the kernels can be built for, each with the CPU flags (as /proc/cpuinfo spells
# them) it needs beyond the level below: one source, its vector paths chosen by the compiler's
# target (`#ifdef __AVX512F__`, `__AVX2__`). "native" is -march=native, for this CPU alone.
ISA_LEVELS = {
    "x86-64-v2": {"cx16", "popcnt", "sse4_1", "sse4_2", "ssse3"},
    "x86-64-v3": {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"},
    "x86-64-v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}
KERNEL_FLAGS = ("-O3", "-fPIC", "-shared", "-fno-math-errno",
                *(f"-DOFF_{k.upper()}={TENSOR_OFFSETS[k]}" for k in ("ne", "nb", "src", "data")))
# kernels.c's element-wise loops compute both sides of a select (GELU's derivatives, max/min with NaN):
# gcc if-converts them into vector selects only where no trap may be raised on the side not taken,
# which AVX-512's masked operations give it and AVX2 does not; no kernel reads the FP exception flags
SOURCE_FLAGS = {"kernels.c": ("-fno-trapping-math",)}
BLAS_LIBS = ("-l:libopenblas.so.0",)  # the library ggml's BLAS backend loads (Debian's alternatives)
# Every kernel source (ggmlpy/kernels/) and what it links
KERNEL_LINKS = {"kernels.c": (), "gemm.c": BLAS_LIBS, "conv.c": BLAS_LIBS, "rows.c": (), "rnn.c": ("-lm",),
                "attention.c": ("-lm",), "singlecell.c": ("-lm",),
                "conv_transpose.c": ()}


def kernel_flags(source_name: str, level: str) -> list[str]:
    """The compiler flags of one kernel source for one level ("native": -march=native)."""
    return [*KERNEL_FLAGS, *SOURCE_FLAGS.get(source_name, ()), f"-march={level}"]


def kernel_command(cc: str, source: Path, level: str, out: str, libs: tuple = (), tune: tuple = ()) -> list[str]:
    """The compiler command line of a kernel library: one for the run-time cache (kernels/loader.py, which
    adds -mtune=native) and the wheel's prebuilt ones (build_ggml.py --compile-kernel)."""
    return [cc, *kernel_flags(source.name, level), *tune, "-o", out, str(source), *libs]


def kernel_digest(source: Path, level: str, extra: tuple = ()) -> str:
    """What a compiled kernel library depends on in this tree: its source, the headers beside it
    (what the sources include), its flags and links, and `extra` (the run-time cache adds the
    compiler and the CPU)."""
    headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]
    parts = [source.read_text(), *headers, *kernel_flags(source.name, level), *KERNEL_LINKS[source.name], *extra]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def package_lib_dir() -> Path:
    """ggmlpy/lib: where a wheel (pip install, CMakeLists.txt) puts libggml, its backend modules
    and the prebuilt kernels (lib/kernels/<level>/)."""
    return Path(__file__).resolve().with_name("lib")


def prebuilt_kernel(source: Path, level: str, root: Path | None = None) -> Path:
    """Where the wheel's build puts `source` compiled for `level` (under root, by default
    package_lib_dir()/kernels): named by kernel_digest, so sources edited after the build are
    never served by a stale library."""
    root = package_lib_dir() / "kernels" if root is None else root
    return root / level / f"{source.stem}-{kernel_digest(source, level)}.so"


def cache_dir() -> Path:
    """$GGMLPY_CACHE_DIR, else $XDG_CACHE_HOME/ggmlpy, else ~/.cache/ggmlpy."""
    if os.environ.get("GGMLPY_CACHE_DIR"):
        return Path(os.environ["GGMLPY_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ggmlpy"


def environment_record() -> Path:
    """Where build_ggml.py also records its build when it runs in a virtual environment: inside
    that environment, so a shell without the build's cache variables still finds the build."""
    return Path(sys.prefix) / "share" / "ggmlpy" / "active.json"


def in_virtual_environment() -> bool:
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)


def cpu_tag(native: bool) -> str:
    """Arch for portable builds; arch + sha1 of the CPU feature flags for native ones,
    so a native build is never reused on a CPU that may lack its instructions."""
    arch = platform.machine() or "unknown"
    if not native:
        return arch
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() in ("flags", "Features"):  # x86 / arm spelling
                flags = " ".join(sorted(val.split()))
                break
    except OSError:
        pass
    flags = flags or platform.processor()
    return f"{arch}-{hashlib.sha1(f'{arch}:{flags}'.encode()).hexdigest()[:10]}"
