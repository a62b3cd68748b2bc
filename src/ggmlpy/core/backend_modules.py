"""The backend modules of a GGML_BACKEND_DL build (a wheel's ggmlpy/lib, build_ggml.py --portable): which
of ggml's CPU variants (libggml-cpu-<variant>.so) this process runs and why, and which modules ggml
left unloaded and why. ggml's loader opens every CPU variant, asks its `ggml_backend_score()` (0: this
CPU lacks an instruction set the variant was compiled for; higher: more of the CPU's features used)
and keeps the highest; these functions ask the same question, so what they report is the loader's
reasoning, not a guess at it. Builds with the backends linked in have no modules: None, empty."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

import cffi

from ..bindings import found
from .registry import backends, ensure_backends

_CPU_PREFIX = "libggml-cpu-"
_score_ffi = cffi.FFI()  # the modules' one entry point asked here; ggml's declarations stay in the bindings' FFI
_score_ffi.cdef("int ggml_backend_score(void);")


@dataclass(frozen=True)
class CpuVariant:
    name: str                # "zen4", "haswell", ...
    chosen: str              # why: one line
    scores: dict[str, int]   # every variant in the build: its score on this CPU (0: cannot run here)


def _mapped_modules() -> set[pathlib.Path]:
    """The files of the build's folder that this process has mapped (the modules ggml loaded)."""
    try:
        maps = pathlib.Path("/proc/self/maps").read_text()
    except OSError:
        return set()
    here = found.lib_dir.resolve()
    paths = {pathlib.Path(line.split(None, 5)[-1]) for line in maps.splitlines() if "libggml-" in line}
    return {p for p in paths if p.parent == here}


def variant_scores() -> dict[str, int]:
    """Each CPU variant of the build with its score on this CPU, as ggml's loader computes it."""
    out = {}
    for path in sorted(found.lib_dir.glob(f"{_CPU_PREFIX}*.so")):
        try:
            h = _score_ffi.dlopen(str(path), _score_ffi.RTLD_NOW | _score_ffi.RTLD_LOCAL)
        except OSError:
            out[path.stem[len(_CPU_PREFIX):]] = 0
            continue
        try:
            out[path.stem[len(_CPU_PREFIX):]] = int(h.ggml_backend_score())
        except AttributeError:  # not a variant module (no score entry point)
            pass
        finally:
            _score_ffi.dlclose(h)
    return out


def cpu_variant() -> CpuVariant | None:
    """The CPU variant ggml loaded and why; None where the CPU backend is linked in (no variants)."""
    ensure_backends()
    loaded = [p.stem[len(_CPU_PREFIX):] for p in _mapped_modules() if p.name.startswith(_CPU_PREFIX)]
    if not loaded:
        return None
    scores = variant_scores()
    runs = sorted((s, n) for n, s in scores.items() if s > 0)
    name = loaded[0]
    best = runs[-1][1] if runs else None
    why = (f"the highest score on this CPU ({scores.get(name)}) of the {len(runs)} of {len(scores)} variants it runs"
           if name == best else f"loaded, though {best} scores higher here ({scores})")
    return CpuVariant(name, why, scores)


def skipped_modules() -> dict[str, str]:
    """The build's backend modules that ggml did not load, each with the reason dlopen gives (a missing
    libvulkan.so.1 or libopenblas.so.0, say), or "not loaded" where it opens but did not register."""
    ensure_backends()
    loaded = {n.lower() for n in backends()}
    mapped = {p.name for p in _mapped_modules()}
    out = {}
    for path in sorted(found.lib_dir.glob("libggml-*.so")):
        name = path.stem[len("libggml-"):]
        if name == "base" or name.startswith("cpu") or name in loaded or path.name in mapped:
            continue
        try:
            _score_ffi.dlclose(_score_ffi.dlopen(str(path), _score_ffi.RTLD_NOW | _score_ffi.RTLD_LOCAL))
            out[name] = "not loaded"
        except OSError as e:
            out[name] = str(e).split(": ", 1)[-1].split(".  Additionally", 1)[0]  # dlopen's reason, not cffi's fallback
    return out
