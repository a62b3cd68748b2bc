"""Threads get correct results (PyTorch's contract): independent eager work in several threads
gives what it gives in one; tapes, grad mode and forward-AD levels are per thread; a thread pool
serves predictions while another thread trains; misuse raises.

Before the per-thread pools and executors, the audit measured wrong values in 47 of 240 calls at
256x256 with 2 threads, and 8-29 per 3 200 calls at 64x64; heap corruption in 1-3 runs of 5 for
tapes in 4 threads. The repetitions below make such rates fail with certainty.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ggmlpy as g

OPS = {
    "add": (lambda a, b: g.ag_add(a, b), lambda a, b: a + b),
    "scale": (lambda a, b: g.ag_scale(a, 1.5), lambda a, b: a * 1.5),
    "matmul": (lambda a, b: g.ag_matmul(a, b), lambda a, b: a @ b),
    "mul": (lambda a, b: g.ag_mul(a, b), lambda a, b: a * b),
    "sigmoid": (lambda a, b: g.ag_sigmoid(a), lambda a, b: 1 / (1 + np.exp(-a))),
    "sum": (lambda a, b: g.ag_sum(a), lambda a, b: np.array([[a.sum()]])),
}


def _in_threads(n, fn, *args):
    """Run fn(i, *args) in n threads started together; re-raise the first failure."""
    barrier, errors = threading.Barrier(n), []

    def body(i):
        try:
            barrier.wait()
            fn(i, *args)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("n_threads", [2, 4, 8])
@pytest.mark.parametrize("size", [64, 256])
def test_eager_ops_in_threads_match_numpy(n_threads, size):
    reps = max(4, 96 // n_threads) if size == 256 else max(25, 400 // n_threads)
    wrong = []

    def work(i):
        rng = np.random.default_rng(i)
        for k in range(reps):
            A, B = rng.normal(size=(size, size)), rng.normal(size=(size, size))
            a, b = g.ag_tensor(A), g.ag_tensor(B)
            for name, (op, ref) in OPS.items():
                got, want = op(a, b).numpy(), ref(A.astype(np.float32), B.astype(np.float32))
                if not np.allclose(got, want, rtol=1e-4, atol=1e-3 * (size if name in ("matmul", "sum") else 1)):
                    wrong.append((i, k, name))
    _in_threads(n_threads, work)
    assert not wrong, f"{len(wrong)} wrong results, first {wrong[:5]}"


@pytest.mark.parametrize("n_threads", [2, 4])
def test_eager_numpy_in_threads_matches_numpy(n_threads):
    wrong = []

    def work(i):
        rng = np.random.default_rng(100 + i)
        for _ in range(800):
            x, y = rng.normal(size=(64, 64)).astype(np.float32), rng.normal(size=(64, 64)).astype(np.float32)
            if not np.array_equal(g.eager_numpy.add(x, y), x + y):
                wrong.append(i)
    _in_threads(n_threads, work)
    assert not wrong


def _grads_of_mlp(seed):
    rng = np.random.default_rng(seed)
    W1, W2 = g.ag_param(rng.normal(size=(32, 16))), g.ag_param(rng.normal(size=(4, 32)))
    x, y = g.ag_tensor(rng.normal(size=(16, 8))), g.ag_tensor(rng.normal(size=(4, 8)))
    with g.with_grad_tape():
        loss = g.ag_mse_loss(g.ag_matmul(W2, g.ag_tanh(g.ag_matmul(W1, x))), y)
    grads = g.backward(loss)
    return loss.numpy(), grads[W1].numpy(), grads[W2].numpy()


def test_tapes_and_backward_in_threads_match_one_thread():
    seeds = range(4)
    want = {s: _grads_of_mlp(s) for s in seeds}
    got, lock = {}, threading.Lock()

    def work(i):
        for _ in range(30):
            res = _grads_of_mlp(i)
            with lock:
                got.setdefault(i, []).append(res)
    _in_threads(4, work)
    for s in seeds:
        for res in got[s]:
            for a, b in zip(res, want[s]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_one_threads_tape_does_not_record_or_reset_anothers():
    x = g.ag_param(np.ones((3, 3)))
    started, done = threading.Event(), threading.Event()
    other = {}

    def other_thread():
        started.wait()
        other["y"] = g.ag_relu(x)  # not under a tape in this thread
        with g.with_grad_tape():  # resets this thread's pool only
            pass
        done.set()
    t = threading.Thread(target=other_thread)
    t.start()
    with g.with_grad_tape():
        h = g.ag_scale(x, 2.0)
        started.set()
        done.wait(60)
        loss = g.ag_sum(h)
    t.join()
    assert other["y"].requires_grad is False
    grads = g.backward(loss)
    np.testing.assert_array_equal(grads[x].numpy(), 2.0)
    np.testing.assert_array_equal(h.numpy(), 2.0)


def test_every_autograd_mode_is_the_calling_threads():
    """runtime/autograd_state.py is the one place of autograd's per-thread modes, and states them:
    each field is named in its docstring, and every mode opened in one thread leaves another's at
    its default."""
    from ggmlpy.autograd import engine, prims
    from ggmlpy.runtime import autograd_state
    from ggmlpy.runtime.autograd_state import AUTOGRAD, AutogradState

    defaults = dict(vars(AutogradState()))
    assert all(f"`{name}`" in autograd_state.__doc__ for name in defaults), "a mode the contract does not state"
    seen = {}

    def other():
        seen.update(vars(AUTOGRAD))
        seen["recording"] = AUTOGRAD.recording()
    w = g.ag_param(np.ones((2, 2)))
    with g.with_grad_tape(), engine.trace_into(engine.Trace()), engine.watch_params(), g.dual_level(), \
            prims.blas_products(), prims.cpu_kernels():
        g.ag_sum(w)
        with g.no_grad():
            assert AUTOGRAD.tape_paused and AUTOGRAD.tape_nodes and AUTOGRAD.trace and AUTOGRAD.watchers
            assert AUTOGRAD.dual_levels and AUTOGRAD.blas_products and AUTOGRAD.cpu_kernels
            assert AUTOGRAD.host_reads is not None
            t = threading.Thread(target=other)
            t.start()
            t.join()
    assert seen.pop("recording") is False
    assert seen == defaults


def test_forward_ad_levels_are_per_thread():
    from ggmlpy.autograd import forward_ad
    wrong = []

    def work(i):
        x = g.ag_tensor(np.full((2, 2), float(i + 1)))
        v = g.ag_tensor(np.ones((2, 2)))
        for _ in range(50):
            with g.dual_level():
                y = g.ag_mul(g.make_dual(x, v), g.make_dual(x, v))  # d(x^2) = 2 x v
                _, t = g.unpack_dual(y)
                if not np.allclose(t.numpy(), 2.0 * (i + 1)):
                    wrong.append(i)
    _in_threads(4, work)
    assert not wrong
    assert not [lv for lv in forward_ad.LEVELS if lv is not None], "levels were left open"


def test_a_thread_cannot_exit_another_threads_level():
    idx = g.enter_dual_level()
    try:
        err = []

        def other():
            try:
                g.exit_dual_level()
            except g.GGMLError as e:
                err.append(str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert err and "in this thread" in err[0]
    finally:
        g.exit_dual_level(idx)


def test_predictions_from_a_thread_pool_while_another_thread_trains():
    g.manual_seed(3)
    model = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    frozen = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 32))
    g.ag_eval(frozen)
    want = frozen(g.ag_tensor(X)).numpy()
    opt = g.optimizer_adam(model.parameters(), lr=1e-2)
    stop = threading.Event()

    def train():
        xb, yb = g.ag_tensor(rng.normal(size=(8, 16))), g.ag_tensor(rng.normal(size=(3, 16)))
        while not stop.is_set():
            with g.with_grad_tape():
                loss = g.ag_mse_loss(model(xb), yb)
            g.backward(loss)
            opt.step()
            opt.zero_grad()
    trainer = threading.Thread(target=train)
    trainer.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda _: frozen(g.ag_tensor(X)).numpy(), range(200)))
            shapes = list(pool.map(lambda _: model(g.ag_tensor(X)).numpy().shape, range(50)))
    finally:
        stop.set()
        trainer.join(60)
    for o in outs:
        np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)
    assert set(shapes) == {(3, 32)} and opt.t > 0


def test_one_optimizer_stepped_from_two_threads_at_once_raises(monkeypatch):
    w = g.ag_param(np.ones((4, 4)))
    opt = g.optimizer_sgd([w], lr=0.1)
    inside, release = threading.Event(), threading.Event()
    real = opt._step

    def slow_step(todo):
        inside.set()
        release.wait(30)
        real(todo)
    monkeypatch.setattr(opt, "_step", slow_step)
    w.grad = g.ag_tensor(np.ones((4, 4)))
    t = threading.Thread(target=opt.step)
    t.start()
    inside.wait(30)
    try:
        with pytest.raises(g.GGMLError, match="another thread"):
            opt.step()
    finally:
        release.set()
        t.join()
    np.testing.assert_allclose(w.numpy(), 0.9)  # the one step that ran, ran once


def test_ag_fit_in_two_threads_equals_in_series():
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(6, 64)), rng.integers(0, 3, size=64)

    def fit(seed):
        g.manual_seed(seed)  # initial weights: drawn before the threads race for the stream
        model = g.ag_sequential(g.ag_linear(6, 12, "tanh"), g.ag_linear(12, 3))
        return model

    def train(model):
        opt = g.optimizer_adam(model.parameters(), lr=1e-2)
        g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(X, Y, 16, shuffle=False),
                 epochs=3, progress=False)
        return [p.numpy() for p in model.parameters()]

    series = [train(fit(s)) for s in (10, 11)]
    models = [fit(s) for s in (10, 11)]
    results = [None, None]

    def work(i):
        results[i] = train(models[i])
    _in_threads(2, work)
    for a, b in zip(series, results):
        for pa, pb in zip(a, b):
            np.testing.assert_allclose(pa, pb, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fixture", ["mlp", "resnet_block"])
def test_one_onnx_model_shared_by_threads_gives_the_serial_results(fixture):
    """A loaded model is shared as an onnxruntime session is: four threads calling onnx_run on one
    model with one input shape (one plan, so one set of input tensors and one graph) get exactly
    the serial results."""
    from pathlib import Path
    path = Path(__file__).parent / "onnx_fixtures" / f"{fixture}.onnx"
    model = g.onnx_load(str(path), device="cpu")
    (name, shape), = g.onnx_inputs(model).items()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(40)]
    serial = [g.onnx_run(model, {name: x}) for x in xs]
    got = [[None] * len(xs) for _ in range(4)]

    def work(i):
        for k in range(len(xs)):
            j = (k + 7 * i) % len(xs)  # each thread in its own order: neighbours run different inputs
            got[i][j] = g.onnx_run(model, {name: xs[j]})
    _in_threads(4, work)
    wrong = sum(any(not np.array_equal(out[o], ref[o]) for o in ref)
                for res in got for out, ref in zip(res, serial))
    assert wrong == 0, f"{wrong} of {4 * len(xs)} results differ from the serial ones"


def test_a_level_entered_in_one_thread_carries_tangents_in_every_thread():
    """The seed's process-wide levels: a worker makes duals at the main thread's level, computes
    and unpacks them (8 threads x 50 times, every tangent 2v)."""
    with g.dual_level() as lvl:
        wrong, missing = [], []

        def work(i):
            x = g.ag_tensor(np.full((3, 2), float(i)))
            v = g.ag_tensor(np.arange(6.0).reshape(3, 2) + i)
            for _ in range(50):
                _, t = g.unpack_dual(g.ag_scale(g.make_dual(x, v, level=lvl), 2), level=lvl)
                if t is None:
                    missing.append(i)
                elif not np.array_equal(t.numpy(), 2 * v.numpy()):
                    wrong.append(i)
        _in_threads(8, work)
    assert not missing and not wrong, (len(missing), len(wrong))


def test_nested_levels_across_threads_give_second_derivatives():
    """The main thread's outer level and a worker's inner one nest: d/dx (d/dx x^3) = 6x, the
    outer tangent of the inner tangent, computed in the worker on the main thread's dual."""
    x0 = np.array([[1.5, -2.0]])
    with g.dual_level() as outer:
        x = g.make_dual(g.ag_tensor(x0), g.ag_tensor(np.ones_like(x0)), level=outer)
        out = {}

        def work(_):
            with g.dual_level() as inner:
                xi = g.make_dual(x, g.ag_tensor(np.ones_like(x0)), level=inner)
                y = g.ag_mul(g.ag_mul(xi, xi), xi)
                _, dy = g.unpack_dual(y, level=inner)   # 3 x^2, still dual at the outer level
                _, d2y = g.unpack_dual(dy, level=outer)  # 6 x
                out["d2y"] = d2y.numpy()
        _in_threads(1, work)
    np.testing.assert_allclose(out["d2y"], 6 * x0, rtol=1e-6)


def test_a_level_exited_while_another_thread_uses_it_raises_or_has_no_tangent():
    """Never a wrong value: a worker computing at a level the main thread has exited gets a clear
    error when it makes a dual there, and no stale tangent from what it held."""
    lvl = g.enter_dual_level()
    x = g.make_dual(g.ag_tensor(np.ones((2, 2))), g.ag_tensor(np.full((2, 2), 3.0)), level=lvl)
    g.exit_dual_level(lvl)
    got = {}

    def work(_):
        got["held"] = g.unpack_dual(g.ag_scale(x, 2), level=lvl)[1]
        try:
            g.make_dual(g.ag_tensor(np.ones((2, 2))), g.ag_tensor(np.ones((2, 2))), level=lvl)
        except g.GGMLError as e:
            got["error"] = str(e)
    _in_threads(1, work)
    assert got["held"] is None
    assert "not active" in got["error"]
