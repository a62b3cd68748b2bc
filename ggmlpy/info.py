"""`ggmlpy.info()` and `python -m ggmlpy info`: where libggml came from and what it can run on."""
from __future__ import annotations

from .backend.device import backends, devices
from .bindings import ffi, found, lib


def info(file=None) -> dict:
    """Print (and return) the library path and source, ggml version, backends and devices."""
    data = {
        "library": str(found.lib_dir),
        "found_via": found.source,
        "ggml_version": ffi.string(lib.ggml_version()).decode(),
        "backends": backends(),
        "devices": [d.__dict__ for d in devices()],
    }
    lines = [
        f"ggml version : {data['ggml_version']}",
        f"library      : {data['library']}",
        f"found via    : {data['found_via']}",
        f"backends     : {', '.join(data['backends'])}",
        "devices      :",
    ]
    for d in devices():
        mem = f"{d.memory_total / 2**30:.1f} GiB" if d.memory_total else "n/a"
        lines.append(f"  {d.name:<14} {d.type:<5} {d.backend:<7} {mem:>10}  {d.description}")
    print("\n".join(lines), file=file)
    return data
