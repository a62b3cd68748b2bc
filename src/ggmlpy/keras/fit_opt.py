"""ggmlR's ggml_fit_opt: ggml-opt's fit loop (core/opt/epoch.py) run epoch by epoch, so that it returns
the history and runs the Keras-like callbacks between epochs."""
from __future__ import annotations

from collections.abc import Iterable

from ..bindings import lib
from ..core.handles import Context, Tensor
from ..core.opt import (ggml_opt_dataset_shuffle, ggml_opt_epoch, ggml_opt_init, ggml_opt_result_accuracy,
                        ggml_opt_result_loss, ggml_opt_result_ndata, ggml_opt_result_reset)
from ..core.opt.dataset import OptDataset
from ..core.opt.epoch import check_dataset, n_train_opt_fit
from ..core.opt.result import OptResult
from ..core.sched import Scheduler
from ..errors import GGMLError
from .callbacks import run_callbacks


def ggml_fit_opt(sched: Scheduler, ctx_compute: Context, inputs: Tensor, outputs: Tensor, dataset: OptDataset,
                 loss_type: int | None = None, optimizer: int | None = None, nepoch: int = 10,
                 nbatch_logical: int = 32, val_split: float = 0.0, callbacks: Iterable[object] | None = (),
                 silent: bool = False, lr: float = 1e-3) -> dict[str, list]:
    """ggmlR's ggml_fit_opt: ggml_opt_fit's loop (shuffle once, shuffle the training part every
    epoch, train and validate) run epoch by epoch so that it returns the history (epoch,
    train_loss, train_accuracy, val_loss, val_accuracy: one list each, None where there is no
    validation part) and runs callbacks between epochs (objects with on_epoch_begin/end
    methods, or ggmlR's dicts of them; state.stop ends training)."""
    loss_type = lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR if loss_type is None else loss_type
    n, b = dataset.shape[0], int(inputs.ptr.ne[1])
    nbatch_logical = int(nbatch_logical)
    if nbatch_logical < 1 or n % nbatch_logical or nbatch_logical % b:
        raise GGMLError(f"ggml_fit_opt: {n} samples must be a multiple of nbatch_logical {nbatch_logical}, "
                        f"itself a multiple of the inputs' batch {b}")
    if not 0 <= float(val_split) < 1 or int(nepoch) < 1:
        raise GGMLError("ggml_fit_opt: need 0 <= val_split < 1 and nepoch >= 1")
    period = nbatch_logical // b
    idata_split = n_train_opt_fit(n // nbatch_logical, val_split) * period * b
    opt = ggml_opt_init(sched, ctx_compute, inputs, outputs, loss_type, optimizer, period, lr)
    r_train, r_val = OptResult(), OptResult()
    begin, end = run_callbacks(list(callbacks or ()), int(nepoch))
    hist = {"epoch": [], "train_loss": [], "train_accuracy": [], "val_loss": [], "val_accuracy": []}
    try:
        check_dataset(opt, dataset)
        if nbatch_logical < n:
            ggml_opt_dataset_shuffle(opt, dataset, -1)
        for epoch in range(1, int(nepoch) + 1):
            if nbatch_logical < idata_split:
                ggml_opt_dataset_shuffle(opt, dataset, idata_split)
            if begin(epoch, opt.pars):
                break
            ggml_opt_result_reset(r_train)
            ggml_opt_result_reset(r_val)
            ggml_opt_epoch(opt, dataset, r_train, r_val, idata_split, not silent, not silent)
            row = []
            for r in (r_train, r_val):
                if ggml_opt_result_ndata(r):
                    row += [ggml_opt_result_loss(r)[0], ggml_opt_result_accuracy(r)[0]]
                else:
                    row += [None, None]
            hist["epoch"].append(epoch)
            for k, v in zip(("train_loss", "train_accuracy", "val_loss", "val_accuracy"), row):
                hist[k].append(v)
            if end(epoch, tuple(row), opt.pars):
                break
    finally:
        opt.free()
        r_train.free()
        r_val.free()
    return hist
