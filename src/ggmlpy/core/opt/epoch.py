"""ggml-opt's epoch loop (ggml_opt_epoch, with Python callbacks) and whole training run (ggml_opt_fit).

Python epoch callbacks are called from C through cffi; an exception inside one is kept, the
remaining callbacks of that call are skipped, and it is raised once ggml_opt_epoch returns."""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import numpy as np

from ...bindings import ffi, lib
from ...errors import GGMLError
from ..handles import Context, Tensor
from .. import threads
from ..sched import Scheduler
from .context import OptContext, opt_ptr
from .dataset import OptDataset
from .result import BorrowedResult, OptResult


def check_dataset(opt_ctx, dataset):
    n, ne, nl = dataset.shape
    inp = opt_ctx.inputs.ptr
    if int(inp.ne[0]) != ne or int(lib.ggml_nelements(inp)) != ne * int(inp.ne[1]):
        raise GGMLError(f"the inputs are [{int(inp.ne[0])}, {int(inp.ne[1])}]; the dataset's samples have {ne} values")
    if dataset.types[0] != inp.type:
        raise GGMLError("the dataset's data type differs from the inputs' type")
    lab = lib.ggml_opt_labels(opt_ctx.ptr)
    if (lab == ffi.NULL) != (nl == 0) or (lab != ffi.NULL and int(lib.ggml_nelements(lab)) != nl * int(inp.ne[1])):
        raise GGMLError("the dataset's labels do not fit this loss's labels tensor")
    return n, int(inp.ne[1])


def _wants_five(cb) -> bool:
    """Whether an epoch callback takes ggmlR's five arguments (train, ibatch, ibatch_max,
    t_start_us, result) rather than three."""
    try:
        params = inspect.signature(cb).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= 5


def ggml_opt_epoch(opt_ctx: OptContext, dataset: OptDataset, result_train: OptResult | None = None,
                   result_eval: OptResult | None = None, idata_split: int = -1,
                   callback_train: bool | Callable[..., object] | None = None,
                   callback_eval: bool | Callable[..., object] | None = None) -> None:
    """One pass over the dataset: samples before idata_split train (one step per batch), the
    rest are evaluated (static graphs only, as in ggml). A callback is True (ggml's progress
    bar) or a Python callable called after every batch with (train, ibatch, ibatch_max), or
    with ggmlR's (train, ibatch, ibatch_max, t_start_us, result) when it takes five arguments."""
    opt = opt_ptr(opt_ctx)
    if not opt_ctx.static:
        raise GGMLError("ggml_opt_epoch requires static graphs: make the context with ctx_compute, inputs and "
                        "outputs (or step by hand with ggml_opt_prepare_alloc, ggml_opt_alloc, ggml_opt_eval)")
    n, batch = check_dataset(opt_ctx, dataset)
    idata_split = n if int(idata_split) < 0 else int(idata_split)
    if n % batch or idata_split % batch or idata_split > n:
        raise GGMLError(f"ggml_opt_epoch: {n} samples and split {idata_split} must be multiples of the batch {batch}")
    errors = []
    keep = []

    def make(cb):
        if cb is None or cb is False:
            return ffi.NULL
        if cb is True:
            return lib.ggml_opt_epoch_callback_progress_bar

        five = _wants_five(cb)

        def trampoline(train, _ctx, _ds, res, ibatch, ibatch_max, t0):
            if errors:
                return
            try:
                if five:
                    cb(bool(train), int(ibatch), int(ibatch_max), int(t0), BorrowedResult(res))
                else:
                    cb(bool(train), int(ibatch), int(ibatch_max))
            except BaseException as e:  # noqa: BLE001  never let an exception unwind through C
                errors.append(e)
        f = ffi.callback("ggml_opt_epoch_callback", trampoline)
        keep.append(f)
        return f
    rt = result_train.ptr if result_train is not None else ffi.NULL
    re = result_eval.ptr if result_eval is not None else ffi.NULL
    opt_ctx.sched.fit_threads_to_load(opt_ctx.count_decides_results())  # for the epoch: ggml runs its batches
    lib.ggml_opt_epoch(opt, dataset._live(), rt, re, idata_split, make(callback_train), make(callback_eval))
    if errors:
        raise errors[0]


def ggml_opt_fit(sched: Scheduler, ctx_compute: Context, inputs: Tensor, outputs: Tensor, dataset: OptDataset,
                 loss_type: int | None = None, optimizer: int | None = None, nepoch: int = 1,
                 nbatch_logical: int | None = None, val_split: float = 0.0, silent: bool = False) -> None:
    """ggml's whole training run (ggml_opt_fit): shuffles, trains `nepoch` epochs with a
    validation split, prints ggml's progress bar unless silent. ggml's default optimizer
    settings (lr 1e-3); for other settings or schedules use ggml_opt_init + ggml_opt_epoch."""
    loss_type = lib.GGML_OPT_LOSS_TYPE_MEAN if loss_type is None else loss_type
    optimizer = lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW if optimizer is None else optimizer
    if loss_type not in (0, 1, 2, 3) or optimizer not in (0, 1):
        raise GGMLError("ggml_opt_fit: bad loss type or optimizer")
    n, ne, nl = dataset.shape
    inp = inputs.ptr
    b = int(inp.ne[1])
    nbatch_logical = b if nbatch_logical is None else int(nbatch_logical)
    if nbatch_logical < 1 or n % nbatch_logical or nbatch_logical % b:
        raise GGMLError(f"ggml_opt_fit: {n} samples must be a multiple of nbatch_logical {nbatch_logical}, "
                        f"itself a multiple of the inputs' batch {b}")
    if not 0 <= float(val_split) < 1 or int(nepoch) < 1:
        raise GGMLError("ggml_opt_fit: need 0 <= val_split < 1 and nepoch >= 1")
    if inp.buffer == ffi.NULL:
        raise GGMLError("ggml_opt_fit: the inputs must be allocated (ggml_backend_alloc_ctx_tensors)")
    if int(inp.ne[0]) != ne or dataset.types[0] != inp.type:
        raise GGMLError(f"ggml_opt_fit: the inputs' samples have {int(inp.ne[0])} values, the dataset's {ne}")
    needs_labels = loss_type in (lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY, lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR)
    if needs_labels != (nl > 0) or (nl and nl * b != int(lib.ggml_nelements(outputs.ptr))):
        raise GGMLError("ggml_opt_fit: the dataset's labels do not fit the outputs for this loss")
    # the whole fit on one count: all the threads where a result depends on it (threads.count_decides_results)
    sched.fit_threads_to_load(loss_type == lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY
                              or threads.count_decides_results_below(outputs.ptr))
    lib.ggml_opt_fit(sched.ptr, ctx_compute.ptr, inputs.ptr, outputs.ptr, dataset._live(), loss_type, optimizer,
                     lib.ggml_opt_get_default_optimizer_params, int(nepoch), nbatch_logical, float(val_split),
                     bool(silent))


def n_train_opt_fit(n_batches: int, v: float) -> int:
    """ggml_opt_fit's split, computed in float32 as ggml does."""
    f = np.float32(np.float32(1.0) - np.float32(v)) * np.float32(n_batches)
    return int(math.trunc(float(np.float32(f))))


__all__ = [n for n in dir() if n.startswith("ggml_opt_")]
