"""Port of ggmlR's tests/testthat/test-callbacks.R: ggml_fit's epoch loop (the low-level form,
ggml_fit(sched, ctx_compute, inputs, outputs, dataset, ...) = ggml_fit_opt), its callbacks and
learning-rate schedules.

ggmlR's callbacks are lists of functions; ggmlpy's are objects with those methods (R's
`cb$on_epoch_end` is `cb.on_epoch_end`), and ggmlR's own list form is accepted as a dict. R's
state environment is a SimpleNamespace(stop=, lr_ud=, nepoch=); its NA is None. R's data frame
history is a dict of columns. R's rnorm draws are numpy's.
"""
from types import SimpleNamespace

import numpy as np
import pytest

import ggmlpy as g

rng = np.random.default_rng(1)


class Setup:
    """make_linear_setup(): y = x %*% c(1, 2, 3, 4) with out = W x + b, on the CPU, batch 10."""

    def __init__(self, ndata=100, ne_in=4, ne_out=1, batch=10):
        self.cpu = g.ggml_backend_cpu_init()
        self.sched = g.ggml_backend_sched_new([self.cpu], parallel=False)
        self.ctx_compute = g.ggml_init_auto(4 * 1024 * 1024, no_alloc=True)
        x_in = g.ggml_new_tensor_2d(self.ctx_compute, g.GGML_TYPE_F32, ne_in, batch)
        W = g.ggml_new_tensor_2d(self.ctx_compute, g.GGML_TYPE_F32, ne_in, ne_out)
        b = g.ggml_new_tensor_1d(self.ctx_compute, g.GGML_TYPE_F32, ne_out)
        g.ggml_set_param(x_in)
        g.ggml_set_param(W)
        g.ggml_set_param(b)
        out = g.ggml_add(self.ctx_compute, g.ggml_mul_mat(self.ctx_compute, W, x_in), b)
        self.buf = g.ggml_backend_alloc_ctx_tensors(self.ctx_compute, self.cpu)
        g.ggml_backend_tensor_set_data(W, rng.normal(0, 0.1, ne_in * ne_out))
        g.ggml_backend_tensor_set_data(b, np.zeros(ne_out))
        true_w = np.array([1.0, 2, 3, 4])[:ne_in]
        X_all = rng.standard_normal((ndata, ne_in))
        y_all = X_all @ true_w
        self.dataset = g.ggml_opt_dataset_init(type_data=g.GGML_TYPE_F32, type_label=g.GGML_TYPE_F32,
                                               ne_datapoint=ne_in, ne_label=ne_out, ndata=ndata, ndata_shard=1)
        g.ggml_opt_dataset_data(self.dataset)[:] = X_all                  # R: tensor_set_data(as.numeric(t(X_all)))
        g.ggml_opt_dataset_labels(self.dataset)[:] = y_all.reshape(ndata, ne_out)
        self.inputs, self.outputs = x_in, out

    def args(self):
        return self.sched, self.ctx_compute, self.inputs, self.outputs, self.dataset

    def init_for_fit(self):
        return g.ggml_opt_init_for_fit(self.sched, g.ggml_opt_loss_type_mse(), g.ggml_opt_optimizer_type_adamw(), 1,
                                       self.ctx_compute, self.inputs, self.outputs)

    def cleanup(self):
        g.ggml_opt_dataset_free(self.dataset)
        g.ggml_backend_buffer_free(self.buf)
        g.ggml_free(self.ctx_compute)
        g.ggml_backend_sched_free(self.sched)
        g.ggml_backend_free(self.cpu)


@pytest.fixture
def s():
    setup = Setup()
    yield setup
    setup.cleanup()


def adamw(lr_ud):
    return g.ggml_opt_get_lr(lr_ud)["adamw"]


def is_na(v):
    return v is None or (isinstance(v, float) and np.isnan(v))


# -- ggml_opt_init_for_fit / ggml_opt_set_lr / ggml_opt_get_lr ------------------------------------
def test_ggml_opt_init_for_fit_returns_opt_ctx_and_lr_ud(s):
    ctx_list = g.ggml_opt_init_for_fit(sched=s.sched, loss_type=g.ggml_opt_loss_type_mse(),
                                       optimizer=g.ggml_opt_optimizer_type_adamw(), opt_period=1,
                                       ctx_compute=s.ctx_compute, inputs=s.inputs, outputs=s.outputs)
    assert "opt_ctx" in ctx_list
    assert "lr_ud" in ctx_list
    assert ctx_list["opt_ctx"] is not None
    assert ctx_list["lr_ud"] is not None
    g.ggml_opt_free(ctx_list["opt_ctx"])


def test_ggml_opt_get_lr_returns_named_numeric_vector(s):
    ctx_list = s.init_for_fit()
    lr = g.ggml_opt_get_lr(ctx_list["lr_ud"])
    assert all(isinstance(v, float) for v in lr.values())
    assert len(lr) == 2
    assert "adamw" in lr
    assert "sgd" in lr
    assert lr["adamw"] > 0
    g.ggml_opt_free(ctx_list["opt_ctx"])


def test_ggml_opt_set_lr_updates_adamw_lr(s):
    ctx_list = s.init_for_fit()
    g.ggml_opt_set_lr(ctx_list["lr_ud"], adamw_lr=0.123)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(0.123, rel=1e-6)
    g.ggml_opt_free(ctx_list["opt_ctx"])


def test_ggml_opt_set_lr_with_na_does_not_change_lr(s):
    ctx_list = s.init_for_fit()
    before = adamw(ctx_list["lr_ud"])
    g.ggml_opt_set_lr(ctx_list["lr_ud"], adamw_lr=float("nan"))
    assert adamw(ctx_list["lr_ud"]) == before
    g.ggml_opt_free(ctx_list["opt_ctx"])


# -- ggml_fit: basic run ----------------------------------------------------------------------------
def test_ggml_fit_returns_data_frame_with_correct_columns(s):
    hist = g.ggml_fit(sched=s.sched, ctx_compute=s.ctx_compute, inputs=s.inputs, outputs=s.outputs,
                      dataset=s.dataset, loss_type=g.ggml_opt_loss_type_mse(), nepoch=2, nbatch_logical=10,
                      val_split=0.0, silent=True)
    assert isinstance(hist, dict)
    for col in ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy"):
        assert col in hist
    assert len(hist["epoch"]) == 2


def test_ggml_fit_epoch_column_is_sequential(s):
    hist = g.ggml_fit(*s.args(), nepoch=3, nbatch_logical=10, silent=True)
    assert hist["epoch"] == [1, 2, 3]


def test_ggml_fit_val_loss_is_na_when_val_split_0(s):
    hist = g.ggml_fit(*s.args(), nepoch=2, nbatch_logical=10, val_split=0.0, silent=True)
    assert all(is_na(v) for v in hist["val_loss"])
    assert all(is_na(v) for v in hist["val_accuracy"])


def test_ggml_fit_val_loss_is_numeric_when_val_split_0_2(s):
    hist = g.ggml_fit(*s.args(), nepoch=2, nbatch_logical=10, val_split=0.2, silent=True)
    assert all(not is_na(v) for v in hist["val_loss"])
    assert all(np.isfinite(hist["val_loss"]))


def test_ggml_fit_train_loss_is_finite_positive(s):
    hist = g.ggml_fit(*s.args(), nepoch=3, nbatch_logical=10, silent=True)
    assert all(np.isfinite(hist["train_loss"]))
    assert all(v >= 0 for v in hist["train_loss"])


def _lr_probe(rates):
    """A callback (ggmlR's list form) that records the learning rate each epoch starts with."""
    return {"on_epoch_begin": lambda epoch, logs, state: rates.append(state.lr)}


def test_ggml_fit_with_callbacks_list_works_no_callbacks(s):
    history = g.ggml_fit(*s.args(), nepoch=2, nbatch_logical=10, callbacks=[], silent=True)
    assert len(history["train_loss"]) == 2 and all(np.isfinite(history["train_loss"]))


# -- ggml_callback_early_stopping ------------------------------------------------------------------
def test_ggml_callback_early_stopping_returns_list_with_on_epoch_end():
    cb = g.ggml_callback_early_stopping()
    assert hasattr(cb, "on_epoch_end")
    assert callable(cb.on_epoch_end)


def test_ggml_callback_early_stopping_default_args():
    cb = g.ggml_callback_early_stopping()
    assert cb.monitor == "val_loss" and cb.patience == 5 and cb.min_delta == 0 and cb.mode == "min"


def test_ggml_callback_early_stopping_sets_state_stop_after_patience():
    cb = g.ggml_callback_early_stopping(monitor="val_loss", patience=2, min_delta=0)
    state = SimpleNamespace(stop=False)
    cb.on_epoch_end(1, {"val_loss": 1.0}, state)
    assert not state.stop
    cb.on_epoch_end(2, {"val_loss": 1.0}, state)
    assert not state.stop
    cb.on_epoch_end(3, {"val_loss": 1.0}, state)
    assert state.stop


def test_ggml_callback_early_stopping_resets_wait_on_improvement():
    cb = g.ggml_callback_early_stopping(monitor="val_loss", patience=2)
    state = SimpleNamespace(stop=False)
    cb.on_epoch_end(1, {"val_loss": 1.0}, state)
    cb.on_epoch_end(2, {"val_loss": 1.0}, state)
    cb.on_epoch_end(3, {"val_loss": 0.5}, state)
    assert not state.stop
    cb.on_epoch_end(4, {"val_loss": 0.5}, state)
    assert not state.stop


def test_ggml_callback_early_stopping_mode_max_works():
    cb = g.ggml_callback_early_stopping(monitor="train_accuracy", patience=1, mode="max")
    state = SimpleNamespace(stop=False)
    cb.on_epoch_end(1, {"train_accuracy": 0.8}, state)
    cb.on_epoch_end(2, {"train_accuracy": 0.7}, state)
    assert state.stop


def test_ggml_callback_early_stopping_ignores_na_metric():
    cb = g.ggml_callback_early_stopping(monitor="val_loss", patience=1)
    state = SimpleNamespace(stop=False)
    cb.on_epoch_end(1, {"val_loss": None}, state)
    assert not state.stop


def test_ggml_callback_early_stopping_stops_ggml_fit_early(s):
    """ggmlR divergence: ggmlR's ggml_fit_opt reads the physical batch as the inputs' last of four
    dims (1 for these [4, 10] inputs), so opt_period becomes nbatch_logical (10) and the optimizer
    steps once per 100 samples: most epochs take no step, val_loss stalls, and early stopping
    fires. Here the batch is the inputs' ne[1], one AdamW step per batch of 10, and val_loss falls
    every epoch, so patience=1 never triggers; early stopping still ends the run as soon as the
    improvement is below min_delta."""
    hist = g.ggml_fit(*s.args(), nepoch=20, nbatch_logical=10, val_split=0.2, silent=True,
                      callbacks=[g.ggml_callback_early_stopping(monitor="val_loss", patience=1)])
    assert len(hist["epoch"]) == 20
    assert all(b < a for a, b in zip(hist["val_loss"], hist["val_loss"][1:]))   # it improves every epoch
    stopper = g.ggml_callback_early_stopping(monitor="val_loss", patience=1, min_delta=1.0)
    hist = g.ggml_fit(*s.args(), nepoch=20, nbatch_logical=10, val_split=0.2, silent=True, callbacks=[stopper])
    assert len(hist["epoch"]) < 20
    assert stopper.stopped_epoch == len(hist["epoch"]) == 2


# -- ggml_schedule_step_decay ------------------------------------------------------------------------
def test_ggml_schedule_step_decay_returns_list_with_on_epoch_begin():
    cb = g.ggml_schedule_step_decay()
    assert callable(getattr(cb, "on_epoch_begin", None))


def test_ggml_schedule_step_decay_reduces_lr_at_step_boundary(s):
    ctx_list = s.init_for_fit()
    initial_lr = adamw(ctx_list["lr_ud"])
    state = SimpleNamespace(stop=False, lr_ud=ctx_list["lr_ud"])
    cb = g.ggml_schedule_step_decay(step_size=2, gamma=0.5)
    cb.on_epoch_begin(1, {}, state)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(initial_lr, rel=1e-6)
    cb.on_epoch_begin(2, {}, state)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(initial_lr, rel=1e-6)
    cb.on_epoch_begin(3, {}, state)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(initial_lr * 0.5, rel=1e-6)
    g.ggml_opt_free(ctx_list["opt_ctx"])


# -- ggml_schedule_cosine_decay ----------------------------------------------------------------------
def test_ggml_schedule_cosine_decay_returns_list_with_on_epoch_begin():
    cb = g.ggml_schedule_cosine_decay()
    assert callable(getattr(cb, "on_epoch_begin", None))


def test_ggml_schedule_cosine_decay_decreases_lr_over_epochs(s):
    ctx_list = s.init_for_fit()
    state = SimpleNamespace(stop=False, lr_ud=ctx_list["lr_ud"], nepoch=10)
    cb = g.ggml_schedule_cosine_decay(eta_min=0, T_max=10)
    lrs = []
    for ep in range(1, 11):
        cb.on_epoch_begin(ep, {}, state)
        lrs.append(adamw(ctx_list["lr_ud"]))
    assert lrs[0] > lrs[9]
    assert lrs[9] >= 0
    g.ggml_opt_free(ctx_list["opt_ctx"])


def test_ggml_schedule_cosine_decay_with_eta_min_0_stays_above_eta_min(s):
    ctx_list = s.init_for_fit()
    state = SimpleNamespace(stop=False, lr_ud=ctx_list["lr_ud"], nepoch=5)
    eta_min = 1e-5
    cb = g.ggml_schedule_cosine_decay(eta_min=eta_min, T_max=5)
    for ep in range(1, 6):
        cb.on_epoch_begin(ep, {}, state)
    assert adamw(ctx_list["lr_ud"]) >= eta_min - 1e-8
    g.ggml_opt_free(ctx_list["opt_ctx"])


# -- ggml_schedule_reduce_on_plateau -----------------------------------------------------------------
def test_ggml_schedule_reduce_on_plateau_returns_list_with_on_epoch_end():
    cb = g.ggml_schedule_reduce_on_plateau()
    assert callable(getattr(cb, "on_epoch_end", None))


def test_ggml_schedule_reduce_on_plateau_reduces_lr_after_patience_epochs(s):
    ctx_list = s.init_for_fit()
    initial_lr = adamw(ctx_list["lr_ud"])
    state = SimpleNamespace(stop=False, lr_ud=ctx_list["lr_ud"])
    cb = g.ggml_schedule_reduce_on_plateau(monitor="val_loss", factor=0.5, patience=2, min_lr=1e-9)
    for ep in (1, 2, 3):
        cb.on_epoch_end(ep, {"val_loss": 1.0}, state)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(initial_lr * 0.5, rel=1e-6)
    g.ggml_opt_free(ctx_list["opt_ctx"])


def test_ggml_schedule_reduce_on_plateau_respects_min_lr_floor(s):
    ctx_list = s.init_for_fit()
    g.ggml_opt_set_lr(ctx_list["lr_ud"], adamw_lr=1e-8)
    state = SimpleNamespace(stop=False, lr_ud=ctx_list["lr_ud"])
    min_lr = 1e-7
    cb = g.ggml_schedule_reduce_on_plateau(monitor="val_loss", factor=0.1, patience=1, min_lr=min_lr)
    cb.on_epoch_end(1, {"val_loss": 1.0}, state)
    cb.on_epoch_end(2, {"val_loss": 1.0}, state)
    assert adamw(ctx_list["lr_ud"]) >= min_lr - 1e-10
    g.ggml_opt_free(ctx_list["opt_ctx"])


def test_ggml_schedule_reduce_on_plateau_resets_wait_after_reduction(s):
    ctx_list = s.init_for_fit()
    initial_lr = adamw(ctx_list["lr_ud"])
    state = SimpleNamespace(stop=False, lr_ud=ctx_list["lr_ud"])
    cb = g.ggml_schedule_reduce_on_plateau(monitor="val_loss", factor=0.5, patience=2, min_lr=1e-9)
    for ep in (1, 2, 3):
        cb.on_epoch_end(ep, {"val_loss": 1.0}, state)
    first = adamw(ctx_list["lr_ud"])
    assert first == pytest.approx(initial_lr * 0.5, rel=1e-6)
    cb.on_epoch_end(4, {"val_loss": 1.0}, state)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(first, rel=1e-8)
    cb.on_epoch_end(5, {"val_loss": 1.0}, state)
    assert adamw(ctx_list["lr_ud"]) == pytest.approx(first * 0.5, rel=1e-7)
    g.ggml_opt_free(ctx_list["opt_ctx"])


# -- ggml_fit + callbacks ------------------------------------------------------------------------------
def test_ggml_fit_with_step_decay_callback_halves_the_rate_every_two_epochs(s):
    rates = []
    g.ggml_fit(*s.args(), nepoch=4, nbatch_logical=10, silent=True,
               callbacks=[g.ggml_schedule_step_decay(step_size=2, gamma=0.5), _lr_probe(rates)])
    np.testing.assert_allclose(rates, [1e-3, 1e-3, 5e-4, 5e-4], rtol=1e-6)


def test_ggml_fit_with_cosine_decay_callback_follows_the_cosine(s):
    rates = []
    g.ggml_fit(*s.args(), nepoch=4, nbatch_logical=10, silent=True,
               callbacks=[g.ggml_schedule_cosine_decay(T_max=4), _lr_probe(rates)])
    np.testing.assert_allclose(rates, [1e-3 * (1 + np.cos(np.pi * e / 4)) / 2 for e in range(4)], rtol=1e-6)


def test_ggml_fit_with_reduce_on_plateau_callback_only_lowers_the_rate(s):
    rates = []
    history = g.ggml_fit(*s.args(), nepoch=4, nbatch_logical=10, val_split=0.2, silent=True,
                         callbacks=[g.ggml_schedule_reduce_on_plateau(patience=2), _lr_probe(rates)])
    assert len(rates) == 4 and rates[0] == pytest.approx(1e-3) and all(b <= a for a, b in zip(rates, rates[1:]))
    assert len(history["val_loss"]) == 4


def test_ggml_fit_with_multiple_callbacks_applies_each(s):
    rates, stop = [], g.ggml_callback_early_stopping(monitor="val_loss", patience=3)
    history = g.ggml_fit(*s.args(), nepoch=6, nbatch_logical=10, val_split=0.2, silent=True,
                         callbacks=[g.ggml_schedule_cosine_decay(T_max=6), stop, _lr_probe(rates)])
    n = len(history["train_loss"])  # every epoch, or up to the one early stopping ended
    assert n == 6 if stop.stopped_epoch is None else n == stop.stopped_epoch
    np.testing.assert_allclose(rates, [1e-3 * (1 + np.cos(np.pi * e / 6)) / 2 for e in range(n)], rtol=1e-6)


def test_custom_on_epoch_end_callback_receives_correct_epoch_number(s):
    observed = []
    custom_cb = {"on_epoch_end": lambda epoch, logs, state: observed.append(epoch)}
    g.ggml_fit(*s.args(), nepoch=3, nbatch_logical=10, silent=True, callbacks=[custom_cb])
    assert observed == [1, 2, 3]


def test_custom_on_epoch_begin_callback_receives_correct_epoch_number(s):
    observed = []
    custom_cb = {"on_epoch_begin": lambda epoch, logs, state: observed.append(epoch)}
    g.ggml_fit(*s.args(), nepoch=3, nbatch_logical=10, silent=True, callbacks=[custom_cb])
    assert observed == [1, 2, 3]


def test_custom_callback_logs_contain_train_loss(s):
    captured = {}

    def on_epoch_end(epoch, logs, state):
        captured[epoch] = logs
    g.ggml_fit(*s.args(), nepoch=2, nbatch_logical=10, silent=True, callbacks=[{"on_epoch_end": on_epoch_end}])
    assert len(captured) == 2
    assert "train_loss" in captured[1]
    assert np.isfinite(captured[1]["train_loss"])


def test_callback_state_stop_stops_training(s):
    def on_epoch_end(epoch, logs, state):
        if epoch >= 2:
            state.stop = True
    hist = g.ggml_fit(*s.args(), nepoch=10, nbatch_logical=10, silent=True, callbacks=[{"on_epoch_end": on_epoch_end}])
    assert len(hist["epoch"]) == 2
