"""`ggmlpy.info()` and `python -m ggmlpy info`: where libggml came from and what it can run on."""
from __future__ import annotations

import os
from typing import TextIO

from ..core.backend_modules import cpu_variant, skipped_modules
from ..core.registry import backends, devices, is_software_device, software_vulkan_enabled
from ..core.rpc import rpc_server_binary
from ..core.registry import vulkan_physical_devices
from ..bindings import ffi, found, lib
from .. import kernels


def info(file: TextIO | None = None) -> dict:
    """Print (and return) the library path and source, ggml version, backends and devices, and in a
    build with loadable backends (a wheel's) the CPU variant ggml chose and why, and the modules it skipped."""
    devs = devices()
    built = backends()
    rpc_bin = rpc_server_binary()
    variant = cpu_variant()
    data = {
        "library": str(found.lib_dir),
        "found_via": found.source,
        "ggml_version": ffi.string(lib.ggml_version()).decode(),
        "backends": built,
        "devices": [d.__dict__ for d in devs],
        "software_vulkan": software_vulkan_enabled(),
        "rpc_server": str(rpc_bin) if rpc_bin else None,
        "kernels_isa": kernels.isa_summary() if kernels.enabled() else "off (GGMLPY_KERNELS=0)",
        "kernels_from": kernels.origin(),
        "cpu_variant": variant.name if variant else None,
        "cpu_variant_why": variant.chosen if variant else "the CPU backend is linked into libggml: one build, no variants",
        "cpu_variant_scores": variant.scores if variant else {},
        "skipped_modules": skipped_modules(),
    }
    lines = [
        f"ggml version : {data['ggml_version']}",
        f"library      : {data['library']}",
        f"found via    : {data['found_via']}",
        f"backends     : {', '.join(data['backends'])}",
        f"CPU variant  : {data['cpu_variant'] or 'built in'} ({data['cpu_variant_why']})",
        *(f"not loaded   : {name} ({why})" for name, why in data["skipped_modules"].items()),
        f"CPU kernels  : {data['kernels_isa']}",
        f"kernels from : {data['kernels_from']}",
        "devices      :",
    ]
    for d in devs:
        mem = f"{d.memory_total / 2**30:.1f} GiB" if d.memory_total else "n/a"
        soft = " (software)" if is_software_device(d.name) else ""
        lines.append(f"  {d.name:<14} {d.type:<5} {d.backend:<7} {mem:>10}  {d.description}{soft}")
    if "Vulkan" in built:
        visible = os.environ.get("GGML_VK_VISIBLE_DEVICES")
        state = (f"on (GGML_VK_VISIBLE_DEVICES={visible})" if software_vulkan_enabled()
                 else f"GGML_VK_VISIBLE_DEVICES={visible}" if visible else "off")
        lines.append(f"software Vulkan: {state}")
        if not any(d.backend == "Vulkan" for d in devs):
            hidden = [v.name for v in vulkan_physical_devices() if v.type == "cpu"]
            if hidden:
                lines.append(f"  hidden by ggml: {', '.join(hidden)}; start Python with GGMLPY_SOFTWARE_VULKAN=1 "
                             "to use it")
    if "RPC" in built:
        lines.append(f"rpc-server   : {rpc_bin or 'not found next to the library'}"
                     + ("  (python -m ggmlpy rpc-server --host 127.0.0.1 --port 50052)" if rpc_bin else ""))
    print("\n".join(lines), file=file)
    return data
