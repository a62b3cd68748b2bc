"""The functional forward-mode API: jvp, hvp (forward over reverse) and jacfwd, on forward_ad's
dual numbers, the tape and the ag_* functions."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GGMLError
from ..tensor import AGTensor, ag_tensor
from .engine import backward, current_trace
from .forward_ad import dual_level, make_dual, tangent_of, unpack_dual
from .ops import ag_zeros
from .tape import private_tape, with_grad_tape

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def jvp(fn: Callable[..., AGTensor | Sequence[AGTensor]], primals: AGTensor | Sequence[AGTensor],
        tangents: AGTensor | ArrayLike | Sequence[AGTensor | ArrayLike],
        ) -> tuple[AGTensor, AGTensor] | tuple[list[AGTensor], list[AGTensor]]:
    """(fn(*primals), J v): outputs and their directional derivatives along `tangents`."""
    single = not isinstance(primals, (list, tuple))
    primals = [primals] if single else list(primals)
    tangents = [tangents] if single or isinstance(tangents, AGTensor) and len(primals) == 1 else list(tangents)
    if len(primals) != len(tangents):
        raise GGMLError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    with dual_level() as lv:
        outs = fn(*[make_dual(p, t, lv) for p, t in zip(primals, tangents)])
        many = isinstance(outs, (list, tuple))
        pairs = [unpack_dual(o, lv) for o in (outs if many else [outs])]
        results = [p for p, _ in pairs]
        jvps = [t if t is not None else _zeros_like(p) for p, t in pairs]
    return (results, jvps) if many else (results[0], jvps[0])


def _zeros_like(t):
    return ag_zeros(*t.shape, device=t.device_context.spec)


def hvp(fn: Callable[[AGTensor], AGTensor], x: AGTensor, v: AGTensor | ArrayLike) -> tuple[AGTensor, AGTensor]:
    """(fn(x), H v) for a scalar fn, by forward-over-reverse: the JVP of a backward pass.

    Runs its own with_grad_tape() (which resets the pass pool); inside a function ag_compile
    traces, a tape of its own, so the Hessian-vector product is one ggml graph."""
    if not isinstance(x, AGTensor) or not callable(fn):
        raise GGMLError("hvp: expected a function and an ag tensor, hvp(fn, x, v)")
    leaf = AGTensor(x.storage, x.shape, x.device_context, requires_grad=True)
    # Traced by ag_compile, the backward's primitives join the compiled graph: a tape of its own,
    # no pool reset in the middle of the trace. Eagerly, a fresh tape as with_grad_tape() gives.
    tape = private_tape if current_trace() is not None else with_grad_tape
    with dual_level() as lv:
        with tape():
            loss = fn(make_dual(leaf, v, lv))  # on the tape, so the gradient reaches `leaf`
            grads = backward(loss) if tape is private_tape else None
        if grads is None:
            grads = backward(loss)
        g = grads.get(leaf)
        hv = tangent_of(g, lv) if g is not None else None
        loss_primal, _ = unpack_dual(loss, lv)
    return loss_primal, (hv if hv is not None else _zeros_like(x))


def jacfwd(fn: Callable[[AGTensor], AGTensor]) -> Callable[[AGTensor], AGTensor]:
    """A function computing the Jacobian of fn at x, column by column with jvp:
    J[:, k] = d vec(fn(x)) / d vec(x)[k] (vec is R's column-major order)."""
    def jac(x: AGTensor) -> AGTensor:
        n = x.nrow * x.ncol
        cols = []
        for k in range(n):
            e = np.zeros(n)
            e[k] = 1.0
            _, t = jvp(fn, x, ag_tensor(e.reshape(x.shape, order="F"), device=x.device_context.spec))
            cols.append(t.numpy().ravel(order="F"))
        return ag_tensor(np.stack(cols, axis=1), device=x.device_context.spec)
    return jac
