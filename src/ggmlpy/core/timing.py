"""ggml's clock: ggmlR's ggml_time_init, ggml_time_ms, ggml_time_us, ggml_cycles, ggml_cycles_per_ms."""
from __future__ import annotations

from ..bindings import lib


def ggml_time_init() -> None:
    """Start ggml's clock (ggml_time_ms/us count from the first call)."""
    lib.ggml_time_init()


def ggml_time_ms() -> int:
    """ggml's monotonic clock in milliseconds."""
    return int(lib.ggml_time_ms())


def ggml_time_us() -> int:
    """ggml's monotonic clock in microseconds."""
    return int(lib.ggml_time_us())


def ggml_cycles() -> int:
    """ggml's clock() value (CPU ticks of this process)."""
    return int(lib.ggml_cycles())


def ggml_cycles_per_ms() -> int:
    """Ticks of ggml_cycles() per millisecond."""
    return int(lib.ggml_cycles_per_ms())


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
