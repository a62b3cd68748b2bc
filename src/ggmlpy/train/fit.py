"""ag_fit: the training loop (tape, backward, clipping, optimizer step), with a progress bar."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from tqdm import tqdm

from ..autograd.engine import backward
from ..autograd.graph_mode import ag_compile
from ..autograd.tape import no_grad, with_grad_tape
from ..errors import GGMLError
from ..nn.module import ag_eval, ag_train
from ..optim.optimizers import Optimizer, clip_grad_norm
from ..tensor import AGTensor
from .history import FitHistory

Model = Callable[[AGTensor], AGTensor]          # a layer, or any function of the input batch
LossFn = Callable[[AGTensor, AGTensor], AGTensor]  # (prediction, target) -> [1, 1] loss
Batches = Iterable[tuple[AGTensor, AGTensor]]      # (x, y) batches: an ag_dataloader


def _set_training(model, mode: bool) -> None:
    if hasattr(model, "set_training"):  # a plain function as the model has no modes
        (ag_train if mode else ag_eval)(model)


def ag_evaluate(model: Model, loss_fn: LossFn, loader: Batches) -> float:
    """Mean loss over `loader` in eval mode, without recording (per sample, so a short last batch
    weighs what it holds). The model's training flag is restored afterwards."""
    was_training = getattr(model, "training", None)
    _set_training(model, False)
    total, count = 0.0, 0
    try:
        with no_grad():
            for xb, yb in loader:
                total += loss_fn(model(xb), yb).item() * xb.ncol
                count += xb.ncol
    finally:
        if was_training is not None:
            _set_training(model, was_training)
    if count == 0:
        raise GGMLError("ag_evaluate: the loader yielded no batch")
    return total / count


def ag_fit(model: Model, loss_fn: LossFn, optimizer: Optimizer, loader: Batches, epochs: int,
           val_loader: Batches | None = None, callbacks: Sequence = (), progress: bool = True,
           clip_grad: float | None = None, compile: bool | str = "auto",
           memory_budget: int | None = None) -> FitHistory:
    """Train `model` for `epochs` passes over `loader`; return the history.

    Per batch: `with with_grad_tape(): loss = loss_fn(model(xb), yb)`, `backward`,
    optional `clip_grad_norm(optimizer.params, grads, clip_grad)`, `optimizer.step`,
    `optimizer.zero_grad`. The model is in training mode (ag_train) while training
    and in eval mode (ag_eval) for validation; it is left in the mode it had.

    `compile`: "auto" runs that step as one ggml graph (ag_compile: the same numbers,
    faster; clip_grad is clipped inside the graph; dropout masks are drawn each step; ag_checkpoint
    segments are recomputed in the graph) where it can be one: no batch norm in training mode (its
    running statistics change every step), no values read on the host inside the model; other
    steps run eagerly. True insists (a GGMLError says why it cannot), False is always eager.
    `memory_budget` (bytes, compiled steps only): ag_compile plans the recomputation so that the
    step's compute buffer fits.

    History (a dict, whose `.plot(path)` saves the curves as a PNG): "loss" (per epoch, the
    per-sample mean of the training batches' losses), "val_loss" (with a val_loader), "lr" (the
    optimizer's lr during the epoch) and "time" (seconds per epoch, validation included). A callback's
    `on_epoch_end(epoch, history)` returning True stops training after that epoch."""
    if int(epochs) != epochs or epochs < 0:
        raise GGMLError(f"ag_fit: epochs must be a non-negative integer, got {epochs!r}")
    n_batches = len(loader)
    if n_batches == 0 and epochs:
        raise GGMLError("ag_fit: the loader yields no batch (fewer samples than batch_size with drop_last?)")
    history = FitHistory(loss=[], lr=[], time=[])
    if val_loader is not None:
        history["val_loss"] = []
    if memory_budget is not None and compile is False:
        raise GGMLError("ag_fit: memory_budget plans a compiled step's memory; it needs compile=True or 'auto'")
    step = _Steps(model, loss_fn, optimizer, clip_grad, compile, memory_budget)
    was_training = getattr(model, "training", True)
    bar = tqdm(total=int(epochs) * n_batches, disable=not progress, unit="batch", dynamic_ncols=True)
    try:
        for epoch in range(1, int(epochs) + 1):
            bar.set_description(f"epoch {epoch}/{epochs}")
            t0 = time.perf_counter()
            lr = float(optimizer.lr)
            train_loss = _train_epoch(model, step, loader, bar, t0)
            history["loss"].append(train_loss)
            history["lr"].append(lr)
            post = {"loss": f"{train_loss:.4f}"}
            if val_loader is not None:
                history["val_loss"].append(ag_evaluate(model, loss_fn, val_loader))
                post["val_loss"] = f"{history['val_loss'][-1]:.4f}"
            history["time"].append(time.perf_counter() - t0)
            bar.set_postfix(post)
            stop = False
            for cb in callbacks:
                stop = bool(cb.on_epoch_end(epoch, history)) or stop  # every callback sees every epoch
            if stop:
                break
    finally:
        bar.close()
        _set_training(model, was_training)
    return history


class _Steps:
    """One training step per batch, compiled (see ag_fit's `compile`) or eager; the choice is
    made at the first batch of each input shape, in training mode."""

    def __init__(self, model, loss_fn, optimizer, clip_grad, compile, memory_budget=None):
        if compile not in (True, False, "auto"):
            raise GGMLError(f"ag_fit: compile must be True, False or 'auto', got {compile!r}")
        self.model, self.loss_fn, self.optimizer, self.clip_grad = model, loss_fn, optimizer, clip_grad
        self.required = compile is True or memory_budget is not None  # a budget is not silently dropped
        self.memory_budget = memory_budget
        self.compiled = None if compile else False  # None: not tried yet

    def __call__(self, xb, yb) -> float:
        if self.compiled is not False and self._compiles(xb, yb):
            return self.compiled(xb, yb)
        self.compiled = False
        return self._eager(xb, yb)

    def _compiles(self, xb, yb) -> bool:
        try:  # a refusal changes nothing (ag_compile puts back what a traced dropout drew)
            if self.compiled is None:
                self.compiled = ag_compile(lambda x, y: self.loss_fn(self.model(x), y), [xb, yb],
                                           optimizer=self.optimizer, clip_grad=self.clip_grad,
                                           memory_budget=self.memory_budget)
            else:
                self.compiled.plan_for([xb, yb])
        except GGMLError:
            if self.required:
                raise
            return False
        return True

    def _eager(self, xb, yb) -> float:
        with with_grad_tape():
            loss = self.loss_fn(self.model(xb), yb)
        grads = backward(loss)
        if self.clip_grad is not None:
            clip_grad_norm(self.optimizer.params, grads, self.clip_grad)
        self.optimizer.step(grads)
        self.optimizer.zero_grad()
        return loss.item()  # the only host read per batch


def _train_epoch(model, step, loader, bar, t0) -> float:
    _set_training(model, True)
    total, count = 0.0, 0
    for xb, yb in loader:
        value = step(xb, yb)
        total += value * xb.ncol
        count += xb.ncol
        bar.update(1)
        if not bar.disable:
            bar.set_postfix(loss=f"{total / count:.4f}", samples_s=f"{count / (time.perf_counter() - t0):.0f}",
                            refresh=False)
    return total / count
