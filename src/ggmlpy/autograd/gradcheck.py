"""ag_gradcheck: analytic gradients against central finite differences."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import GGMLError
from ..tensor import AGTensor
from .engine import backward
from .tape import no_grad, with_grad_tape

# float32 cannot resolve a 1e-5 step (ggmlR's default, meant for R's doubles): its rounding
# error divided by the step would swamp the derivative. The step is raised to this floor,
# relative to |x|, and Richardson extrapolation keeps the truncation error at O(h^4). At 1e-2
# the rounding error of an O(1) loss stays under 4e-5; a step that crosses a kink (relu, clamp)
# shows as disagreement between the h and h/2 estimates, and is shrunk (_derivative).
F32_STEP = 5e-2
# ggml's CUDA kernels are built with --use_fast_math: tanh and exp there are ~10x less exact
# (measured on an H200: a small MLP's loss differs from the CPU's by 1.1e-6 relative; its
# finite differences by 1.2e-4 at the CPU's step), so the step must be wider there.
F32_STEP_ON = {"CUDA": 2e-2}


def _step_floor(x) -> float:
    return next((s for prefix, s in F32_STEP_ON.items() if x.device_context.name.startswith(prefix)), F32_STEP)


def ag_gradcheck(fn: Callable, inputs: Sequence[AGTensor] | Mapping[str, AGTensor], eps: float = 1e-5,
                 atol: float = 1e-4, return_errors: bool = False, verbose: bool = False,
                 quiet: bool | None = None) -> bool | tuple[bool, dict[int, float]]:
    """True iff max |analytic - numeric| < atol for every input with requires_grad.

    Two calling forms:
      * ggmlR's: `inputs` a dict (R's named list) of tensors and `fn(inputs)` returns the loss;
        it prints a line per input and an overall verdict unless `quiet=True`, and with
        `verbose=True` also both gradients.
      * `inputs` a list of tensors and `fn()` (no argument) returns the loss; silent unless
        `quiet=False`.
    `fn` returns a [1, 1] loss; each element of each input is perturbed in place and restored.
    `return_errors=True` also returns {tensor id: max abs error}."""
    named = isinstance(inputs, Mapping)
    if named:
        names = [str(k) for k in inputs]
        tensors = list(inputs.values())
    else:
        if isinstance(inputs, AGTensor) or not isinstance(inputs, Iterable):
            raise GGMLError("ag_gradcheck: expected a function and a list (or dict) of ag tensors")
        tensors = list(inputs)
        names = [str(i) for i in range(1, len(tensors) + 1)]
    if not callable(fn) or not all(isinstance(x, AGTensor) for x in tensors):
        raise GGMLError("ag_gradcheck: expected a function fn and a list (or dict) of ag tensors")
    call = (lambda: fn(inputs)) if named or _takes_argument(fn) else fn
    quiet = (not named) if quiet is None else bool(quiet)
    with with_grad_tape():
        loss = call()
    if not isinstance(loss, AGTensor) or loss.shape != (1, 1):
        raise GGMLError(f"ag_gradcheck: fn must return a [1, 1] loss tensor, got {getattr(loss, 'shape', loss)!r}")
    grads = backward(loss)
    analytic = {x.id: (grads[x].data if x in grads else np.zeros(x.shape)) for x in tensors if x.requires_grad}
    errors = {}
    with no_grad():
        for name, x in zip(names, tensors):
            if not x.requires_grad:
                continue
            base = x.data  # float64, so finite differences are not rounded to the storage type
            num = np.zeros_like(base)
            floor = _step_floor(x)
            for idx in np.ndindex(base.shape):
                h = max(eps, floor * max(1.0, abs(base[idx]))) if x.dtype != "f64" else eps
                num[idx] = _derivative(lambda d: _loss_at(call, x, base, idx, d), h, atol)
            x.data = base
            errors[x.id] = float(np.max(np.abs(analytic[x.id] - num)))
            if not quiet:
                print(f"[gradcheck] '{name}': max_err = {errors[x.id]:.2e}  {'PASS' if errors[x.id] < atol else 'FAIL'}")
            if verbose:
                print("  analytical:\n", np.round(analytic[x.id], 6), "\n  numerical:\n", np.round(num, 6), sep="")
    ok = all(e < atol for e in errors.values())
    if not quiet:
        print(f"[gradcheck] Overall: {'PASS' if ok else 'FAIL'}")
    return (ok, errors) if return_errors else ok


def _takes_argument(fn) -> bool:
    """Whether fn can be called with one positional argument (ggmlR's fn(inputs))."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) and p.default is p.empty
               for p in params)


def _loss_at(fn, x, base, idx, delta):
    moved = base.copy()
    moved[idx] += delta
    x.data = moved
    return float(fn().item())


def _derivative(f, h, atol, shrinks=5):
    """Richardson-extrapolated central difference R(h) from steps h and h/2. It is checked
    against R(h/2) (steps h/2 and h/4): a smooth function gives the same value up to float32
    rounding, a step that crosses a kink (relu, clamp) does not, and then the step shrinks by
    4, a few times. The largest consistent step wins: rounding grows as the step shrinks."""
    def central(s):
        return (f(s) - f(-s)) / (2 * s)
    ulp = float(np.spacing(np.float32(abs(f(0.0)))))
    d1, d2 = central(h), central(h / 2)
    first = None
    for _ in range(shrinks + 1):
        d4 = central(h / 4)
        r1, r2 = (4 * d2 - d1) / 3, (4 * d4 - d2) / 3
        first = r1 if first is None else first
        if abs(r1 - r2) <= atol / 2 + 8 * ulp / h:
            return r1
        h /= 4
        d1, d2 = d4, central(h / 2)
    return first  # never consistent: rounding, or a kink at the point itself
