"""ggml's training loop, `ggml_opt_*` (ggml-opt.h), under ggmlR's names.

Datasets hold samples as columns of `data [ne_datapoint, ndata]` and `labels [ne_label,
ndata]` in host memory; here they are also readable and writable as numpy `[ndata, ne]`
(samples as rows). Every argument ggml would assert on is checked first, so misuse raises
GGMLError instead of aborting the interpreter. Python epoch callbacks are called from C
through cffi; an exception inside one is kept, the remaining callbacks of that call are
skipped, and it is raised once ggml_opt_epoch returns.

The Keras-like models (ggml_fit) use exactly these functions.
"""
from __future__ import annotations

import numpy as np

from ..backend.sched import Scheduler
from ..bindings import ffi, lib
from ..core.context import Context, Tensor, wrap
from ..errors import GGMLError
from .engine import OptParams

_TYPES = {lib.GGML_TYPE_F32: np.float32, lib.GGML_TYPE_I32: np.int32}


def ggml_opt_loss_type_mean():
    """GGML_OPT_LOSS_TYPE_MEAN: the loss is the mean of the outputs."""
    return int(lib.GGML_OPT_LOSS_TYPE_MEAN)


def ggml_opt_loss_type_sum():
    """GGML_OPT_LOSS_TYPE_SUM: the loss is the sum of the outputs."""
    return int(lib.GGML_OPT_LOSS_TYPE_SUM)


def ggml_opt_loss_type_cross_entropy():
    """GGML_OPT_LOSS_TYPE_CROSS_ENTROPY: -(1/B) sum labels * log_softmax(outputs)."""
    return int(lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY)


def ggml_opt_loss_type_mse():
    """GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR: sum((outputs - labels)^2) / (B K)."""
    return int(lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR)


def ggml_opt_loss_type_weighted_mse():
    """ggmlR's patched ggml has a weighted-MSE loss type; the pinned ggml does not. ggml_fit
    builds the weighted loss in the graph instead (sample_weight with mse)."""
    raise GGMLError("GGML_OPT_LOSS_TYPE_WEIGHTED_MSE exists only in ggmlR's patched ggml; use "
                    "ggml_fit(sample_weight=...) with loss='mse'")


def ggml_opt_optimizer_type_adamw():
    """GGML_OPT_OPTIMIZER_TYPE_ADAMW."""
    return int(lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW)


def ggml_opt_optimizer_type_sgd():
    """GGML_OPT_OPTIMIZER_TYPE_SGD."""
    return int(lib.GGML_OPT_OPTIMIZER_TYPE_SGD)


def ggml_opt_optimizer_name(optimizer: int) -> str:
    """"adamw" or "sgd"."""
    if optimizer not in (lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW, lib.GGML_OPT_OPTIMIZER_TYPE_SGD):
        raise GGMLError(f"unknown optimizer type {optimizer}")
    return ffi.string(lib.ggml_opt_optimizer_name(optimizer)).decode()


# -- datasets ------------------------------------------------------------------------------------------
class OptDataset:
    """A ggml_opt dataset (freed by ggml_opt_dataset_free or garbage collection)."""

    ptr = None

    def __init__(self, type_data, type_label, ne_datapoint, ne_label, ndata, ndata_shard):
        for name, v, lo in (("ne_datapoint", ne_datapoint, 1), ("ne_label", ne_label, 0), ("ndata", ndata, 1),
                            ("ndata_shard", ndata_shard, 1)):
            if int(v) < lo:
                raise GGMLError(f"ggml_opt_dataset_init: {name} must be >= {lo}, got {v}")
        if int(ndata) % int(ndata_shard):
            raise GGMLError("ggml_opt_dataset_init: ndata must be a multiple of ndata_shard")
        if type_data not in _TYPES or type_label not in _TYPES:
            raise GGMLError("ggml_opt_dataset_init: types must be GGML_TYPE_F32 or GGML_TYPE_I32")
        self.ptr = lib.ggml_opt_dataset_init(type_data, type_label, int(ne_datapoint), int(ne_label), int(ndata),
                                             int(ndata_shard))
        self.shape = (int(ndata), int(ne_datapoint), int(ne_label))
        self.types = (type_data, type_label)
        self.shard = int(ndata_shard)

    def _live(self):
        if self.ptr is None:
            raise GGMLError("the dataset was freed")
        return self.ptr

    def _view(self, t, ne, dtype):
        buf = ffi.buffer(t.data, self.shape[0] * ne * np.dtype(dtype).itemsize)
        return np.frombuffer(buf, dtype=dtype).reshape(self.shape[0], ne)

    def free(self):
        if self.ptr is not None:
            lib.ggml_opt_dataset_free(self.ptr)
            self.ptr = None

    __del__ = free


def ggml_opt_dataset_init(type_data, type_label, ne_datapoint, ne_label, ndata, ndata_shard=1):
    """A dataset of `ndata` samples of `ne_datapoint` values and `ne_label` labels."""
    return OptDataset(type_data, type_label, ne_datapoint, ne_label, ndata, ndata_shard)


def ggml_opt_dataset_free(dataset: OptDataset) -> None:
    """Free the dataset now."""
    dataset.free()


def ggml_opt_dataset_ndata(dataset: OptDataset) -> int:
    """Number of samples."""
    return int(lib.ggml_opt_dataset_ndata(dataset._live()))


def ggml_opt_dataset_data(dataset: OptDataset) -> np.ndarray:
    """The data as a writable numpy view [ndata, ne_datapoint] (samples as rows)."""
    return dataset._view(lib.ggml_opt_dataset_data(dataset._live()), dataset.shape[1], _TYPES[dataset.types[0]])


def ggml_opt_dataset_labels(dataset: OptDataset) -> np.ndarray:
    """The labels as a writable numpy view [ndata, ne_label]."""
    if dataset.shape[2] == 0:
        raise GGMLError("this dataset has no labels (ne_label = 0)")
    return dataset._view(lib.ggml_opt_dataset_labels(dataset._live()), dataset.shape[2], _TYPES[dataset.types[1]])


def ggml_opt_dataset_shuffle(opt_ctx, dataset: OptDataset, idata=-1) -> None:
    """Shuffle the first `idata` samples (all for -1) with the optimizer context's RNG."""
    n = dataset.shape[0]
    idata = int(idata)
    if idata > n or (idata >= 0 and idata % dataset.shard):
        raise GGMLError(f"ggml_opt_dataset_shuffle: idata must be -1 or a multiple of {dataset.shard} <= {n}")
    lib.ggml_opt_dataset_shuffle(_opt(opt_ctx), dataset._live(), idata)


def ggml_opt_dataset_get_batch(dataset: OptDataset, batch_size: int, ibatch: int):
    """Batch `ibatch` of `batch_size` samples in the current (shuffled) order: (data, labels)
    as numpy [batch_size, ne] (labels None when the dataset has none)."""
    n, ne, nl = dataset.shape
    batch_size, ibatch = int(batch_size), int(ibatch)
    if batch_size < 1 or batch_size % dataset.shard or ibatch < 0 or (ibatch + 1) * batch_size > n:
        raise GGMLError(f"ggml_opt_dataset_get_batch: batch {ibatch} of {batch_size} is outside the {n} samples")
    data = np.empty((batch_size, ne), _TYPES[dataset.types[0]])
    labels = np.empty((batch_size, nl), _TYPES[dataset.types[1]]) if nl else None
    lib.ggml_opt_dataset_get_batch_host(dataset._live(), ffi.from_buffer(data), data.nbytes,
                                        ffi.from_buffer(labels) if nl else ffi.NULL, ibatch)
    return data, labels


# -- results ------------------------------------------------------------------------------------------
class OptResult:
    """Loss, accuracy and predictions accumulated over batches."""

    ptr = None

    def __init__(self):
        self.ptr = lib.ggml_opt_result_init()

    def free(self):
        if self.ptr is not None:
            lib.ggml_opt_result_free(self.ptr)
            self.ptr = None

    __del__ = free


def ggml_opt_result_init():
    """A new, empty result."""
    return OptResult()


def ggml_opt_result_free(result: OptResult) -> None:
    """Free the result now."""
    result.free()


def ggml_opt_result_reset(result: OptResult) -> None:
    """Forget every batch."""
    lib.ggml_opt_result_reset(result.ptr)


def ggml_opt_result_ndata(result: OptResult) -> int:
    """Samples seen."""
    v = ffi.new("int64_t *")
    lib.ggml_opt_result_ndata(result.ptr, v)
    return int(v[0])


def ggml_opt_result_loss(result: OptResult):
    """(mean loss, its uncertainty)."""
    a, b = ffi.new("double *"), ffi.new("double *")
    lib.ggml_opt_result_loss(result.ptr, a, b)
    return float(a[0]), float(b[0])


def ggml_opt_result_accuracy(result: OptResult):
    """(accuracy, its uncertainty); NaN without a cross-entropy loss."""
    a, b = ffi.new("double *"), ffi.new("double *")
    lib.ggml_opt_result_accuracy(result.ptr, a, b)
    return float(a[0]), float(b[0])


def ggml_opt_result_pred(result: OptResult) -> np.ndarray:
    """The predicted class (0-based argmax) of every sample seen (cross-entropy only)."""
    n = ggml_opt_result_ndata(result)
    out = np.zeros(n, np.int32)
    if n:
        lib.ggml_opt_result_pred(result.ptr, ffi.cast("int32_t *", ffi.from_buffer(out)))
    return out


# -- optimizer contexts ------------------------------------------------------------------------------
class OptContext:
    """A ggml_opt context with static graphs over (inputs, outputs) in ctx_compute."""

    def __init__(self, sched: Scheduler, ctx_compute: Context, inputs: Tensor, outputs: Tensor, loss_type: int,
                 optimizer: int, opt_period=1, lr=1e-3, build_type=None):
        for t, what in ((inputs, "inputs"), (outputs, "outputs")):
            if not isinstance(t, Tensor):
                raise GGMLError(f"ggml_opt_init: {what} must be a tensor")
        if inputs.ptr.buffer == ffi.NULL and inputs.ptr.data == ffi.NULL:
            raise GGMLError("ggml_opt_init: with static graphs the inputs must already be allocated "
                            "(ggml_backend_alloc_ctx_tensors on their context)")
        if loss_type not in (0, 1, 2, 3) or optimizer not in (0, 1) or int(opt_period) < 1:
            raise GGMLError("ggml_opt_init: bad loss type, optimizer or opt_period")
        if lib.ggml_n_dims(outputs.ptr) > 2:
            raise GGMLError("ggml_opt_init: outputs must be [values, batch]")
        self.sched, self.ctx, self.inputs, self.outputs = sched, ctx_compute, inputs, outputs
        self.pars = OptParams("sgd" if optimizer == lib.GGML_OPT_OPTIMIZER_TYPE_SGD else "adamw", lr)
        p = lib.ggml_opt_default_params(sched.ptr, loss_type)
        p.ctx_compute = ctx_compute.ptr
        p.inputs, p.outputs = inputs.ptr, outputs.ptr
        p.opt_period = int(opt_period)
        p.get_opt_pars = lib.ggml_opt_get_constant_optimizer_params
        p.get_opt_pars_ud = self.pars.struct
        p.optimizer = optimizer
        if build_type is not None:
            p.build_type = build_type
        self.ptr = lib.ggml_opt_init(p)

    def free(self):
        if getattr(self, "ptr", None) is not None:
            lib.ggml_opt_free(self.ptr)
            self.ptr = None

    __del__ = free


def _opt(o):
    if not isinstance(o, OptContext) or o.ptr is None:
        raise GGMLError("expected a live ggml_opt context (ggml_opt_init)")
    return o.ptr


def ggml_opt_init(sched, ctx_compute, inputs, outputs, loss_type=None, optimizer=None, opt_period=1, lr=1e-3):
    """An optimizer context with static graphs (ggml_opt_init with ctx_compute set)."""
    loss_type = lib.GGML_OPT_LOSS_TYPE_MEAN if loss_type is None else loss_type
    optimizer = lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW if optimizer is None else optimizer
    return OptContext(sched, ctx_compute, inputs, outputs, loss_type, optimizer, opt_period, lr)


def ggml_opt_free(opt_ctx: OptContext) -> None:
    """Free the context now."""
    opt_ctx.free()


def ggml_opt_reset(opt_ctx: OptContext, optimizer: bool = True) -> None:
    """Zero the gradients (and with optimizer=True the Adam moments and step counter)."""
    lib.ggml_opt_reset(_opt(opt_ctx), bool(optimizer))


def ggml_opt_static_graphs(opt_ctx: OptContext) -> bool:
    """True: the graphs were built once, at init."""
    return bool(lib.ggml_opt_static_graphs(_opt(opt_ctx)))


def ggml_opt_context_optimizer_type(opt_ctx: OptContext) -> int:
    """The optimizer type of the context."""
    return int(lib.ggml_opt_context_optimizer_type(_opt(opt_ctx)))


def ggml_opt_get_lr(opt_ctx: OptContext) -> float:
    """The current learning rate."""
    return opt_ctx.pars.lr


def ggml_opt_set_lr(opt_ctx: OptContext, lr: float) -> None:
    """Set the learning rate (used from the next optimizer step)."""
    opt_ctx.pars.lr = float(lr)


def _tensor_of(opt_ctx, fn):
    p = fn(_opt(opt_ctx))
    return None if p == ffi.NULL else wrap(p, opt_ctx.ctx)


def ggml_opt_inputs(opt_ctx):
    """The inputs tensor."""
    return _tensor_of(opt_ctx, lib.ggml_opt_inputs)


def ggml_opt_outputs(opt_ctx):
    """The outputs tensor."""
    return _tensor_of(opt_ctx, lib.ggml_opt_outputs)


def ggml_opt_labels(opt_ctx):
    """The labels tensor (None for mean/sum losses)."""
    return _tensor_of(opt_ctx, lib.ggml_opt_labels)


def ggml_opt_loss(opt_ctx):
    """The scalar loss tensor."""
    return _tensor_of(opt_ctx, lib.ggml_opt_loss)


def ggml_opt_pred(opt_ctx):
    """The argmax tensor (cross-entropy only)."""
    return _tensor_of(opt_ctx, lib.ggml_opt_pred)


def ggml_opt_ncorrect(opt_ctx):
    """The count of correct predictions (cross-entropy only)."""
    return _tensor_of(opt_ctx, lib.ggml_opt_ncorrect)


def _check_dataset(opt_ctx, dataset):
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


def ggml_opt_epoch(opt_ctx, dataset, result_train=None, result_eval=None, idata_split=-1,
                   callback_train=None, callback_eval=None):
    """One pass over the dataset: samples before idata_split train (one step per batch), the
    rest are evaluated. A callback is True (ggml's progress bar) or a Python callable
    f(train, ibatch, ibatch_max) called after every batch."""
    opt = _opt(opt_ctx)
    n, batch = _check_dataset(opt_ctx, dataset)
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

        def trampoline(train, _ctx, _ds, _res, ibatch, ibatch_max, _t0):
            if errors:
                return
            try:
                cb(bool(train), int(ibatch), int(ibatch_max))
            except BaseException as e:  # noqa: BLE001  never let an exception unwind through C
                errors.append(e)
        f = ffi.callback("ggml_opt_epoch_callback", trampoline)
        keep.append(f)
        return f
    rt = result_train.ptr if result_train is not None else ffi.NULL
    re = result_eval.ptr if result_eval is not None else ffi.NULL
    lib.ggml_opt_epoch(opt, dataset._live(), rt, re, idata_split, make(callback_train), make(callback_eval))
    if errors:
        raise errors[0]


def ggml_opt_fit(sched, ctx_compute, inputs, outputs, dataset, loss_type=None, optimizer=None, nepoch=1,
                 nbatch_logical=None, val_split=0.0, silent=False):
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
    lib.ggml_opt_fit(sched.ptr, ctx_compute.ptr, inputs.ptr, outputs.ptr, dataset._live(), loss_type, optimizer,
                     lib.ggml_opt_get_default_optimizer_params, int(nepoch), nbatch_logical, float(val_split),
                     bool(silent))


def ggml_opt_default_params(sched=None, loss_type=None) -> dict:
    """ggml's defaults for ggml_opt_init: loss type, build type (optimizer step), opt_period 1,
    AdamW, and the optimizer settings (lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay)."""
    return {"loss_type": lib.GGML_OPT_LOSS_TYPE_MEAN if loss_type is None else int(loss_type),
            "build_type": int(lib.GGML_OPT_BUILD_TYPE_OPT), "opt_period": 1,
            "optimizer": int(lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW),
            "adamw": {"alpha": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.0},
            "sgd": {"alpha": 1e-3, "wd": 0.0}}


def ggml_opt_init_for_fit(sched, loss_type, optimizer=None, opt_period=1, ctx_compute=None, inputs=None,
                          outputs=None, lr=1e-3):
    """ggmlR's ggml_opt_init_for_fit: an optimizer context over (inputs, outputs) in ctx_compute."""
    if ctx_compute is None or inputs is None or outputs is None:
        raise GGMLError("ggml_opt_init_for_fit: ggmlpy's optimizer contexts use static graphs: give "
                        "ctx_compute, inputs (allocated) and outputs")
    return ggml_opt_init(sched, ctx_compute, inputs, outputs, loss_type, optimizer, opt_period, lr)


def ggml_opt_prepare_alloc(opt_ctx, ctx_compute=None, gf=None, inputs=None, outputs=None):
    """Only for contexts without static graphs, which ggmlpy does not create."""
    raise GGMLError("ggml_opt_prepare_alloc is for contexts without static graphs; ggmlpy's "
                    "ggml_opt_init always builds static graphs")


def ggml_opt_dataset_weights(dataset):
    """Per-sample weights exist only in ggmlR's patched ggml; use ggml_fit(sample_weight=...)."""
    raise GGMLError("ggml_opt_dataset_weights exists only in ggmlR's patched ggml; "
                    "use ggml_fit(sample_weight=...)")


def ggml_opt_alloc(opt_ctx, backward: bool = True) -> None:
    """Allocate the graph for the next ggml_opt_eval (backward: a training step)."""
    opt = _opt(opt_ctx)
    if getattr(opt_ctx, "eval_ready", False):
        raise GGMLError("ggml_opt_alloc: the previous allocation was not evaluated (ggml_opt_eval)")
    lib.ggml_opt_alloc(opt, bool(backward))
    opt_ctx.eval_ready = True


def ggml_opt_eval(opt_ctx, result=None) -> None:
    """Run the allocated graph on the current inputs (one optimizer step after a backward alloc)."""
    opt = _opt(opt_ctx)
    if not getattr(opt_ctx, "eval_ready", False):
        raise GGMLError("ggml_opt_eval: call ggml_opt_alloc first")
    lib.ggml_opt_eval(opt, result.ptr if result is not None else ffi.NULL)
    opt_ctx.eval_ready = False


def ggml_opt_grad_acc(opt_ctx, node):
    """The gradient accumulator of a forward-graph node (None when it has none)."""
    p = lib.ggml_opt_grad_acc(_opt(opt_ctx), node.ptr)
    return None if p == ffi.NULL else wrap(p, opt_ctx.ctx)


def ggml_fit_opt(sched, ctx_compute, inputs, outputs, dataset, loss_type=None, optimizer=None, nepoch=10,
                 nbatch_logical=32, val_split=0.0, callbacks=(), silent=False, lr=1e-3):
    """ggmlR's ggml_fit_opt: ggml_opt_fit's loop (shuffle once, shuffle the training part every
    epoch, train and validate) run epoch by epoch so that it returns the history
    (train_loss, train_accuracy, val_loss, val_accuracy) and runs callbacks between epochs."""
    from .callbacks import run_callbacks
    loss_type = lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR if loss_type is None else loss_type
    n, b = dataset.shape[0], int(inputs.ptr.ne[1])
    nbatch_logical = int(nbatch_logical)
    if nbatch_logical < 1 or n % nbatch_logical or nbatch_logical % b:
        raise GGMLError(f"ggml_fit_opt: {n} samples must be a multiple of nbatch_logical {nbatch_logical}, "
                        f"itself a multiple of the inputs' batch {b}")
    if not 0 <= float(val_split) < 1 or int(nepoch) < 1:
        raise GGMLError("ggml_fit_opt: need 0 <= val_split < 1 and nepoch >= 1")
    period = nbatch_logical // b
    from .engine import n_train_opt_fit
    idata_split = n_train_opt_fit(n // nbatch_logical, val_split) * period * b
    opt = ggml_opt_init(sched, ctx_compute, inputs, outputs, loss_type, optimizer, period, lr)
    r_train, r_val = OptResult(), OptResult()
    begin, end = run_callbacks(list(callbacks or ()), int(nepoch))
    hist = {"train_loss": [], "train_accuracy": [], "val_loss": [], "val_accuracy": []}
    try:
        _check_dataset(opt, dataset)
        if nbatch_logical < n:
            ggml_opt_dataset_shuffle(opt, dataset, -1)
        for epoch in range(1, int(nepoch) + 1):
            if nbatch_logical < idata_split:
                ggml_opt_dataset_shuffle(opt, dataset, idata_split)
            begin(epoch, opt.pars)
            ggml_opt_result_reset(r_train)
            ggml_opt_result_reset(r_val)
            ggml_opt_epoch(opt, dataset, r_train, r_val, idata_split, not silent, not silent)
            row = []
            for r in (r_train, r_val):
                if ggml_opt_result_ndata(r):
                    row += [ggml_opt_result_loss(r)[0], ggml_opt_result_accuracy(r)[0]]
                else:
                    row += [None, None]
            for k, v in zip(("train_loss", "train_accuracy", "val_loss", "val_accuracy"), row):
                hist[k].append(v)
            if end(epoch, tuple(row), opt.pars):
                break
    finally:
        opt.free()
        r_train.free()
        r_val.free()
    return hist


__all__ = [n for n in dir() if n.startswith("ggml_opt_")] + ["ggml_fit_opt"]
