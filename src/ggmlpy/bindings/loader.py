"""Find libggml, load it with cffi (ABI mode), and refuse a library that is not the pin.

Search order (first hit wins):
  1. the package's own lib/ (ggmlpy/lib: what `pip install` of the project, CMakeLists.txt, puts there).
     An installed package and its libraries are one build (the bindings' struct layout, the kernels'
     digests), so a $GGMLPY_LIB_DIR left set in the shell does not mix another in: it is warned about;
  2. the folder named by $GGMLPY_LIB_DIR (a source checkout, which has no lib/ of its own);
  3. the build made by build_ggml.py, as its cache records it (<cache>/active.json; the cache is
     $GGMLPY_CACHE_DIR, else $XDG_CACHE_HOME/ggmlpy, else ~/.cache/ggmlpy);
  4. the build made by build_ggml.py run in this virtual environment, as the environment records
     it (<venv>/share/ggmlpy/active.json): found whatever the cache variables of this shell;
  5. the libraries bundled with an installed llama-cpp-python (llama_cpp/lib).
When none holds a usable libggml, the error says what each place held.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._buildinfo import (GGML_VERSION, LLAMA_CPP_PYTHON_VERSION, TENSOR_OFFSETS, TENSOR_SIZE, cache_dir,  # noqa: F401
                          cpu_tag, environment_record, package_lib_dir)

if TYPE_CHECKING:  # the FFI is cffi's parsed one or its out-of-line module's (declarations.py)
    from cffi import FFI

FIX_HINT = ("pip install .   (from ggmlpy's source: builds libggml into the package; in a development checkout, "
            "python build_ggml.py; or: pip install llama-cpp-python==" + LLAMA_CPP_PYTHON_VERSION + ")")


class GGMLLoadError(ImportError):
    """libggml is missing, or is not the version ggmlpy is pinned to."""


@dataclass
class Found:
    lib_dir: pathlib.Path
    source: str  # "GGMLPY_LIB_DIR", "package", "build_ggml.py" or "llama-cpp-python"
    bin_dir: pathlib.Path | None = None


def _has_libggml(d: pathlib.Path) -> bool:
    return (d / "libggml.so").exists() or (d / "libggml.dylib").exists()


def _from_record(active: pathlib.Path, source: str) -> Found | str:
    """The build a build_ggml.py record names, or why it cannot be used."""
    if not active.exists():
        return f"{active}: no such file"
    try:
        info = json.loads(active.read_text())
    except (OSError, ValueError) as e:
        return f"{active}: unreadable ({e})"
    lib_dir = pathlib.Path(info.get("lib_dir", ""))
    if info.get("native", True) and info.get("cpu") not in (None, cpu_tag(native=True)):
        # a native build from another CPU could hit illegal instructions
        return f"{active}: a build for another CPU ({info.get('cpu')}; this one is {cpu_tag(native=True)})"
    if not _has_libggml(lib_dir):
        return f"{active}: names {lib_dir}, which holds no libggml"
    bin_dir = info.get("bin_dir")
    return Found(lib_dir, source, pathlib.Path(bin_dir) if bin_dir else None)


def _from_package() -> Found | str:
    d = package_lib_dir()
    if _has_libggml(d):
        return Found(d, "package", d)  # rpc-server sits beside the backend modules it loads from its own folder
    return f"{d}: no libggml (not an installed build: a source checkout)" if not d.exists() else f"{d}: no libggml"


def _from_build_cache() -> Found | str:
    return _from_record(cache_dir() / "active.json", "build_ggml.py")


def _from_environment() -> Found | str:
    return _from_record(environment_record(), "build_ggml.py (this environment's record)")


def _from_llama_cpp() -> Found | str:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    for loc in spec.submodule_search_locations:
        d = pathlib.Path(loc) / "lib"
        if _has_libggml(d):
            return Found(d, "llama-cpp-python")
    return f"installed, but {', '.join(spec.submodule_search_locations)} has no lib/libggml"


def find() -> Found:
    package = _from_package()
    env = os.environ.get("GGMLPY_LIB_DIR")
    if isinstance(package, Found):
        if env and pathlib.Path(env).resolve() != package.lib_dir.resolve():
            warnings.warn(f"GGMLPY_LIB_DIR={env} is not used: this installed ggmlpy loads the libraries built with it "
                          f"({package.lib_dir}); a source checkout (its src/ on PYTHONPATH) loads other builds",
                          RuntimeWarning, stacklevel=2)
        return package
    if env:
        d = pathlib.Path(env)
        if not _has_libggml(d):
            raise GGMLLoadError(f"GGMLPY_LIB_DIR={env} holds no libggml.so")
        return Found(d, "GGMLPY_LIB_DIR")
    places = (("build_ggml.py's cache record ($GGMLPY_CACHE_DIR, else $XDG_CACHE_HOME/ggmlpy, else "
               "~/.cache/ggmlpy, then active.json)", _from_build_cache),
              ("this Python environment's record (build_ggml.py run with this environment's python)",
               _from_environment),
              (f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}'s bundled libraries", _from_llama_cpp))
    searched = [f"the package's own lib/: {package}", "$GGMLPY_LIB_DIR: not set"]
    for what, probe in places:
        hit = probe()
        if isinstance(hit, Found):
            return hit
        searched.append(f"{what}: {hit}")
    raise GGMLLoadError(
        f"ggmlpy could not find libggml {GGML_VERSION}. Searched, in order:\n"
        + "".join(f"  {i}. {line}\n" for i, line in enumerate(searched, 1))
        + "A build made in a shell with other cache variables is found again by setting them as they were "
          "(GGMLPY_CACHE_DIR, XDG_CACHE_HOME), or with GGMLPY_LIB_DIR=<the build>/install/lib. Otherwise build "
          "it (about 30 s for the CPU, 5-6 minutes with Vulkan) with:\n    " + FIX_HINT)


# The calls that take a registry or a device out of ggml's registry: nothing else reaches one without
# a handle that came from them (or from a backend module's own functions).
REGISTRY_ENTRIES = ("ggml_backend_reg_count", "ggml_backend_reg_get", "ggml_backend_reg_by_name",
                    "ggml_backend_dev_count", "ggml_backend_dev_get", "ggml_backend_dev_by_name",
                    "ggml_backend_dev_by_type", "ggml_backend_init_by_name", "ggml_backend_init_by_type",
                    "ggml_backend_init_best", "ggml_backend_load", "ggml_backend_load_all",
                    "ggml_backend_load_all_from_path")


class Lib:
    """Symbols looked up across libggml and its companions, cached as attributes after first use.

    A GGML_BACKEND_DL build (a wheel's, build_ggml.py --portable; `dl_build`) keeps each backend in a
    module ggml's registry loads at run time, the CPU backend's own functions too
    (ggml_backend_cpu_init, ggml_graph_compute, ...), and its registry is empty until then. Not at
    import: ggml-vulkan reads GGML_VK_VISIBLE_DEVICES when it registers, and enable_software_vulkan()
    sets it after import. The loader core/registry.py gives `load_modules_first` runs before the first
    REGISTRY_ENTRIES call and before a name found nowhere else is looked for in the loaded modules."""

    def __init__(self, ffi, handles, lib_dir):
        self._ffi, self._handles, self._lib_dir = ffi, handles, lib_dir
        self._modules: dict = {}  # path of a module ggml loaded -> our handle on it
        self._load = None
        self._raw_entries: dict = {}  # REGISTRY_ENTRIES' own functions, while load_modules_first wraps them
        self._loading = threading.local()  # set while this thread runs the loader (its own registry calls pass)
        # A declared symbol a library lacks: AttributeError from a parsed FFI's library,
        # ffi.error from an out-of-line one's.
        self._missing = (AttributeError, getattr(ffi, "error", AttributeError))
        self.dl_build = self._find("ggml_backend_cpu_reg", handles) is None

    def resolve_declared(self) -> None:
        """Look every declared symbol up now. cffi looks a symbol up under a non-reentrant lock,
        so a finalizer (__del__ freeing a buffer) that needed its first look-up while another
        was in progress hung the process. Symbols of modules ggml loads later (portable
        builds, backend modules) stay lazy."""
        for name in dir(self._handles[0]):
            fn = self._find(name, self._handles)
            if fn is not None:
                setattr(self, name, fn)

    def __getattr__(self, name):
        fn = self._find(name, self._handles)
        if fn is None and self.dl_build:
            fn = self._find(name, self._modules.values())
            if fn is None:
                self._load_modules()
                self._open_loaded_modules()
                fn = self._find(name, self._modules.values())
        if fn is None:
            raise AttributeError(f"libggml has no symbol {name!r}")
        setattr(self, name, fn)
        return fn

    def load_modules_first(self, load) -> None:
        """In a GGML_BACKEND_DL build, run `load` (it loads the modules, once) before the registry is used."""
        if not self.dl_build:
            return
        self._load = load
        raw = {name: getattr(self, name) for name in REGISTRY_ENTRIES}

        def loaded_first(fn):
            def call(*args):
                self._load_modules()
                return fn(*args)
            return call
        for name, fn in raw.items():
            setattr(self, name, loaded_first(fn))
        self._raw_entries = raw

    def _load_modules(self) -> None:
        if self._load is None or getattr(self._loading, "on", False):
            return
        self._loading.on = True
        try:
            self._load()  # another thread's first call waits in it for this one's
        finally:
            self._loading.on = False
        for name, fn in self._raw_entries.items():  # loaded: straight calls from now on
            setattr(self, name, fn)

    def _find(self, name, handles):
        for h in handles:
            try:
                return getattr(h, name)
            except self._missing:
                continue
        return None

    def _open_loaded_modules(self) -> None:
        """Handles on the modules of lib_dir that ggml has loaded since the last look (none before the
        registry has)."""
        try:
            maps = pathlib.Path("/proc/self/maps").read_text()
        except OSError:
            return
        here = pathlib.Path(self._lib_dir).resolve()
        paths = {line.split(None, 5)[-1] for line in maps.splitlines() if "libggml-" in line}
        for p in sorted(paths - set(self._modules)):
            if pathlib.Path(p).parent == here:
                self._modules[p] = self._ffi.dlopen(p, self._ffi.RTLD_NOW | self._ffi.RTLD_NOLOAD)


def keep_cuda_products_f32() -> None:
    """ggml's CUDA backend asks cuBLAS for TF32 (a 10-bit mantissa) in f32 products, which costs
    ~1e-3 relative error: finite-difference checks and ggmlR parity fail on it. Like PyTorch's
    default, keep them f32, through cuBLAS's own switch, read when cuBLAS starts, unless the
    user chose (NVIDIA_TF32_OVERRIDE set, or GGMLPY_CUDA_TF32=1 for the speed)."""
    if os.environ.get("GGMLPY_CUDA_TF32") != "1":
        os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")


def load(ffi: FFI) -> tuple[Lib, Found]:
    keep_cuda_products_f32()
    found = find()
    d = found.lib_dir
    # Local: ggml's symbols, and those of its dependencies (libgomp above all), stay out of
    # the process's global scope. Global, a library loaded later (PyTorch, with its own
    # OpenMP runtime) bound some symbols to ggml's libgomp: free() aborted on an H200 machine.
    flags = ffi.RTLD_NOW | ffi.RTLD_LOCAL
    handles = []
    # Dependencies first, so each one resolves against the copy we chose. libgomp (OpenBLAS's
    # OpenMP build, loaded with the BLAS backend) keeps its own spin policy: it is the process's,
    # and PyTorch binds to the same libgomp.so.1 when it is imported after ggmlpy (ggml's own
    # threads are its thread pool, and neither a compiled training step nor an ONNX model moved
    # with the setting: docs/benchmarks.md, "Threads").
    for name in ("libggml-base.so", "libggml-cpu.so", "libggml.so"):
        p = d / name
        if p.exists():
            handles.append(ffi.dlopen(str(p), flags))
    lib = Lib(ffi, handles[::-1], d)
    check(ffi, lib, found)
    lib.resolve_declared()
    return lib, found


def check(ffi: FFI, lib: Lib, found: Found) -> None:
    version = ffi.string(lib.ggml_version()).decode()
    if version != GGML_VERSION:
        raise GGMLLoadError(
            f"libggml at {found.lib_dir} (from {found.source}) is version {version}, "
            f"but ggmlpy is pinned to ggml {GGML_VERSION}. Fix it with:\n    {FIX_HINT}\n"
            "or point GGMLPY_LIB_DIR at a ggml " + GGML_VERSION + " build.")
    problem = _layout_problem(ffi, lib)
    if problem:
        raise GGMLLoadError(f"struct ggml_tensor in {found.lib_dir} does not match ggmlpy's bindings: "
                            f"{problem}. Regenerate them with scripts/gen_cdef.py.")


def _layout_problem(ffi: FFI, lib: Lib) -> str | None:
    """Ask the library to fill a tensor, then read it back through our struct definition."""
    if ffi.sizeof("struct ggml_tensor") != TENSOR_SIZE:
        return f"cdef size {ffi.sizeof('struct ggml_tensor')} != {TENSOR_SIZE}"
    for field, off in TENSOR_OFFSETS.items():
        if ffi.offsetof("struct ggml_tensor", field) != off:
            return f"field {field} not at offset {off}"
    # ggml_tensor_overhead() = sizeof(ggml_object) (32) + the library's sizeof(ggml_tensor).
    if int(lib.ggml_tensor_overhead()) != 32 + TENSOR_SIZE:
        return f"library tensor overhead {int(lib.ggml_tensor_overhead())} != {32 + TENSOR_SIZE}"
    params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 16, "mem_buffer": ffi.NULL, "no_alloc": False})
    ctx = lib.ggml_init(params[0])
    try:
        t = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, 2, 3, 5, 7)
        lib.ggml_set_name(t, b"probe")
        u = lib.ggml_add(ctx, t, t)
        checks = {
            "ne": list(t.ne) == [2, 3, 5, 7],
            "nb": list(t.nb) == [4, 8, 24, 120],
            "data": t.data == lib.ggml_get_data(t),
            "name": ffi.string(t.name) == b"probe",
            "op": u.op == lib.GGML_OP_ADD and t.op == lib.GGML_OP_NONE,
            "src": u.src[0] == t and u.src[1] == t,
        }
    finally:
        lib.ggml_free(ctx)
    bad = [k for k, ok in checks.items() if not ok]
    return f"fields {bad} read back wrong" if bad else None
