"""The `*_inplace` variants, one table: each is its base op written into its first input's memory.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence  # noqa: F401  (Sequence: likewise)


from ..._naming import public_function
from ..handles import Context, Tensor  # noqa: F401  (Context: the copied hints of the base ops name it)
from . import assemble, attention, elementwise, reductions, rope_glu, views

_FAMILIES = (elementwise, views, reductions, attention, rope_glu, assemble)


# name -> the checked op it shares with; its `_inplace=True` form calls ggml's `*_inplace` twin, whose
# result is a view of the first input (the graph writes into that input's memory).
INPLACE = ["add", "sub", "mul", "div", "sqr", "sqrt", "exp", "log", "abs", "neg", "sgn", "step", "ceil", "floor",
            "round", "trunc", "relu", "gelu", "gelu_erf", "gelu_quick", "silu", "sigmoid", "tanh", "softplus", "elu",
            "expm1", "sin", "cos", "scale", "dup", "norm", "rms_norm", "l2_norm", "group_norm", "soft_max",
            "soft_max_ext", "soft_max_ext_back", "diag_mask_inf", "diag_mask_zero", "rope", "rope_ext", "rope_multi",
            "add1", "add_rel_pos", "set", "set_1d", "set_2d"]


def _make_inplace(name: str) -> Callable[..., Tensor]:
    base = next(getattr(m, f"ggml_{name}") for m in _FAMILIES if hasattr(m, f"ggml_{name}"))

    @functools.wraps(base)
    def op(*args, **kw):
        return base(*args, _inplace=True, **kw)

    # its module is this one, not the base op's that wraps() copied
    public_function(op, f"ggml_{name}_inplace", f"ggml_{name}_inplace: ggml_{name} computed into its first input's "
                    f"memory (the result is a view of it). Same arguments and checks as ggml_{name}.", __name__)
    del op.__wrapped__
    # its signature and hints are the base op's, minus the private flag
    sig = inspect.signature(base)
    op.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "_inplace"])
    op.__annotations__ = {k: v for k, v in base.__annotations__.items() if k != "_inplace"}
    return op


for _name in INPLACE:
    globals()[f"ggml_{_name}_inplace"] = _make_inplace(_name)


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
