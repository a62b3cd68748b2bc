"""Running a model's graph: prediction batches, and training on ggml's own `ggml_opt` loop.

Every call builds its ggml graph for one batch size (`KerasGraphBuilder`), uploads the weights (numpy,
the source of truth between calls) into one backend buffer, and reads trained weights back.
Samples are packed into one matrix `[ne_per_sample, N]` (several inputs side by side, plus a
sample-index column so the order ggml_opt's shuffle chose can be reported).
"""
from __future__ import annotations

import math

import numpy as np
from tqdm import tqdm

from .. import kernels
from ..core import threads
from ..core.device import Backend, blas_backend, get_backend
from ..core.rpc import check_tensor_device
from ..core.sched import Scheduler
from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..graph import CompiledGraph, GraphContext, one_thread_is_best
from . import graphsize
from .builder import F32, GRAPH_SIZE, I32, ROOM_PER_LAYER, KerasGraphBuilder


_blas = {}


def make_scheduler(backend, blas=False, graph_size=GRAPH_SIZE * 8):
    """The scheduler ggml_opt runs on. On the CPU, with `blas`, ggml's BLAS backend takes the
    products it supports (ggml's backward computes weight gradients as OUT_PROD, which ggml's
    CPU kernel runs far slower than OpenBLAS)."""
    if backend.is_cpu:
        bs = [backend]
        if blas:
            key = backend.n_threads
            if key not in _blas:
                _blas[key] = blas_backend(backend.n_threads)
            if _blas[key] is not None:
                bs = [_blas[key], backend]
    else:
        bs = [backend, get_backend("cpu")]
    return Scheduler(bs, graph_size=max(int(graph_size), GRAPH_SIZE * 8))


def compute_backend(backend, ctx):
    """The backend a graph over `ctx`'s tensors computes on: `backend`, or on the CPU a
    one-thread backend of its own when every node is small (graph.one_thread_is_best: ggml
    synchronises its threads after each node, and on a busy machine a second thread made a
    small MLP's fit more than ten times slower; docs/benchmarks.md, "Threads")."""
    if not backend.is_cpu:
        return backend
    nodes, t = [], checked_lib.ggml_get_first_tensor(ctx)
    while t != ffi.NULL:
        if t.op != checked_lib.GGML_OP_NONE:
            nodes.append(t)
        t = checked_lib.ggml_get_next_tensor(ctx, t)
    if not one_thread_is_best(nodes):
        return backend
    return Backend(checked_lib.ggml_backend_dev_init(backend.dev, ffi.NULL), backend.name).single_threaded()


def on_kernels(b, backend, *nodes) -> int:
    """On the CPU, the builder's compute tensors (in training also those ggml's backward pass made
    there) run on ggmlpy's kernels where it has faster ones (kernels.adopt): the products on the
    ag_* path's product kernel (kernels.gemm, over OpenBLAS) instead of ggml's MUL_MAT and
    OUT_PROD, one BLAS call per product in any orientation, also for a convolution's short inner
    dimension (K*K*C), which ggml's BLAS backend leaves to ggml's far slower CPU kernel; and a
    convolution's input gradient (IM2COL_BACK); and of `nodes` (tensors of other contexts: ggml_opt's
    loss), ggml's cross-entropy loss, whose result would follow the thread count. Before the graph
    is allocated. Returns how many nodes moved."""
    k = kernels.get() if backend.is_cpu else None
    return 0 if k is None else kernels.adopt(k, b.ctx) + kernels.adopt_nodes(k, nodes)


def _split_inputs(b, inp, specs, batch, extra=0):
    """Views of the packed input: one tensor per model input, in its per-sample shape."""
    xs, off = [], 0
    for shape, _ in specs:
        n = int(np.prod(shape))
        if len(specs) == 1 and extra == 0:
            v = inp
        else:
            v = b.view_rows(inp, off, n)
        xs.append(b.reshape(v, list(shape) + [batch]))
        off += n
    return xs, off


def predict_packed(model, packed: np.ndarray, batch: int, backend) -> list:
    """Forward pass (inference mode) over `packed` [N, F] in batches of `batch` (the last
    one zero-padded). Returns one numpy array [N, out_size] per model output."""
    n = packed.shape[0]
    specs = model._input_specs()
    dtype = I32 if specs[0][1] == "int32" else F32
    b = KerasGraphBuilder(training=False)
    b.kernels = kernels.get() if backend.is_cpu else None  # custom ops: CPU graphs only
    gctx = compiled = None
    try:
        inp = b.new_w([packed.shape[1], batch], dtype, record=False)

        def forward():
            xs, _ = _split_inputs(b, inp, specs, batch)
            return model._forward(b, xs, batch, {"functional": model.functional})
        outs = b.building(forward)
        size = graphsize.forward_bound(b) + 16   # every tensor built: the graph cannot overflow
        if size > graphsize.MAX_GRAPH_NODES:
            raise graphsize.too_big(size)
        gctx = GraphContext(0, n_nodes=size)  # the graph only: its tensors live in the builder's contexts
        for o in outs:
            checked_lib.ggml_set_output(o)
        gctx.expand(outs)
        b.allocate(backend)
        backend = compute_backend(backend, b.ctx)  # decided on ggml's own nodes, as for training
        on_kernels(b, backend)
        compiled = CompiledGraph(gctx.graph, backend, fallback=None if backend.is_cpu else get_backend("cpu"))
        sizes = [int(checked_lib.ggml_nelements(o)) // batch for o in outs]
        results = [np.empty((n, s), np.float32) for s in sizes]
        np_dtype = np.int32 if dtype == I32 else np.float32
        chunk = np.zeros((batch, packed.shape[1]), np_dtype)
        for start in range(0, n, batch):
            m = min(batch, n - start)
            chunk[:m] = packed[start:start + m]
            chunk[m:] = 0
            compiled.write(inp, chunk)
            compiled.compute()
            for o, r, s in zip(outs, results, sizes):
                r[start:start + m] = compiled.read(o, (batch, s))[:m]
        return results
    finally:
        if compiled is not None:
            compiled.free()
        if gctx is not None:
            gctx.free()
        b.free()


class _Progress:
    """fit's verbose display: a tqdm bar over each epoch's training batches, then one over its
    validation batches, showing the mean loss (and accuracy, where ggml_opt counts it) of the
    batches so far. It replaces ggml's own progress line, whose first batch reads "±nan"
    (an uncertainty needs two batches)."""

    def __init__(self):
        self.bar = None
        self.epoch = ""

    def batch(self, train: bool, result, ibatch: int, ibatch_max: int) -> None:
        if self.bar is None or ibatch == 1:
            self.close()
            self.bar = tqdm(total=int(ibatch_max), desc=f"{self.epoch} {'train' if train else 'val'}".strip(),
                            unit="batch", dynamic_ncols=True)
        loss, acc = _result(result)
        post = {"loss": f"{loss:.4f}"} if loss is not None else {}
        if acc is not None and math.isfinite(acc):
            post["accuracy"] = f"{acc:.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)
        if ibatch >= ibatch_max:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _result(res):
    nd = ffi.new("int64_t *")
    checked_lib.ggml_opt_result_ndata(res, nd)
    if nd[0] == 0:
        return None, None
    loss, unc = ffi.new("double *"), ffi.new("double *")
    checked_lib.ggml_opt_result_loss(res, loss, unc)
    acc = ffi.new("double *")
    checked_lib.ggml_opt_result_accuracy(res, acc, unc)
    return float(loss[0]), float(acc[0])


def train(model, packed, labels, weights, batch, n_train, n_used, epochs, shuffle_all, shuffle_train,
          opt_params, backend, loss, verbose, mask_fn, hooks, record_order, heads=None):
    """ggml_opt over `packed` rows [n_used, F] (training rows first, then validation rows).

    loss: "cross_entropy" | "mse" | "weighted_mse" | "weighted_ce" (weights [n_used] packed with
    the labels: ggml's cross-entropy backward assumes labels that sum to 1, so scaled labels
    would give a wrong gradient; "weighted_ce" builds -sum w y log softmax(z) / B itself) or
    "multi": several outputs, `heads` [(output index, "mse" | "cross_entropy", loss weight,
    columns)] with their targets side by side in `labels`; the graph's loss is
    sum_i weight_i * loss_i, each loss_i a batch mean (weighted by `weights` per sample).
    Otherwise `heads` names the one output trained (default: the last).
    Returns per-epoch train/val (loss, accuracy[, per-output dict]) and, if asked, each
    epoch's batch order."""
    specs = model._input_specs()
    dtype = I32 if specs[0][1] == "int32" else F32
    if heads is None:
        n_out = len(model._output_layers())
        heads = [(n_out - 1, "mse" if loss in ("mse", "weighted_mse") else "cross_entropy", 1.0, labels.shape[1])]
    weighted = loss in ("weighted_mse", "weighted_ce", "multi")
    if dtype == I32 and weighted:
        raise GGMLError("sample or class weights need float inputs")
    f_x = packed.shape[1]
    k = labels.shape[1]
    # the packed row: inputs, [labels, weight for weighted mse], sample index (ignored by the graph)
    cols = [packed.astype(np.float32 if dtype == F32 else np.int32)]
    if weighted:
        cols += [labels.astype(np.float32), weights.reshape(-1, 1).astype(np.float32)]
    cols.append(np.arange(n_used).reshape(-1, 1))
    data = np.ascontiguousarray(np.concatenate(cols, axis=1), dtype=np.float32 if dtype == F32 else np.int32)
    ne_dp = data.shape[1]

    b = KerasGraphBuilder(training=True)
    sched = opt = ds = r_train = r_val = progress = None
    logits_of, log_of = set(), set()
    if getattr(model, "softmax_ce", "exact") == "exact":
        ce_layers = [model._output_layers()[j] for j, kind, _, _ in heads if kind == "cross_entropy"]
        logits_of = {id(l) for l in ce_layers if _logits_safe(model, l)}
        # a softmax output other layers also read keeps its softmax: the loss takes log(p), the
        # logits of p itself (softmax(log p) = p), so the cross-entropy is still -sum y log p
        log_of = {j for j, kind, _, _ in heads if kind == "cross_entropy"
                  and getattr(model._output_layers()[j], "activation", None) == "softmax"
                  and id(model._output_layers()[j]) not in logits_of}

    def build():
        """The training graph on `inp`: (tensor handed to ggml_opt as outputs, its loss type,
        the layers' side tensors, the per-output loss tensors). Called again, after
        b.restart(), for every step of caller-built graphs."""
        ctx = {"functional": model.functional, "logits_of": logits_of}
        head_losses = []   # multi: (weight tensor in ctx_w holding the batch's loss_i, per batch lists)
        xs, _ = _split_inputs(b, inp, specs, batch, extra=1)
        outs = model._forward(b, xs, batch, ctx)
        outs = [checked_lib.ggml_log(b.ctx, o) if j in log_of else o for j, o in enumerate(outs)]
        b.check_room()
        if loss == "multi":
            out = _multi_loss(b, inp, outs, heads, f_x, k, batch, head_losses, ctx)
            loss_type = checked_lib.GGML_OPT_LOSS_TYPE_MEAN
        else:
            out = outs[heads[0][0]]
            if int(checked_lib.ggml_nelements(out)) != k * batch:
                raise GGMLError(f"y has {k} columns but the model's output has "
                                f"{int(checked_lib.ggml_nelements(out)) // batch} values per sample")
            out = b.reshape(out, [k, batch])
        for a in ctx.get("anchors", []):   # side computations (batch-norm statistics) with weight 0
            out = b.add(out, b.scale(checked_lib.ggml_sum(b.ctx, a), 0.0))
        if loss == "weighted_mse":
            y = b.view_rows(inp, f_x, k)
            w = b.reshape(b.view_rows(inp, f_x + k, 1), [1, batch])
            out = b.mul(checked_lib.ggml_sqr(b.ctx, b.sub(out, y)), w)
            loss_type = checked_lib.GGML_OPT_LOSS_TYPE_MEAN
        elif loss == "weighted_ce":
            y = b.view_rows(inp, f_x, k)
            w = b.reshape(b.view_rows(inp, f_x + k, 1), [1, batch])
            logp = checked_lib.ggml_log(b.ctx, checked_lib.ggml_soft_max(b.ctx, out))
            out = b.scale(b.mul(b.mul(logp, y), w), -float(k))   # MEAN divides by K*B
            loss_type = checked_lib.GGML_OPT_LOSS_TYPE_MEAN
        elif loss == "mse":
            loss_type = checked_lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR
        elif loss != "multi":
            loss_type = checked_lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY
        return out, loss_type, ctx, head_losses

    try:
        inp = b.new_w([ne_dp, batch], dtype, record=False)
        out, loss_type, ctx, head_losses = b.building(build)
        params_ = [t for t in b.param_tensors.values() if t.flags & checked_lib.GGML_TENSOR_FLAG_PARAM]
        if not params_:
            raise GGMLError("the model has no trainable weights (all layers are frozen)")
        adamw = opt_params.optimizer != "sgd"
        n_step = graphsize.step_graph_size(b, out, loss_type, len(params_), adamw)
        # ggml_opt's static graphs when the step fits them; else graphs built here, sized from the model
        static = graphsize.fits_static(n_step) and not FORCE_CALLER_GRAPHS
        step_size = None if static else graphsize.dynamic_size(n_step)
        b.allocate(backend)
        compute = compute_backend(backend, b.ctx)
        own_sched = compute is not backend  # a one-thread backend for a graph of small nodes: this fit's own
        sched = (make_scheduler(compute, blas=True, graph_size=2 * (step_size or GRAPH_SIZE)) if own_sched
                 else model._scheduler(graph_size=2 * (step_size or GRAPH_SIZE)))
        params = checked_lib.ggml_opt_default_params(sched.ptr, loss_type)
        if step_size is None:
            params.ctx_compute = b.ctx
            params.inputs = inp
            params.outputs = out
        params.opt_period = 1
        params.get_opt_pars = checked_lib.ggml_opt_get_constant_optimizer_params
        params.get_opt_pars_ud = opt_params.struct
        params.optimizer = (checked_lib.GGML_OPT_OPTIMIZER_TYPE_SGD if opt_params.optimizer == "sgd"
                            else checked_lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW)
        opt = checked_lib.ggml_opt_init(params)
        if step_size is None:
            # ggml_opt_init built the static graphs (forward, backward, optimizer steps) in b.ctx,
            # and the loss in a context of its own; they are allocated at the first step. Graphs
            # built per step are allocated as soon as ggml_opt builds them, so their nodes stay
            # ggml's (models past 2048 nodes, whose products are large enough for ggml's BLAS backend).
            on_kernels(b, backend, checked_lib.ggml_opt_loss(opt))
        # a fit whose results the thread count decides (ggml's own cross-entropy loss, in graphs
        # built per step or without ggmlpy's kernels) runs on all its threads, whatever the load
        planned = (threads.count_decides_results_below(checked_lib.ggml_opt_loss(opt)) if step_size is None
                   else loss_type == checked_lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY or threads.count_decides_results_below(out))
        lab = None if weighted else labels
        ds = checked_lib.ggml_opt_dataset_init(dtype, F32, ne_dp, 0 if lab is None else k, n_used, 1)
        t_data = checked_lib.ggml_opt_dataset_data(ds)
        ffi.memmove(t_data.data, ffi.from_buffer(data), data.nbytes)
        if lab is not None:
            lab = np.ascontiguousarray(lab, dtype=np.float32)
            ffi.memmove(checked_lib.ggml_opt_dataset_labels(ds).data, ffi.from_buffer(lab), lab.nbytes)
        r_train, r_val = checked_lib.ggml_opt_result_init(), checked_lib.ggml_opt_result_init()
        if shuffle_all and batch < n_used:
            checked_lib.ggml_opt_dataset_shuffle(opt, ds, -1)
        progress = _Progress() if verbose else None
        cb_train, cb_val, errors = ffi.NULL, ffi.NULL, []
        if ctx.get("bn_stats") or head_losses or progress:
            cb_train = _batch_callback(ctx.get("bn_stats", []), head_losses, progress, errors)
        if head_losses or progress:
            cb_val = cb_train
        history, orders = [], []
        for epoch in range(1, epochs + 1):
            if shuffle_train and batch < n_train:
                checked_lib.ggml_opt_dataset_shuffle(opt, ds, n_train)
            hooks[0](epoch, opt_params)
            for layer, mask in ctx.get("masks", []):
                shape = tuple(ne_shape(mask))
                m = np.ascontiguousarray(mask_fn(layer, epoch, shape), dtype=np.float32)
                if m.shape != shape:
                    raise GGMLError(f"dropout mask for {layer.name!r} has shape {m.shape}, expected {shape}")
                checked_lib.ggml_backend_tensor_set(mask, ffi.from_buffer(m), 0, m.nbytes)
            checked_lib.ggml_opt_result_reset(r_train)
            checked_lib.ggml_opt_result_reset(r_val)
            if progress is not None:
                progress.epoch = f"epoch {epoch}/{epochs}"
            for _, per_batch in head_losses:
                per_batch["train"].clear()
                per_batch["val"].clear()
            sched.fit_threads_to_load(planned)  # for the epoch: ggml runs its batches
            if step_size is None:
                checked_lib.ggml_opt_epoch(opt, ds, r_train, r_val, n_train, cb_train, cb_val)
            else:
                _epoch_caller_graphs(opt, ds, b, build, inp, step_size, r_train, r_val, n_train, n_used // batch,
                                     cb_train, cb_val)
            if errors:
                raise errors[0]
            tl, ta = _result(r_train)
            vl, va = _result(r_val)
            if loss == "weighted_ce":  # ggml_opt counts correct predictions for its own CE loss only
                ta, va = _accuracies(model, b, packed, labels, n_train, n_used, backend, heads[0][0])
            if loss == "multi":
                history.append((tl, None, vl, None, _head_logs(model, b, packed, labels, heads, head_losses,
                                                               n_train, n_used, backend)))
            else:
                history.append((tl, ta, vl, va))
            if record_order:
                orders.append(_batch_order(ds, data.shape, batch, n_used, dtype, 0 if lab is None else k))
            if hooks[1](epoch, history[-1], opt_params):
                break
        _read_back(model, b)
        return history, orders
    finally:
        if progress is not None:
            progress.close()
        for res in (r_train, r_val):
            if res is not None:
                checked_lib.ggml_opt_result_free(res)
        if ds is not None:
            checked_lib.ggml_opt_dataset_free(ds)
        if opt is not None:
            checked_lib.ggml_opt_free(opt)
        if sched is not None and sched.ptr is not None:
            if own_sched:
                sched.free()
            else:  # the model keeps it: let go of this graph
                checked_lib.ggml_backend_sched_reset(sched.ptr)
        b.free()


def _accuracies(model, b, packed, labels, n_train, n_used, backend, out_index=-1):
    """Accuracy of the weights as they stand, on the training and the validation rows."""
    _read_back(model, b)
    p = predict_packed(model, packed[:n_used], min(256, n_used), backend)[out_index]
    hit = np.argmax(p, axis=1) == np.argmax(labels[:n_used], axis=1)
    return float(hit[:n_train].mean()), (float(hit[n_train:].mean()) if n_used > n_train else None)


FORCE_CALLER_GRAPHS = False   # tests: train a small model on caller-built graphs too


def _epoch_caller_graphs(opt, ds, b, build, inp, size, r_train, r_val, idata_split, nbatches, cb_train, cb_val):
    """ggml_opt_epoch for a context without static graphs: every step builds the model's graph
    again in a fresh compute context (graphs of `size` nodes) and hands it to ggml_opt
    (ggml_opt_prepare_alloc), which adds the loss, the backward pass and the optimizer step.
    Such graphs accumulate gradients (ggml_opt keeps one accumulator per parameter) and ggml_opt
    only clears them between accumulation periods of static graphs, so each training step
    clears them first (ggml_opt_reset without the optimizer: moments and step count stay)."""
    batch = int(inp.ne[1])
    split = idata_split // batch
    t0 = checked_lib.ggml_time_us()
    for ib in range(nbatches):
        train = ib < split
        if ib == split:
            t0 = checked_lib.ggml_time_us()
        b.restart(n_tensors=size + 2 * ROOM_PER_LAYER, graph_size=size)
        out = build()[0]
        gf = checked_lib.ggml_new_graph_custom(b.ctx, size, True)
        checked_lib.ggml_build_forward_expand(gf, out)
        checked_lib.ggml_opt_prepare_alloc(opt, b.ctx, gf, inp, out)
        checked_lib.ggml_opt_alloc(opt, train)
        if train:
            checked_lib.ggml_opt_reset(opt, False)
        checked_lib.ggml_opt_dataset_get_batch(ds, inp, checked_lib.ggml_opt_labels(opt), ib)
        result = r_train if train else r_val
        checked_lib.ggml_opt_eval(opt, result)
        cb = cb_train if train else cb_val
        if cb != ffi.NULL:
            cb(train, opt, ds, result, (ib if train else ib - split) + 1, split if train else nbatches - split, t0)


def _logits_safe(model, layer) -> bool:
    """Whether an output layer may hand its logits (not its softmax) to the loss: only when
    it is applied once and nothing else reads its output."""
    if not model.functional:
        return True
    uses = [n for n in model.order if n.layer is layer]
    return len(uses) == 1 and not any(uses[0] in n.parents for n in model.order)


def _multi_loss(b, inp, outs, heads, f_x, k, batch, head_losses, ctx):
    """sum_i weight_i * loss_i over the trained outputs, as a [1, 1] tensor. loss_i is the
    batch mean of the per-sample loss (mse: the mean over the output's columns; cross-entropy:
    -sum y log softmax(z), z the logits), weighted per sample by the packed weight column.
    Each loss_i is also copied into a weight-buffer scalar (tied into the total with weight 0,
    like the batch-norm statistics) that the per-batch callback reads."""
    c = b.ctx
    w = b.reshape(b.view_rows(inp, f_x + k, 1), [1, batch])
    total, off = None, 0
    for j, kind, weight, kj in heads:
        o = outs[j]
        if int(checked_lib.ggml_nelements(o)) != kj * batch:
            raise GGMLError(f"output {j} has {int(checked_lib.ggml_nelements(o)) // batch} values per sample, y has {kj}")
        o = b.reshape(o, [kj, batch])
        y = b.view_rows(inp, f_x + off, kj)
        off += kj
        if kind == "mse":
            li = b.scale(checked_lib.ggml_sum(c, b.mul(checked_lib.ggml_sqr(c, b.sub(o, y)), w)), 1.0 / (kj * batch))
        else:
            logp = checked_lib.ggml_log(c, checked_lib.ggml_soft_max(c, o))
            li = b.scale(checked_lib.ggml_sum(c, b.mul(b.mul(logp, y), w)), -1.0 / batch)
        dst = b.new_w([1])
        ctx.setdefault("anchors", []).append(checked_lib.ggml_cpy(c, li, dst))
        head_losses.append((dst, {"train": [], "val": []}))
        term = li if weight == 1.0 else b.scale(li, weight)
        total = term if total is None else b.add(total, term)
    return b.reshape(total, [1, 1])


def _head_logs(model, b, packed, labels, heads, head_losses, n_train, n_used, backend):
    """One epoch's per-output curves: train_/val_<name>_loss (the means of the batch losses,
    as ggml_opt reports the total) and, for cross-entropy outputs when "accuracy" is a metric,
    train_/val_<name>_accuracy from the weights at the end of the epoch."""
    names = model._output_names()
    logs = {}
    for (j, kind, _, _), (_, per_batch) in zip(heads, head_losses):
        for split in ("train", "val"):
            v = per_batch[split]
            logs[f"{split}_{names[j]}_loss"] = float(np.mean(v)) if v else None
    want_acc = [h for h in heads if h[1] == "cross_entropy" and h[3] > 1]
    if want_acc and "accuracy" in (model.metrics or []):
        _read_back(model, b)
        preds = predict_packed(model, packed[:n_used], min(256, n_used), backend)
        off = 0
        for j, kind, _, kj in heads:
            if (j, kind, _, kj) in want_acc:
                hit = np.argmax(preds[j], axis=1) == np.argmax(labels[:n_used, off:off + kj], axis=1)
                logs[f"train_{names[j]}_accuracy"] = float(hit[:n_train].mean())
                logs[f"val_{names[j]}_accuracy"] = float(hit[n_train:].mean()) if n_used > n_train else None
            off += kj
    return logs


def _batch_callback(stats, head_losses, progress, errors):
    """A ggml_opt epoch callback (called after every batch): after a training batch it folds
    the batch statistics of true batch-norm layers into their running averages; after every
    batch it records each output's loss (multi-output fits) and moves the progress bar.
    Python exceptions are kept and raised after ggml_opt_epoch returns: they must not unwind
    through C."""
    def on_batch(train, opt_ctx, dataset, result, ibatch, ibatch_max, t0):
        if errors:
            return
        try:
            for dst, per_batch in head_losses:
                v = np.empty(1, np.float32)
                checked_lib.ggml_backend_tensor_get(dst, ffi.from_buffer(v), 0, v.nbytes)
                per_batch["train" if train else "val"].append(float(v[0]))
            for layer, t_mean, t_var in (stats if train else ()):
                n = int(t_mean.ne[0])
                mean, var = np.empty(n, np.float32), np.empty(n, np.float32)
                checked_lib.ggml_backend_tensor_get(t_mean, ffi.from_buffer(mean), 0, mean.nbytes)
                checked_lib.ggml_backend_tensor_get(t_var, ffi.from_buffer(var), 0, var.nbytes)
                layer.update_running(mean, var)
            if progress is not None:
                progress.batch(bool(train), result, int(ibatch), int(ibatch_max))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    return ffi.callback("ggml_opt_epoch_callback", on_batch)


def ne_shape(t):
    return [int(t.ne[i]) for i in range(max(checked_lib.ggml_n_dims(t), 1))][::-1]


def _batch_order(ds, shape, batch, n_used, dtype, k):
    """The sample order of the epoch just run, read from the index column of each batch."""
    npt = np.int32 if dtype == I32 else np.float32
    buf = np.empty((batch, shape[1]), npt)
    labels = np.empty((batch, k), np.float32) if k else None
    lp = ffi.from_buffer(labels) if k else ffi.NULL
    order = []
    for ib in range(n_used // batch):
        checked_lib.ggml_opt_dataset_get_batch_host(ds, ffi.from_buffer(buf), buf.nbytes, lp, ib)
        order += [int(v) for v in buf[:, -1]]
    return order


def _read_back(model, b) -> None:
    for layer in model._all_layers():
        for k, arr in layer.weights.items():
            t = b.param_tensors.get((id(layer), k))
            if t is not None and (t.flags & checked_lib.GGML_TENSOR_FLAG_PARAM):
                out = np.empty_like(arr)
                checked_lib.ggml_backend_tensor_get(t, ffi.from_buffer(out), 0, out.nbytes)
                check_tensor_device(t)  # never a lost RPC server's zeros as the weights
                layer.weights[k] = out
