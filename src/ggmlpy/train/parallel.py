"""dp_train: ggmlR's data-parallel training, one model replica per device.

Each iteration every replica takes its own sample (round robin over `data`), runs
forward and backward on its device, the gradients are averaged on the host,
optionally clipped by their global norm, Adam steps replica 0, and its weights are
copied to the others. Replicas run one after another, as ggmlR's do; what the
devices buy is memory and placement (CPU, a GPU, ggml RPC servers), not overlap.

A replica whose device is lost (an RPC server that dies or stops answering:
DeviceLostError) costs its sample of that step, not the job: training goes on with
the others (the mean gradient over the replicas that finished the step), with a
warning, and the result's `dropped` attribute lists each lost replica and the iteration.
When replica 0, which holds the optimizer, is lost, the next live replica (whose
weights are replica 0's of the last step) takes over with a fresh Adam.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from ..autograd.engine import backward
from ..autograd.tape import with_grad_tape
from ..runtime.state import ag_default_device, ag_device
from ..errors import DeviceError, DeviceLostError, GGMLError
from ..optim.optimizers import optimizer_adam
from ..params import NamedList, ParamList
from ..tensor import AGTensor, ag_tensor


def _member(model, name: str):
    """model.name, or model[name] for a dict (R's list(forward = ..., parameters = ...))."""
    if isinstance(model, dict):
        if name not in model:
            raise GGMLError(f"dp_train: make_model() returned a dict without {name!r}")
        return model[name]
    if not hasattr(model, name):
        raise GGMLError(f"dp_train: make_model() must return a model with `forward` and `parameters`, "
                        f"got {type(model).__name__}")
    return getattr(model, name)


def _named_params(model) -> ParamList:
    params = _member(model, "parameters")()
    params = ParamList(params if isinstance(params, (dict, ParamList)) else list(params))
    if not params or not all(isinstance(p, AGTensor) for p in params):
        raise GGMLError("dp_train: parameters() must return a non-empty list or dict of ag tensors")
    return params


def _as_ag(x) -> AGTensor:
    return x if isinstance(x, AGTensor) else ag_tensor(np.asarray(x, dtype=np.float64))


def dp_train(make_model: Callable, data: Sequence, loss_fn: Callable | None = None,
             forward_fn: Callable | None = None, target_fn: Callable | None = None,
             n_gpu: int | None = None, n_iter: int = 10, lr: float = 1e-3, max_norm: float = math.inf,
             verbose: int | bool = 10, devices: Sequence[str] | None = None) -> NamedList:
    """Data-parallel training with ggmlR's arguments; returns {"params", "loss_history", "model"}
    (a dict that answers by attribute too: `res.model`). `res.dropped` (an attribute, not in
    ggmlR) lists the replicas lost on the way, each {"replica", "device", "iteration", "error"}:
    empty unless a device was lost (see the module's docstring).

    make_model(): builds one replica: an ag_* layer, or anything (a dict too) with `forward(x)`
      and `parameters()` (a list or dict of ag tensors). Replica 0's initial weights are copied
      to the others. A dict model comes back as one that answers by attribute as well
      (`res["model"].forward(x)`, as R's `res$model$forward(x)`).
    data: a list of samples. Each step replica i gets sample (base + i) mod len(data).
    forward_fn(model, sample) -> output (default: model.forward(sample) as an ag tensor);
    target_fn(sample) -> target (default: the sample itself); loss_fn(output, target) -> loss
      (default: the output is the loss).
    n_gpu: the number of replicas (default: len(devices), else 1). devices: a device for each
      replica ("cpu", "vulkan:0", "rpc://host:port", ...; default: the current device for all).
    Adam (lr) steps replica 0 with the replicas' mean gradient, clipped to `max_norm` when finite.
    verbose: print the loss every `verbose` iterations (False or 0: never)."""
    if not callable(make_model):
        raise GGMLError("dp_train: make_model must be a function that builds a model")
    data = list(data)
    if not data:
        raise GGMLError("dp_train: data is empty")
    if devices is not None:
        devices = [str(d) for d in devices]
        if n_gpu is None:
            n_gpu = len(devices)
    n = 1 if n_gpu is None else n_gpu
    if int(n) != n or n < 1:
        raise GGMLError(f"dp_train: n_gpu must be a positive integer, got {n_gpu!r}")
    n = int(n)
    if int(n_iter) != n_iter or n_iter < 1:
        raise GGMLError(f"dp_train: n_iter must be a positive integer, got {n_iter!r}")
    if devices is not None and len(devices) != n:
        raise GGMLError(f"dp_train: {len(devices)} devices for {n} replicas (n_gpu)")
    home = ag_default_device()
    places = devices if devices is not None else [home] * n

    def on(i: int, fn: Callable):
        previous = ag_device(places[i])
        try:
            return fn()
        finally:
            ag_device(previous)

    replicas = [on(i, make_model) for i in range(n)]
    replicas = [NamedList(r) if type(r) is dict else r for r in replicas]
    params = [_named_params(r) for r in replicas]
    keys = params[0].keys() or [str(k) for k in range(len(params[0]))]
    for i in range(1, n):
        if len(params[i]) != len(params[0]):
            raise GGMLError("dp_train: the replicas have different numbers of parameters")
        for p, p0 in zip(params[i], params[0]):
            p.data = p0.data  # every replica starts from replica 0's weights
    live = list(range(n))  # the replicas whose device still works; live[0] holds the optimizer
    dropped: list[dict] = []
    owner = 0
    opt = optimizer_adam(params[0], lr=lr)

    def drop(i: int, it: int, err: DeviceLostError) -> None:
        live.remove(i)
        dropped.append({"replica": i, "device": places[i], "iteration": it + 1, "error": str(err)})
        if not live:
            raise DeviceError(f"dp_train: every replica is lost (the last, replica {i} on {places[i]}, at "
                              f"iteration {it + 1}): {err}") from err
        warnings.warn(f"dp_train: replica {i} on {places[i]} lost at iteration {it + 1} ({err}); going on "
                      f"with {len(live)} replica(s)", RuntimeWarning, stacklevel=3)

    def replica_step(i: int, sample) -> tuple[float, list]:
        model = replicas[i]
        with with_grad_tape():
            out = forward_fn(model, sample) if forward_fn is not None else _member(model, "forward")(_as_ag(sample))
            if loss_fn is None:
                loss = out
            else:
                loss = loss_fn(out, target_fn(sample) if target_fn is not None else sample)
        if not isinstance(loss, AGTensor) or loss.shape != (1, 1):
            raise GGMLError(f"dp_train: the loss must be a [1, 1] ag tensor, got {getattr(loss, 'shape', loss)!r}")
        grads = backward(loss)
        return loss.item(), [grads[p].numpy().astype(np.float64) if p in grads else None for p in params[i]]

    history = np.zeros(int(n_iter))
    for it in range(int(n_iter)):
        base = (it * n) % len(data)  # each replica keeps its own samples when others are lost
        results = []
        for i in list(live):
            try:
                results.append(on(i, lambda i=i: replica_step(i, data[(base + i) % len(data)])))
            except DeviceLostError as e:
                drop(i, it, e)
        mean = []
        for k in range(len(keys)):
            got = [r[1][k] for r in results if r[1][k] is not None]
            mean.append(sum(got) / len(results) if got else None)  # a replica without a gradient adds zero
        if math.isfinite(max_norm):
            norm = math.sqrt(sum(float(np.sum(g * g)) for g in mean if g is not None))
            if norm > max_norm:
                mean = [g * (max_norm / (norm + 1e-6)) if g is not None else None for g in mean]
        while True:  # Adam steps the first live replica; lost, the next one takes over
            if live[0] != owner:
                owner = live[0]
                opt = optimizer_adam(params[owner], lr=lr)
                warnings.warn(f"dp_train: replica {owner} on {places[owner]} holds the weights from iteration "
                              f"{it + 1} on; Adam's moments start again", RuntimeWarning, stacklevel=2)
            try:
                for p, g in zip(params[owner], mean):
                    p.grad = ag_tensor(g, device=p.device_context.spec, dtype=p.dtype) if g is not None else None
                opt.step()
                opt.zero_grad()
                break
            except DeviceLostError as e:
                drop(owner, it, e)
        for i in live[1:]:
            try:
                for p, p0 in zip(params[i], params[owner]):
                    p.data = p0.data
            except DeviceLostError as e:
                drop(i, it, e)
        history[it] = float(np.mean([r[0] for r in results]))
        if verbose and (it + 1) % int(verbose) == 0:
            print(f"dp_train: iteration {it + 1}/{n_iter}, loss {history[it]:.6f}")
    res = NamedList(params=params[owner], loss_history=history, model=replicas[owner])
    res.dropped = dropped  # an attribute, not an entry: the entries stay ggmlR's
    return res
