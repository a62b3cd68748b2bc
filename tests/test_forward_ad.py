"""Forward-mode AD: the level registry's invariants (docs/design.md), JVP rules, nesting."""
import gc
import threading

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.autograd import forward_ad as fad
from op_cases import CASES, TARGETS, away, r


def t(a):
    return g.ag_tensor(np.asarray(a, dtype=float))


# -- 1. registry and storage -------------------------------------------------------------------------------
def test_setting_a_tangent_registers_and_resetting_unregisters():
    x = t(r(2, 2))
    with g.dual_level() as lv:
        level = fad.LEVELS[lv]
        d = g.make_dual(x, t(r(2, 2)))
        assert len(level) == 1 and d.fwd_grad.contains(lv)
        d.fwd_grad.reset(lv)
        assert len(level) == 0 and g.unpack_dual(d)[1] is None


def test_make_dual_needs_a_level_and_matching_shapes():
    with pytest.raises(g.GGMLError, match="no forward AD level"):
        g.make_dual(t(r(2, 2)), t(r(2, 2)))
    with g.dual_level():
        with pytest.raises(g.GGMLError, match="shape"):
            g.make_dual(t(r(2, 2)), t(r(3, 2)))


# -- 2. exiting a level clears its tangents, and only its ------------------------------------------------------
def test_exit_clears_only_that_levels_tangents():
    x = t(r(2, 2))
    with g.dual_level() as outer:
        d_outer = g.make_dual(x, t(r(2, 2)), outer)
        with g.dual_level() as inner:
            both = g.make_dual(d_outer, t(r(2, 2)), inner)
            assert set(both.fwd_grad.levels()) == {outer, inner}
        assert g.unpack_dual(both, inner)[1] is None
        assert g.unpack_dual(both, outer)[1] is not None
    assert g.unpack_dual(both, outer)[1] is None


# -- 3. level indices are reused, stale ones reach nothing -------------------------------------------------------
def test_reused_index_does_not_see_old_tangents():
    x = t(r(2, 2))
    with g.dual_level() as first:
        old = g.make_dual(x, t(r(2, 2)))
    with g.dual_level() as second:
        assert second == first
        assert g.unpack_dual(old, second)[1] is None


# -- 4. exiting a level that is not the innermost raises ----------------------------------------------------------
def test_exiting_an_outer_level_first_raises():
    outer = g.enter_dual_level()
    inner = g.enter_dual_level()
    try:
        with pytest.raises(g.GGMLError, match="innermost"):
            g.exit_dual_level(outer)
    finally:
        g.exit_dual_level(inner)
        g.exit_dual_level(outer)
    assert not fad.LEVELS


# -- 5. concurrency -----------------------------------------------------------------------------------------------
def test_threads_making_duals_while_the_level_exits():
    primals = [t(r(3, 3)) for _ in range(8)]
    tangents = [t(r(3, 3)) for _ in range(8)]
    for _ in range(200):
        lv = g.enter_dual_level()
        start, errors, made = threading.Barrier(9), [], []

        def worker(i):
            start.wait()
            for _ in range(20):
                try:
                    d = g.make_dual(primals[i], tangents[i], lv)
                    made.append(d)
                    g.unpack_dual(d, lv)
                except g.GGMLError as e:  # the level closed under us: the one expected outcome
                    if "not active" not in str(e):
                        errors.append(e)
                    return
                except Exception as e:  # anything else is a race
                    errors.append(e)
                    return

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        start.wait()
        level = fad.LEVELS[lv]
        g.exit_dual_level(lv)
        for th in threads:
            th.join()
        assert not errors, errors
        assert all(not d.fwd_grad.contains(lv) for d in made)  # nothing survived the exit
        assert len(level) == 0


# -- 6. lifetime ----------------------------------------------------------------------------------------------------
def test_short_lived_duals_do_not_grow_the_levels_set():
    x, v = t(r(4, 4)), t(r(4, 4))
    with g.dual_level() as lv:
        for _ in range(500):
            g.make_dual(x, v)
        gc.collect()
        assert len(fad.LEVELS[lv]) < 10


# -- 7. nesting ------------------------------------------------------------------------------------------------------
def test_second_order_directional_derivative():
    # f(x) = sum(exp(x) * sin-free cubic): d2/ds2 f(x + s u) = u^T H u with H = diag(exp(x) + 6x)
    x0, u = r(3, 1), r(3, 1)
    f = lambda x: g.ag_sum(g.ag_add(g.ag_exp(x), g.ag_pow(x, 3)))  # noqa: E731
    with g.dual_level() as a:
        xa = g.make_dual(t(x0), t(u), a)
        with g.dual_level() as b:
            y = f(g.make_dual(xa, t(u), b))
            _, dy = g.unpack_dual(y, b)
        _, d2 = g.unpack_dual(dy, a)
    np.testing.assert_allclose(d2.item(), np.sum((np.exp(x0) + 6 * x0) * u * u), rtol=1e-5)


def test_no_perturbation_confusion():
    x, y, one = t([[2.0]]), t([[5.0]]), t([[1.0]])
    with g.dual_level() as outer:
        xd = g.make_dual(x, one, outer)
        with g.dual_level() as inner:
            s = g.ag_add(xd, g.make_dual(y, one, inner))
            _, ds_dy = g.unpack_dual(s, inner)
        _, d = g.unpack_dual(g.ag_mul(xd, ds_dy), outer)
    assert d.item() == 1.0  # perturbation confusion would give 2


# -- JVP rules ---------------------------------------------------------------------------------------------------------
def _directions(name, arrays):
    rng = np.random.default_rng(len(name))
    dirs = [rng.uniform(-1, 1, a.shape) for a in arrays]
    if name in TARGETS:
        dirs[1] = np.zeros_like(arrays[1])  # losses give the target no derivative (ggmlR)
    return dirs


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_jvp_matches_central_differences(name, fn, ref, arrays, device):
    dirs = _directions(name, arrays)
    _, tangent = g.jvp(fn, [t(a) for a in arrays], [t(d) for d in dirs])
    h = 1e-5  # float64 reference: numpy, not ggml
    num = (ref(*[a + h * d for a, d in zip(arrays, dirs)]) - ref(*[a - h * d for a, d in zip(arrays, dirs)])) / (2 * h)
    rtol, atol = (2e-3, 2e-4) if device == "cpu" else (1e-2, 2e-3)
    np.testing.assert_allclose(tangent.numpy(), num, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_jvp_and_vjp_satisfy_the_dot_product_identity(name, fn, ref, arrays, device):
    dirs = _directions(name, arrays)
    out, jv = g.jvp(fn, [t(a) for a in arrays], [t(d) for d in dirs])
    jv = jv.numpy()  # read before with_grad_tape() below resets the pass pool
    u = np.random.default_rng(1).uniform(-1, 1, out.shape)
    xs = [g.ag_param(a) for a in arrays]
    with g.with_grad_tape():
        y = fn(*xs)
    grads = g.backward(y, t(u))
    lhs = np.sum(jv * u)
    rhs = sum(np.sum(d * grads[x].numpy()) for x, d in zip(xs, dirs) if x in grads)
    np.testing.assert_allclose(lhs, rhs, **({"rtol": 1e-4, "atol": 1e-5} if device == "cpu" else
                                            {"rtol": 1e-2, "atol": 1e-3}))


def test_hvp_matches_finite_differences_of_gradients():
    W = t(r(4, 3))
    f = lambda x: g.ag_sum(g.ag_tanh(g.ag_matmul(W, x)))  # noqa: E731
    x0, v = r(3, 2), r(3, 2)
    _, hv = g.hvp(f, t(x0), t(v))
    hv = hv.numpy()

    def grad(a):
        p = g.ag_param(a)
        with g.with_grad_tape():
            loss = f(p)
        return g.backward(loss)[p].numpy()

    num = (grad(x0 + 1e-3 * v) - grad(x0 - 1e-3 * v)) / 2e-3
    np.testing.assert_allclose(hv, num, rtol=2e-2, atol=1e-3)


def test_hvp_through_relu_matches_the_closed_form():
    """relu's backward is one primitive (g where y > 0); its JVP carries the second order.
    f = sum(relu(W x) * (U x)): the gradient reaching relu (U x) is non-zero where relu is off."""
    Wn, Un = away(r(5, 3), 0), r(5, 3)
    f = lambda x: g.ag_sum(g.ag_mul(g.ag_relu(g.ag_matmul(t(Wn), x)), g.ag_matmul(t(Un), x)))  # noqa: E731
    x0, v = r(3, 1), r(3, 1)
    _, hv = g.hvp(f, t(x0), t(v))
    mask = (Wn @ x0 > 0).astype(float)
    want = Wn.T @ (mask * (Un @ v)) + Un.T @ (mask * (Wn @ v))
    np.testing.assert_allclose(hv.numpy(), want, rtol=1e-4, atol=1e-5)


def test_jacfwd_matches_the_closed_form():
    A = r(3, 4)
    jac = g.jacfwd(lambda x: g.ag_matmul(t(A), x))(t(r(4, 1)))
    np.testing.assert_allclose(jac.numpy(), A, rtol=1e-6)


def test_make_dual_on_a_parameter_inside_a_tape_keeps_backward_correct():
    W = g.ag_param(r(3, 3))
    x = t(r(3, 2))
    with g.dual_level():
        with g.with_grad_tape():
            Wd = g.make_dual(W, t(r(3, 3)))
            loss = g.ag_sum(g.ag_mul(g.ag_matmul(Wd, x), g.ag_matmul(Wd, x)))
        grads = g.backward(loss)
        got = grads[W].numpy()
    y = W.numpy() @ x.numpy()
    np.testing.assert_allclose(got, 2 * y @ x.numpy().T, rtol=1e-5)


def test_tangents_flow_through_a_checkpointed_segment():
    # PyTorch's checkpoint gets this wrong (pytorch/pytorch#129293)
    g.manual_seed(0)
    lin = g.ag_linear(4, 4, "tanh")
    x, v = t(r(4, 3)), t(r(4, 3))
    plain = g.jvp(lambda a: g.ag_sum(lin(a)), x, v)[1].item()
    with g.with_grad_tape():
        ckpt = g.jvp(lambda a: g.ag_sum(g.ag_checkpoint(lin, a)), x, v)[1].item()
    assert ckpt == pytest.approx(plain, rel=1e-6)


def test_hvp_through_a_checkpointed_segment():
    g.manual_seed(0)
    lin = g.ag_linear(3, 3, "sigmoid")
    x0, v = t(r(3, 2)), t(r(3, 2))
    _, plain = g.hvp(lambda a: g.ag_sum(lin(a)), x0, v)
    plain = plain.numpy()
    _, ckpt = g.hvp(lambda a: g.ag_sum(g.ag_checkpoint(lin, a)), x0, v)
    np.testing.assert_allclose(ckpt.numpy(), plain, rtol=1e-6)


# -- forward AD compiled: jvp and hvp traced by ag_compile, one ggml graph ----------------------------------------
def _tanh_mlp(layers=4, width=12, seed=3):
    """A 4-layer tanh MLP's mean square output: the ag_* function (weights made outside it, as a
    compiled graph reads them where they live) and its float64 numpy twin."""
    rng = np.random.default_rng(seed)
    ws = [rng.normal(size=(width, width)) * 0.5 for _ in range(layers)]
    W = [g.ag_tensor(w) for w in ws]

    def f(x):
        h = x
        for w in W:
            h = g.ag_tanh(g.ag_matmul(w, h))
        return g.ag_mean(g.ag_mul(h, h))

    def np_f(x):
        h = x
        for w in ws:
            h = np.tanh(w @ h)
        return np.mean(h * h)
    return f, np_f


def test_compiled_jvp_matches_eager_and_central_differences(device):
    f, np_f = _tanh_mlp()
    rng = np.random.default_rng(0)
    x0, v0 = rng.normal(size=(12, 8)), rng.normal(size=(12, 8))
    x, v = g.ag_tensor(x0), g.ag_tensor(v0)
    step = g.ag_compile(lambda a, t: g.jvp(f, (a,), (t,))[1], [x, v])
    got = step(x, v)
    want = g.jvp(f, (x,), (v,))[1].item()
    h = 1e-6
    num = (np_f(x0 + h * v0) - np_f(x0 - h * v0)) / (2 * h)
    tol = 1e-5 if device == "cpu" else 2e-3
    np.testing.assert_allclose(got, want, rtol=tol)
    np.testing.assert_allclose(got, num, rtol=10 * tol, atol=1e-6)


def test_compiled_hvp_matches_eager_and_finite_differences_of_gradients(device):
    """Forward over reverse in one graph: the traced backward's primitives carry tangents."""
    f, _ = _tanh_mlp()
    rng = np.random.default_rng(1)
    x0, v0 = rng.normal(size=(12, 8)), rng.normal(size=(12, 8))
    x, v = g.ag_tensor(x0), g.ag_tensor(v0)
    step = g.ag_compile(lambda a, t: g.ag_sum(g.ag_mul(g.hvp(f, a, t)[1], t)), [x, v])  # v' H v
    got = [step(x, v), step(x, v)]
    _, hv = g.hvp(f, x, v)
    want = float(np.sum(hv.numpy() * v0))

    def grad(a):
        p = g.ag_param(a)
        with g.with_grad_tape():
            loss = f(p)
        return g.backward(loss)[p].numpy().astype(np.float64)
    num = float(np.sum((grad(x0 + 1e-3 * v0) - grad(x0 - 1e-3 * v0)) / 2e-3 * v0))
    tol = 1e-5 if device == "cpu" else 2e-3
    assert got[0] == got[1]
    np.testing.assert_allclose(got[0], want, rtol=tol)
    np.testing.assert_allclose(got[0], num, rtol=2e-2)
