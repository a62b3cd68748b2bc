"""ag_* ops: forward against numpy, gradients against finite differences, and the tape's contract."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.bindings import ffi

from op_cases import CASES, TARGETS, r


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_forward_matches_numpy(name, fn, ref, arrays, device, tol):
    out = fn(*[g.ag_tensor(a) for a in arrays])
    np.testing.assert_allclose(out.numpy(), ref(*arrays), **tol)


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_finite_differences(name, fn, ref, arrays, device):
    xs = [g.ag_param(a) for a in arrays]
    if name in TARGETS:
        xs[1] = g.ag_tensor(arrays[1])  # ggmlR: a loss gives no gradient to its target
    weights = g.ag_tensor(r(*ref(*arrays).shape))  # a random linear functional of the output
    atol = 2e-3 if device == "cpu" else 3e-2  # f16 accumulation on Vulkan blurs finite differences
    ok, errs = g.ag_gradcheck(lambda: g.ag_sum(g.ag_mul(fn(*xs), weights)), xs, atol=atol, return_errors=True)
    assert ok, errs


def test_broadcast_gradients_reduce_over_the_broadcast_axis():
    a, col, row = g.ag_param(r(3, 4)), g.ag_param(r(3, 1)), g.ag_param(r(1, 4))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_add(g.ag_add(a, col), row))
    grads = g.backward(loss)
    np.testing.assert_allclose(grads[col].numpy(), np.full((3, 1), 4.0))
    np.testing.assert_allclose(grads[row].numpy(), np.full((1, 4), 3.0))


def test_ggmlr_broadcast_errors():
    a, b = g.ag_tensor(r(3, 4)), g.ag_tensor(r(3, 1))
    with pytest.raises(g.GGMLError, match="only the second argument broadcasts"):
        g.ag_add(b, a)
    with pytest.raises(g.GGMLError, match="ag_scale"):
        g.ag_mul(a, 2)
    with pytest.raises(g.GGMLError, match="non-conformable"):
        g.ag_matmul(a, a)


def test_grad_accumulates_until_zero_grad_and_is_not_overcounted():
    x = g.ag_param(r(3, 4))
    for expected in (1, 2):
        with g.with_grad_tape():
            loss = g.ag_sum(g.ag_mul(x, x))  # x used twice: ggmlR's $grad would double-count
        g.backward(loss)
        np.testing.assert_allclose(x.grad.numpy(), expected * 2 * x.numpy(), rtol=1e-5)
    g.zero_grad([x])
    assert x.grad is None


def test_tape_is_disabled_after_an_exception():
    from ggmlpy.runtime.autograd_state import AUTOGRAD
    x = g.ag_param(r(2, 2))
    with pytest.raises(RuntimeError):
        with g.with_grad_tape():
            g.ag_relu(x)
            raise RuntimeError("boom")
    assert not AUTOGRAD.tape_enabled
    n = len(AUTOGRAD.tape_nodes)
    g.ag_relu(x)
    assert len(AUTOGRAD.tape_nodes) == n


def test_a_value_held_across_tapes_keeps_its_value():
    """A tensor the user still holds survives the next tape's reset (in ggmlR too): the reset
    moves it out of the pass pool, and ctx_gen still counts resets."""
    from ggmlpy.runtime.state import STATE
    x = g.ag_param(r(2, 2))
    with g.with_grad_tape():
        y = g.ag_relu(x)
    want, gen = y.numpy(), STATE.ctx_gen
    with g.with_grad_tape():
        z = g.ag_relu(g.ag_neg(x))  # reuses the reset pool's memory
    assert STATE.ctx_gen == gen + 1
    assert y.storage.pool is y.device_context.persistent and z.storage.pool is z.device_context.pass_pool
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_allclose(g.ag_add(y, z).numpy(), np.abs(x.numpy()), rtol=1e-6)


def test_a_pool_reset_without_keep_makes_its_storages_stale():
    """The generation guard itself: a pass pool that does not move held tensors (keep=None)
    makes them raise, naming the generations, instead of reading reused memory."""
    from ggmlpy.runtime.pool import PassPool
    from ggmlpy.runtime.state import STATE
    pool = PassPool(STATE.context().backend)
    s = pool.alloc(g.GGML_TYPE_F32, (2, 2))
    pool.reset()
    with pytest.raises(g.StaleTensorError, match="generation 1"):
        s.ptr


def test_tensors_keep_device_dtype_and_values_across_a_dtype_switch():
    x = g.ag_param(r(2, 2))
    want = x.numpy()
    try:
        g.ag_dtype("f16")
        y = g.ag_tensor(r(2, 2))
        np.testing.assert_array_equal(x.numpy(), want)
        assert x.dtype == "f32" and y.dtype == "f16"
    finally:
        g.ag_dtype("f32")


def test_tape_report_counts_matmul_snapshots():
    W = [g.ag_param(r(16, 16)) for _ in range(3)]
    x = g.ag_tensor(r(16, 8))
    with g.with_grad_tape():
        h = x
        for w in W:
            h = g.ag_relu(g.ag_matmul(w, h))
    rep = g.tape_report()
    assert rep["total_bytes"] == g.tape_bytes() > 0
    assert max(rep["by_op"], key=lambda k: rep["by_op"][k]["bytes"]) == "matmul"


@pytest.mark.parametrize("dtype,rtol", [("f16", 2e-3), ("bf16", 2e-2)])
def test_low_precision_storage_computes_in_f32(dtype, rtol):
    W, x = r(4, 3), r(3, 5)
    try:
        g.ag_dtype(dtype)
        Wt, xt = g.ag_param(W), g.ag_tensor(x)
        with g.with_grad_tape():
            loss = g.ag_sum(g.ag_tanh(g.ag_matmul(Wt, xt)))
        grads = g.backward(loss)
        assert Wt.dtype == loss.dtype == grads[Wt].dtype == dtype
        Wq, xq = Wt.numpy(), xt.numpy()  # the values as stored
        np.testing.assert_allclose(loss.item(), np.tanh(Wq @ xq).sum(), rtol=rtol, atol=rtol)
        np.testing.assert_allclose(grads[Wt].numpy(), (1 - np.tanh(Wq @ xq) ** 2) @ xq.T, rtol=rtol, atol=rtol)
    finally:
        g.ag_dtype("f32")


def test_bad_dtypes_are_clear_errors():
    x = g.ag_tensor(r(2, 2))
    with pytest.raises(g.GGMLError, match="dtype must be"):
        g.ag_tensor(r(2, 2), dtype="f64")
    with pytest.raises(g.GGMLError, match="ag_dtype"):
        g.ag_dtype("int8")
    assert x.dtype == "f32"


def test_a_dropped_persistent_buffer_is_reused_but_a_held_one_never_is():
    pool = g.ag_param(np.ones((1, 1))).device_context.persistent
    held = g.ag_tensor(np.full((5, 4), 2.0))
    other = g.ag_tensor(np.full((5, 4), 3.0))
    assert other.storage.data != held.storage.data
    freed = int(ffi.cast("uintptr_t", other.storage.data))
    other = None  # its last handle: the persistent pool keeps the buffer for the next such tensor
    third = g.ag_tensor(np.full((5, 4), 4.0))
    assert int(ffi.cast("uintptr_t", third.storage.data)) == freed and third.storage.pool is pool
    np.testing.assert_array_equal(held.numpy(), 2.0)
    np.testing.assert_array_equal(third.numpy(), 4.0)


def test_grad_is_copied_out_of_the_pass_pool_only_if_held_at_the_next_tape(monkeypatch):
    w = g.ag_param(np.ones((5, 4)))
    pool = w.device_context.pass_pool
    moved = []
    real = pool.keep
    monkeypatch.setattr(pool, "keep", lambda s: (moved.append(s), real(s)))

    def grad_of(s):
        with g.with_grad_tape():
            loss = g.ag_sum(g.ag_scale(w, s))
        grads = g.backward(loss)
        return w.grad, grads[w]

    held, result = grad_of(2.0)
    w.grad = None  # as zero_grad does; the test still holds the old gradient and the result
    second, second_result = grad_of(3.0)  # this tape's reset moves `held` and `result` out, each on its own
    assert sorted(map(id, moved)) == sorted([id(held.storage), id(result.storage)])
    assert held.storage.pool is w.device_context.persistent and second.storage.pool is w.device_context.pass_pool
    assert held.storage.data != result.storage.data
    np.testing.assert_array_equal(held.numpy(), 2.0)
    np.testing.assert_array_equal(result.numpy(), 2.0)
    w.grad = second = second_result = None
    grad_of(4.0)
    assert len(moved) == 2  # nothing held: nothing copied
    np.testing.assert_array_equal(w.grad.numpy(), 4.0)


def test_a_held_grad_sees_accumulation_and_a_backward_result_does_not():
    w = g.ag_param(np.ones((3, 2)))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_scale(w, 2.0))
    first = g.backward(loss)[w]
    held = w.grad  # on the memory of `first`, in the pass pool
    g.backward(loss)  # within the same tape: accumulates into new memory, not into `first`
    np.testing.assert_array_equal(held.numpy(), 4.0)
    np.testing.assert_array_equal(first.numpy(), 2.0)
    with g.with_grad_tape():  # the reset moves `held` to the persistent pool ...
        loss = g.ag_sum(g.ag_scale(w, 3.0))
    second = g.backward(loss)[w]  # ... where it accumulates in place
    np.testing.assert_array_equal(held.numpy(), 7.0)
    np.testing.assert_array_equal(second.numpy(), 3.0)
    assert held is w.grad and held.storage.pool is w.device_context.persistent
