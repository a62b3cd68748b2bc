"""ggmlR's ggml_vulkan_* device information and backends, through ggml's registry.

Everything goes through the "Vulkan" registry and its devices (never the ggml-vulkan
symbols directly), so it works in builds with loadable backends and answers "no
Vulkan" cleanly in builds without it. Software devices (lavapipe) are listed only
after enable_software_vulkan() / GGMLPY_SOFTWARE_VULKAN=1, as ggml-vulkan hides them.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from . import device as _device
from . import registry, vulkan_driver
from .device import Backend
from .ggml_log import VK_DEVICE_REPORTS
from ..bindings import c_str, ffi, lib
from ..errors import GGMLError, check

_NULL = ffi.NULL


def _vk_devs() -> list:
    registry.ensure_backends()
    reg = lib.ggml_backend_reg_by_name(b"Vulkan")
    if reg == _NULL:
        return []
    return [lib.ggml_backend_reg_dev_get(reg, i) for i in range(int(lib.ggml_backend_reg_dev_count(reg)))]


def vulkan_device_handles() -> list:
    """ggml's Vulkan devices (ggml_backend_dev_t), in ggml's order: index i is ggmlR's device i."""
    return _vk_devs()


def _vk_dev(device: int):
    devs = _vk_devs()
    i = int(device)
    if not 0 <= i < len(devs):  # ggmlR's wording, which ported scripts match
        available = f"0-{len(devs) - 1}" if devs else "none: no Vulkan device is visible"
        raise GGMLError(f"Invalid device index: {i} (available: {available})")
    return devs[i]


def ggml_vulkan_available() -> bool:
    """Whether the loaded libggml has the Vulkan backend and it sees at least one device."""
    return len(_vk_devs()) > 0


def ggml_vulkan_device_count() -> int:
    """How many Vulkan devices ggml sees (0 without the Vulkan backend)."""
    return len(_vk_devs())


def ggml_vulkan_device_description(device: int = 0) -> str:
    """The device's description (the GPU's name)."""
    return c_str(lib.ggml_backend_dev_description(_vk_dev(device)))


def ggml_vulkan_device_memory(device: int = 0) -> dict:
    """{"free": bytes, "total": bytes} of a Vulkan device's memory."""
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(_vk_dev(device), free, total)
    return {"free": float(free[0]), "total": float(total[0])}


def ggml_vulkan_list_devices() -> list:
    """One dict per Vulkan device: index, name, free_memory, total_memory."""
    out = []
    for i, d in enumerate(_vk_devs()):
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(d, free, total)
        out.append({"index": i, "name": c_str(lib.ggml_backend_dev_description(d)),
                    "free_memory": float(free[0]), "total_memory": float(total[0])})
    return out


def ggml_vulkan_init(device: int = 0) -> Backend:
    """A new backend on Vulkan device `device`."""
    d = _vk_dev(device)
    return Backend(lib.ggml_backend_dev_init(d, _NULL), c_str(lib.ggml_backend_dev_name(d)))


def ggml_vulkan_is_backend(backend: object) -> bool:
    """Whether `backend` runs on a Vulkan device."""
    if not isinstance(backend, Backend) or backend.ptr is None or backend.dev == _NULL:
        return False
    reg = lib.ggml_backend_dev_backend_reg(backend.dev)
    return c_str(lib.ggml_backend_reg_name(reg)) == "Vulkan"


def ggml_vulkan_backend_name(backend: Backend) -> str:
    """The Vulkan backend's name (e.g. "Vulkan0")."""
    check(ggml_vulkan_is_backend(backend), "ggml_vulkan_backend_name: not a Vulkan backend")
    return backend.name


def ggml_vulkan_free(backend: Backend) -> None:
    """Free a Vulkan backend."""
    check(ggml_vulkan_is_backend(backend), "ggml_vulkan_free: not a Vulkan backend")
    backend.free()


def ggml_vulkan_status() -> None:
    """Print whether Vulkan is available and its devices with their memory."""
    if not ggml_vulkan_available():
        print("Vulkan: NOT AVAILABLE")
        if lib.ggml_backend_reg_by_name(b"Vulkan") != _NULL:
            print("  the Vulkan backend is built in but sees no device (software devices such as lavapipe "
                  "need ggmlpy.enable_software_vulkan() or GGMLPY_SOFTWARE_VULKAN=1)")
        else:
            print("  this libggml has no Vulkan backend: python build_ggml.py --backend vulkan")
        return None
    devs = ggml_vulkan_list_devices()
    print("Vulkan: AVAILABLE")
    print(f"  Devices: {len(devs)}")
    for d in devs:
        print(f"  [{d['index']}] {d['name']}")
        print(f"      Memory: {d['free_memory'] / 1e9:.2f} GB free / {d['total_memory'] / 1e9:.2f} GB total")
    return None


# -- ggmlR's multi-GPU helpers, on what ggml 0.25.3 has ------------------------------------------------
MAX_DEVICES = 16           # GGML_VK_MAX_DEVICES
SPLIT_ROW_ROUNDING = 512   # ggmlR's row granularity for split weights (its VK_SPLIT_MATRIX_ROW_PADDING)


def _int(v, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not float(v).is_integer():
        raise GGMLError(f"{what} must be a whole number, got {v!r}")
    return int(v)


def _cumulative_split(weights, n_devices: int) -> np.ndarray:
    """ggmlR's tensor_split: per device, the fraction of rows before it (float32, first 0).
    Negative weights count as 0; no weights, or weights summing to 0, split evenly."""
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64).ravel()
        if w.size != n_devices:
            raise GGMLError(f"weights length ({w.size}) must equal n_devices ({n_devices})")
        if not np.all(np.isfinite(w)):
            raise GGMLError(f"weights must be finite numbers, got {list(w)}")
        w = np.maximum(w.astype(np.float32), np.float32(0))
        total = np.float32(w.sum(dtype=np.float32))
        if total > 0:
            acc = np.concatenate([[np.float32(0)], np.cumsum(w, dtype=np.float32)[:-1]])
            return (acc / total).astype(np.float32)
    return (np.arange(n_devices, dtype=np.float32) / np.float32(n_devices)).astype(np.float32)


def ggml_vulkan_split_row_ranges(nrows: int, n_devices: int, weights: ArrayLike | None = None) -> dict:
    """ggmlR's row split for tensor parallelism: the half-open, 0-based row range [row_low,
    row_high) of each device, from `weights` (relative shares, default even). Boundaries are
    rounded down to multiples of 512 rows and the last device always ends at `nrows`, so the
    ranges are contiguous and cover every row once (ggmlR's arithmetic, float32 included).
    Pure arithmetic: it needs no GPU. Returns {"row_low": ints, "row_high": ints}."""
    nrows, n_devices = _int(nrows, "nrows"), _int(n_devices, "n_devices")
    if nrows < 0:
        raise GGMLError(f"nrows must be >= 0, got {nrows}")
    if not 1 <= n_devices <= MAX_DEVICES:
        raise GGMLError(f"n_devices must be in 1..{MAX_DEVICES} (GGML_VK_MAX_DEVICES), got {n_devices}")
    split = _cumulative_split(weights, n_devices)

    def boundary(frac) -> int:
        r = int(np.float32(nrows) * frac)  # C: int64 * float is a float, truncated
        return r - r % SPLIT_ROW_ROUNDING
    low = [0 if i == 0 else boundary(split[i]) for i in range(n_devices)]
    high = [nrows if i == n_devices - 1 else boundary(split[i + 1]) for i in range(n_devices)]
    low = [min(max(lo, 0), nrows) for lo in low]
    high = [max(min(hi, nrows), lo) for lo, hi in zip(low, high)]
    return {"row_low": np.array(low, dtype=np.int64), "row_high": np.array(high, dtype=np.int64)}


def ggml_vulkan_hard_exit_available() -> bool:
    """Whether ggml_vulkan_shutdown(hard=True) ends the process with _exit: always here (Python's
    os._exit is in every build; ggmlR compiles it out of its CRAN build)."""
    return True


def _report_fields(report: str) -> dict:
    """ggml-vulkan's device line "<name> (<driver>) | uma: 0 | fp16: 1 | ..." as a dict."""
    head, *parts = [p.strip() for p in report.split(" | ")]
    fields = dict(p.split(": ", 1) for p in parts if ": " in p)
    name, _, driver = head.rpartition(" (")
    return {"name": name or head, "driver": driver.rstrip(")"), **fields}


def _driver_properties(index: int, name: str) -> dict | None:
    """The Vulkan driver's own report on ggml's device `index`, or None where it cannot be told
    which physical device that is. ggml keeps its index-to-device map private: it is the order of
    GGML_VK_VISIBLE_DEVICES when that was set (and the names agree), else the one physical device
    of that name, or several of that name reporting the same (identical GPUs)."""
    phys = vulkan_driver.physical_device_properties()
    visible = (registry.vulkan_visible_devices() or "").replace(",", " ").split()
    if index < len(visible) and visible[index].isdigit():
        k = int(visible[index])
        if k < len(phys) and phys[k]["name"] == name:
            return phys[k]
    same = [p for p in phys if p["name"] == name]
    return same[0] if same and all(p == same[0] for p in same) else None


_DRIVER_FIELDS = ("subgroup_min_size", "subgroup_max_size", "subgroup_shuffle", "subgroup_vote",
                  "max_push_constants_size", "coopmat_shapes", "arch")


def ggml_vulkan_device_caps(device: int = 0) -> dict:
    """A Vulkan device's capabilities: ggml's device properties (async, host_buffer,
    buffer_from_host_ptr, events, mmap_support); the line ggml-vulkan reports as the device
    registers (fp16, bf16, fp4, integer_dot_product, subgroup_size (its "warp size"),
    shared_memory, uma, matrix_cores ("none", "KHR_coopmat", "NV_coopmat2", ...) and
    coopmat_support, name, driver); and the standard properties the Vulkan driver reports, which
    ggml reads but does not expose (core/vulkan_driver.py): subgroup_min_size / subgroup_max_size
    (VK_EXT_subgroup_size_control or Vulkan 1.3), subgroup_shuffle, subgroup_vote,
    max_push_constants_size, coopmat_shapes (VK_KHR_cooperative_matrix's list: m, n, k, the
    a/b/c/result types, scope) and arch (ggml's architecture class, where ggml decides it from the
    vendor and the extension list: "OTHER" for lavapipe and other vendors, "NVIDIA_PRE_TURING";
    None for the classes ggml derives from further properties). A property the driver does not
    report is None. ggmlR's fork adds its own internals, absent here: coopmat1_fa_support,
    subgroup_no_shmem and coopmat_m/n/k (the shape ggml picks from coopmat_shapes). The fields of
    ggml's line are None if ggml's log was not routed to ggmlpy when the device registered
    (ggml_log_set_default before the first query). A device index that does not exist raises
    "Invalid device index: N (available: 0-M)", as ggmlR does."""
    d = _vk_dev(device)
    caps = dict(_device.dev_props(d)["caps"])
    rep = VK_DEVICE_REPORTS.get(int(device))
    f = _report_fields(rep) if rep else {}

    def flag(key):
        return None if key not in f else f[key] not in ("0", "")

    def num(key):
        return int(f[key]) if f.get(key, "").isdigit() else None
    cores = f.get("matrix cores")
    caps.update({"name": f.get("name") or c_str(lib.ggml_backend_dev_description(d)), "driver": f.get("driver"),
                 "fp16": flag("fp16"), "fp16_dot2": None if "fp16" not in f else f["fp16"] == "dot2",
                 "bf16": flag("bf16"), "fp4": flag("fp4"), "integer_dot_product": flag("int dot"),
                 "subgroup_size": num("warp size"), "shared_memory": num("shared memory"), "uma": flag("uma"),
                 "matrix_cores": cores, "coopmat_support": None if cores is None else cores != "none",
                 "report": rep})
    drv = _driver_properties(int(device), c_str(lib.ggml_backend_dev_description(d))) or {}
    caps.update({k: drv.get(k) for k in _DRIVER_FIELDS})
    return caps


def ggml_vulkan_device_groups() -> dict:
    """ggmlR's device-group diagnostic: {"n_groups": int, "report": str}. ggml 0.25.3 drives each
    Vulkan device through a logical device of its own and never forms a Vulkan device group, so
    every device ggml sees is a group of one, and data moving between devices goes through host
    memory (ggmlR's "host-staging"). The report lists each group's device with ggml's
    properties; print it to read it."""
    devs = _vk_devs()
    lines = [f"Vulkan device groups: {len(devs)}"]
    for i, d in enumerate(devs):
        p = _device.dev_props(d)
        lines += [f"  group {i}: 1 device(s)",
                  f"    dev[0]: {p['description']} ({p['name']}, pci {p['device_id'] or 'n/a'}, "
                  f"{p['memory_total'] / 2**30:.2f} GiB)",
                  "    peer: n/a (single-device group: ggml copies between devices through host memory)"]
    if not devs:
        lines.append("  (no Vulkan device: this libggml has no Vulkan backend, or it sees no device)")
    return {"n_groups": len(devs), "report": "\n".join(lines) + "\n"}


__all__ = sorted(n for n in globals() if n.startswith("ggml_vulkan_"))
