#!/usr/bin/env python3
"""Build the shared libraries of ggml 0.25.3 for ggmlpy, cached outside the git tree.

The source is the ggml subtree of the llama-cpp-python 0.3.36 sdist (sha256-pinned),
unpacked into vendor/ggml/. Builds go to <cache>/builds/<key>/ and the last one used
is recorded in <cache>/active.json for the runtime loader.

Usage:
    python build_ggml.py                      # CPU backend, tuned for this CPU
    python build_ggml.py --backend vulkan     # CPU + Vulkan (fetches new Vulkan headers if needed)
    python build_ggml.py --backend cuda --cuda-arch "80;90"
    python build_ggml.py --backend rpc        # CPU + RPC client backend + bin/rpc-server
    python build_ggml.py --portable           # CPU variants chosen at run time (libggml-cpu-*.so)
    LIB=$(python build_ggml.py --print-lib-dir)   # logs go to stderr, stdout is the lib dir
    python build_ggml.py --force --jobs 2     # rebuild even if cached

The key-related helpers cache_dir(), cpu_tag() and build_key() are pure and importable.
"""
from __future__ import annotations

import argparse, collections, glob, hashlib, json, os, platform, re, shutil
import subprocess, sys, tarfile, time
from pathlib import Path

GGML_VERSION = "0.25.3"
SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
SDIST_PIN = "llama-cpp-python==0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
GGML_PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/"
# rpc-server is a llama.cpp tool, not part of the ggml subtree: we take this one file.
RPC_SERVER_SRC = "llama_cpp_python-0.3.36/vendor/llama.cpp/tools/rpc/rpc-server.cpp"
REPO = Path(__file__).resolve().parent
VENDOR = REPO / "vendor" / "ggml"
BACKENDS = ("cpu", "cuda", "rpc", "vulkan")
MIN_VK_HEADER = 287  # ggml-vulkan needs vk::LayerSettingEXT (not in 1.3.239); extras gated at 287
PC_IN = """\
prefix=@CMAKE_INSTALL_PREFIX@
exec_prefix=${prefix}
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@

Name: ggml
Description: The GGML Tensor Library for Machine Learning
Version: @GGML_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} -lggml -lggml-base
"""
LOG = sys.stdout  # switched to stderr by --print-lib-dir so stdout stays parseable


class BuildError(Exception):
    """Fatal, user-facing failure; exit code attached."""
    def __init__(self, msg: str, code: int = 1):
        super().__init__(msg)
        self.code = code


def log(msg: str) -> None:
    print(f"[build_ggml] {msg}", file=LOG, flush=True)


# ---- pure helpers (importable, no side effects) ---------------------------------

def cache_dir() -> Path:
    if os.environ.get("GGMLPY_CACHE_DIR"):
        return Path(os.environ["GGMLPY_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ggmlpy"


def cpu_tag(native: bool) -> str:
    """Arch for portable builds; arch + sha1 of CPU feature flags for native ones."""
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


def build_key(backends, native: bool) -> str:
    names = "+".join(sorted(set(backends) | {"cpu"}))
    return f"ggml-{GGML_VERSION}-{names}-{'native' if native else 'portable'}-{cpu_tag(native)}"


# ---- source ----------------------------------------------------------------------

def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_sdist(cache: Path) -> Path:
    sdist = cache / "sdist" / SDIST_NAME
    if not sdist.exists():
        log(f"downloading {SDIST_PIN} sdist (76 MB) ...")
        run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             SDIST_PIN, "-d", str(sdist.parent)])
    got = sha256(sdist)
    if got != SDIST_SHA256:
        raise BuildError(f"sha256 mismatch for {sdist}:\n  expected {SDIST_SHA256}\n  got      {got}\n"
                         "delete the file and rerun to download it again")
    return sdist


def unpack(sdist: Path) -> None:
    stamp = VENDOR / f".unpacked-{SDIST_SHA256[:12]}"
    if stamp.exists():
        return
    log(f"unpacking ggml source into {VENDOR}")
    VENDOR.mkdir(parents=True, exist_ok=True)
    for p in VENDOR.iterdir():  # README.md is tracked by git; everything else is ours
        if p.name != "README.md":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()

    def members(tar):
        for m in tar:
            if m.name.startswith(GGML_PREFIX) and m.name != GGML_PREFIX:
                yield m.replace(name=m.name[len(GGML_PREFIX):], deep=False)
            elif m.name == RPC_SERVER_SRC:
                yield m.replace(name="tools/rpc-server.cpp", deep=False)

    with tarfile.open(sdist) as tar:
        tar.extractall(VENDOR, members=members(tar), filter="data")
    if not (VENDOR / "CMakeLists.txt").exists():
        raise BuildError(f"{GGML_PREFIX} not found in {sdist}")
    # The subtree's CMakeLists configures ggml.pc.in, which the sdist does not ship.
    (VENDOR / "ggml.pc.in").write_text(PC_IN)
    stamp.touch()


# ---- preflight and Vulkan headers ------------------------------------------------

def vk_header_version(include_dir: Path) -> int:
    try:
        m = re.search(r"#define VK_HEADER_VERSION (\d+)", (include_dir / "vulkan/vulkan_core.h").read_text())
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def preflight(backends: set[str]) -> None:
    missing = []
    if not shutil.which("cmake"):
        missing.append("cmake (apt-get install cmake)")
    if not (shutil.which("cc") or shutil.which("gcc")) or not (shutil.which("c++") or shutil.which("g++")):
        missing.append("a C/C++ compiler (apt-get install build-essential)")
    if "vulkan" in backends:
        if not shutil.which("glslc"):
            missing.append("glslc (apt-get install glslc)")
        if not glob.glob("/usr/lib/*/libvulkan.so") + glob.glob("/usr/lib/libvulkan.so"):
            missing.append("the Vulkan loader library and headers (apt-get install libvulkan-dev)")
        if not glob.glob("/usr/share/cmake*/SPIRV-Headers") + glob.glob("/usr/lib/*/cmake/SPIRV-Headers"):
            missing.append("SPIRV-Headers (apt-get install spirv-headers)")
        if vk_header_version(Path("/usr/include")) < MIN_VK_HEADER and not (shutil.which("apt-get") and shutil.which("dpkg")):
            missing.append(f"Vulkan headers >= 1.3.{MIN_VK_HEADER} (apt-get/dpkg to fetch them)")
    if "cuda" in backends and not shutil.which("nvcc"):
        missing.append("nvcc (install the CUDA toolkit, e.g. apt-get install nvidia-cuda-toolkit)")
    if missing:
        raise BuildError("missing build tools: " + "; ".join(missing), code=2)


def vulkan_include_dir(cache: Path) -> Path | None:
    """Debian 12's headers are too old for ggml-vulkan: unpack trixie's libvulkan-dev privately."""
    if vk_header_version(Path("/usr/include")) >= MIN_VK_HEADER:
        return None
    dest = cache / "vulkan-headers"
    if vk_header_version(dest / "usr/include") >= MIN_VK_HEADER:
        return dest / "usr/include"
    log("system Vulkan headers too old; fetching libvulkan-dev from Debian trixie (nothing is installed)")
    apt = cache / "apt"
    for d in ("lists/partial", "cache/archives/partial", "debs"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text("deb http://deb.debian.org/debian trixie main\n")
    opts = [f"-oDir::Etc::SourceList={apt}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
            "-oDir::Etc::Preferences=/dev/null", "-oDir::Etc::PreferencesParts=/dev/null",
            f"-oDir::State::Lists={apt}/lists", f"-oDir::Cache={apt}/cache",
            "-oAcquire::Languages=none", "-oAPT::Sandbox::User=root"]
    run(["apt-get", *opts, "update"])
    run(["apt-get", *opts, "download", "libvulkan-dev/trixie"], cwd=apt / "debs")
    debs = sorted((apt / "debs").glob("libvulkan-dev_*.deb"))
    shutil.rmtree(dest, ignore_errors=True)
    run(["dpkg", "-x", str(debs[-1]), str(dest)])
    log(f"Vulkan headers {vk_header_version(dest / 'usr/include')} in {dest / 'usr/include'}")
    return dest / "usr/include"


# ---- configure / build -----------------------------------------------------------

def run(cmd: list[str], cwd: Path | None = None) -> None:
    """Stream a command's output; on failure raise with its tail."""
    tail = collections.deque(maxlen=40)
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    for line in proc.stdout:
        print(line, end="", file=LOG, flush=True)
        tail.append(line)
    if proc.wait() != 0:
        raise BuildError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n--- last output ---\n"
                         + "".join(tail))


def default_cuda_arch() -> str:
    has_gpu = bool(glob.glob("/dev/nvidia[0-9]*"))
    return "native" if has_gpu else "80;90"


def cmake_flags(args, backends: set[str], install: Path, cache: Path) -> list[str]:
    flags = ["-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_INSTALL_PREFIX={install}",
             "-DCMAKE_INSTALL_LIBDIR=lib",  # never lib64: the loader expects install/lib
             "-DCMAKE_INSTALL_RPATH=$ORIGIN", "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
             "-DBUILD_SHARED_LIBS=ON", "-DGGML_LLAMAFILE=ON",  # OFF halves f32 mul_mat speed
             "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF", "-DGGML_OPENMP=ON",
             "-DGIT_EXE=OFF"]  # else ggml reports ggmlpy's git commit as its own
    if args.native:
        flags.append("-DGGML_NATIVE=ON")
    else:  # backends become loadable modules; bake install/lib into ggml's search path
        flags += ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
                  f"-DGGML_BACKEND_DIR={install / 'lib'}"]
    if "vulkan" in backends:
        flags.append("-DGGML_VULKAN=ON")
        inc = vulkan_include_dir(cache)
        if inc:
            flags.append(f"-DVulkan_INCLUDE_DIR={inc}")
    if "cuda" in backends:
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={shutil.which('nvcc')}",
                  f"-DCMAKE_CUDA_ARCHITECTURES={args.cuda_arch or default_cuda_arch()}"]
    if "rpc" in backends:
        flags.append("-DGGML_RPC=ON")
    if shutil.which("ninja"):
        flags.append("-GNinja")
    return flags


def build_rpc_server(install: Path) -> None:
    """llama.cpp's tools/rpc/CMakeLists builds it; ggml's subtree does not, so compile it here."""
    log("compiling rpc-server")
    (install / "bin").mkdir(exist_ok=True)
    cxx = shutil.which("c++") or shutil.which("g++")
    run([cxx, "-O2", "-std=c++17", "-pthread", str(VENDOR / "tools/rpc-server.cpp"),
         f"-I{install / 'include'}", f"-L{install / 'lib'}", "-lggml", "-lggml-base",
         "-Wl,-rpath,$ORIGIN/../lib", "-o", str(install / "bin/rpc-server")])


def build(args, backends: set[str], root: Path, cache: Path) -> dict:
    build_dir, install = root / "build", root / "install"
    flags = cmake_flags(args, backends, install, cache)
    for d in (build_dir, install):
        shutil.rmtree(d, ignore_errors=True)  # stale trees from failed or forced builds
    t0 = time.monotonic()
    log(f"configuring: cmake {' '.join(flags)}")
    run(["cmake", "-S", str(VENDOR), "-B", str(build_dir), *flags])
    log(f"building with {args.jobs} jobs")
    run(["cmake", "--build", str(build_dir), "--parallel", str(args.jobs)])
    run(["cmake", "--install", str(build_dir)])
    if "rpc" in backends:
        build_rpc_server(install)
    (install / "bin").mkdir(exist_ok=True)
    return {"key": root.name, "ggml_version": GGML_VERSION, "backends": sorted(backends),
            "native": args.native, "cpu": cpu_tag(args.native),
            "lib_dir": str(install / "lib"), "bin_dir": str(install / "bin"),
            "include_dir": str(install / "include"), "cmake_flags": flags,
            "cuda_arch": args.cuda_arch or default_cuda_arch() if "cuda" in backends else None,
            "build_seconds": round(time.monotonic() - t0, 1),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_json(path: Path, info: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    tmp.replace(path)  # atomic: readers never see half a file


def parse_args(argv):
    p = argparse.ArgumentParser(description="Build ggml 0.25.3 shared libraries for ggmlpy.")
    p.add_argument("--backend", action="append", choices=BACKENDS, default=[],
                   help="extra backend (repeatable); cpu is always built")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compile jobs")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--native", dest="native", action="store_true", default=True,
                      help="tune kernels for this CPU (default)")
    mode.add_argument("--portable", dest="native", action="store_false",
                      help="all CPU variants as loadable modules, picked at run time")
    p.add_argument("--cuda-arch", help='CMAKE_CUDA_ARCHITECTURES (default: "native" with a GPU, else "80;90")')
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("--print-lib-dir", action="store_true", help="print only the lib dir on stdout")
    return p.parse_args(argv)


def main(argv=None) -> int:
    global LOG
    args = parse_args(argv)
    if args.print_lib_dir:
        LOG = sys.stderr
    t0 = time.monotonic()
    cache = (args.cache_dir or cache_dir()).expanduser().resolve()
    backends = set(args.backend) | {"cpu"}
    root = cache / "builds" / build_key(backends, args.native)
    marker = root / "build.json"
    try:
        info = json.loads(marker.read_text()) if marker.exists() and not args.force else None
        if info and args.cuda_arch and info.get("cuda_arch") != args.cuda_arch:
            info = None  # the arch list is not part of the key, so check it here
        if info:
            log(f"cache hit: {root.name}")
        else:
            preflight(backends)
            unpack(ensure_sdist(cache))
            root.mkdir(parents=True, exist_ok=True)
            marker.unlink(missing_ok=True)
            info = build(args, backends, root, cache)
            write_json(marker, info)  # written last: its presence means the build is complete
        write_json(cache / "active.json", info)
    except BuildError as e:
        print(f"build_ggml.py: {e}", file=sys.stderr)
        return e.code
    log(f"done in {time.monotonic() - t0:.1f}s; lib dir:")
    print(info["lib_dir"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
