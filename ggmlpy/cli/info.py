"""`ggmlpy.info()` and `python -m ggmlpy info`: where libggml came from and what it can run on."""
from __future__ import annotations

import os
from typing import TextIO

from ..core.registry import backends, devices, is_software_device, software_vulkan_enabled
from ..core.rpc import rpc_server_binary
from ..core.registry import vulkan_physical_devices
from ..bindings import ffi, found, lib
from .. import kernels


def info(file: TextIO | None = None) -> dict:
    """Print (and return) the library path and source, ggml version, backends and devices."""
    devs = devices()
    built = backends()
    rpc_bin = rpc_server_binary()
    data = {
        "library": str(found.lib_dir),
        "found_via": found.source,
        "ggml_version": ffi.string(lib.ggml_version()).decode(),
        "backends": built,
        "devices": [d.__dict__ for d in devs],
        "software_vulkan": software_vulkan_enabled(),
        "rpc_server": str(rpc_bin) if rpc_bin else None,
        "kernels_isa": kernels.isa_summary() if kernels.enabled() else "off (GGMLPY_KERNELS=0)",
    }
    lines = [
        f"ggml version : {data['ggml_version']}",
        f"library      : {data['library']}",
        f"found via    : {data['found_via']}",
        f"backends     : {', '.join(data['backends'])}",
        f"CPU kernels  : {data['kernels_isa']}",
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
