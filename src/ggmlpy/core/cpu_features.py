"""The CPU's features as ggml's CPU backend sees them (ggmlR's ggml_cpu_has_*, ggml_cpu_features):
one table of names, each a query of ggml's.
"""
from __future__ import annotations

from .._naming import public_function
from ..bindings import ffi, lib
from ..errors import GGMLError

_NULL = ffi.NULL

_CPU_FEATURES = ["sse3", "ssse3", "avx", "avx_vnni", "avx2", "bmi2", "f16c", "fma", "avx512", "avx512_vbmi",
                 "avx512_vnni", "avx512_bf16", "amx_int8", "neon", "arm_fma", "fp16_va", "dotprod", "matmul_int8",
                 "sve", "sme", "riscv_v", "vsx", "vxe", "wasm_simd", "llamafile"]


def _cpu_fn(name):
    """A ggml-cpu entry point; in builds with loadable CPU variants, from the variant the registry loaded."""
    try:
        return getattr(lib, name)
    except AttributeError:
        reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU))
        addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
        if addr == _NULL:
            raise GGMLError(f"{name} is not available in this libggml build")
        return ffi.cast("int (*)(void)", addr)


def _cpu_has(feature):
    cname = f"ggml_cpu_has_{feature}"

    def q() -> bool:
        return bool(_cpu_fn(cname)())
    return public_function(q, cname, f"Whether ggml's CPU backend was built for, and runs with, {feature.upper()}.")


for _f in _CPU_FEATURES:
    globals()[f"ggml_cpu_has_{_f}"] = _cpu_has(_f)


def ggml_cpu_get_sve_cnt() -> int:
    """SVE vector length in bytes (0 without SVE)."""
    return int(_cpu_fn("ggml_cpu_get_sve_cnt")())


def ggml_cpu_get_rvv_vlen() -> int:
    """RISC-V vector length in bytes (0 without RVV)."""
    return int(_cpu_fn("ggml_cpu_get_rvv_vlen")())


def ggml_cpu_features() -> dict:
    """Every ggml_cpu_has_* answer by feature name, plus sve_cnt and rvv_vlen."""
    out = {f: globals()[f"ggml_cpu_has_{f}"]() for f in _CPU_FEATURES}
    out["sve_cnt"] = ggml_cpu_get_sve_cnt()
    out["rvv_vlen"] = ggml_cpu_get_rvv_vlen()
    return out


__all__ = sorted(n for n in globals() if n.startswith("ggml_cpu_"))
