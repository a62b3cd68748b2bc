"""ag_checkpoint: one test (at least) per invariant of the seed (docs/design.md)."""
import functools
import warnings

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.runtime.autograd_state import AUTOGRAD

rng = np.random.default_rng(3)


def mats(*shape):
    return rng.normal(size=shape)


@pytest.fixture
def stack():
    g.manual_seed(11)
    layers = [g.ag_linear(8, 8, "relu") for _ in range(4)]
    return layers, g.ag_tensor(mats(8, 5)), g.ag_tensor(mats(8, 5))


def params_of(layers):
    return [p for lyr in layers for p in lyr.parameters()]


def train_grads(layers, x, y, checkpoint_every=None, extra=None):
    """Gradients of mse(stack(x), y), checkpointing every `checkpoint_every`-th layer."""
    g.zero_grad(params_of(layers))
    with g.with_grad_tape():
        h = x
        for i, lyr in enumerate(layers):
            if checkpoint_every and i % checkpoint_every == checkpoint_every - 1:
                h = g.ag_checkpoint(lambda t, lyr=lyr: extra(lyr(t)) if extra else lyr(t), h)
            else:
                h = extra(lyr(h)) if extra else lyr(h)
        loss = g.ag_mse_loss(h, y)
    grads = g.backward(loss)
    return [grads[p].numpy() for p in params_of(layers)], [p.grad.numpy() for p in params_of(layers)]


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert np.array_equal(u, v)


# -- API -------------------------------------------------------------------------------------------------
def test_first_argument_must_be_callable():
    with pytest.raises(g.GGMLError, match="expects a function"):
        g.ag_checkpoint(g.ag_tensor(mats(2, 2)), g.ag_tensor(mats(2, 2)))


def test_outside_a_tape_it_just_calls_fn():
    x = g.ag_tensor(mats(3, 3))
    out = g.ag_checkpoint(g.ag_relu, x)
    np.testing.assert_array_equal(out.numpy(), g.ag_relu(x).numpy())


# -- 1. recording is off during the segment -------------------------------------------------------------
def test_segment_records_no_nodes_and_no_snapshots(stack):
    layers, x, _ = stack
    seen = []
    with g.with_grad_tape():
        h = layers[0](x)
        n = len(AUTOGRAD.tape_nodes)
        g.ag_checkpoint(lambda t: (seen.append(AUTOGRAD.recording()), layers[1](layers[2](t)))[1], h)
        assert seen == [False]
        assert len(AUTOGRAD.tape_nodes) == n + 1 and AUTOGRAD.tape_nodes[-1].op is None  # just the checkpoint node
        assert set(AUTOGRAD.tape_nodes[-1].saved.values()) == {h}  # and it keeps only the segment's input


def test_segment_that_raises_leaves_the_tape_as_it_was(stack):
    layers, x, _ = stack

    def boom(t):
        layers[0](t)
        raise RuntimeError("segment failed")

    with g.with_grad_tape():
        h = layers[1](x)
        nodes, count = AUTOGRAD.tape_nodes, len(AUTOGRAD.tape_nodes)
        with pytest.raises(RuntimeError, match="segment failed"):
            g.ag_checkpoint(boom, h)
        assert AUTOGRAD.tape_enabled and AUTOGRAD.recording()
        assert AUTOGRAD.tape_nodes is nodes and len(AUTOGRAD.tape_nodes) == count
        layers[2](h)
        assert len(AUTOGRAD.tape_nodes) > count  # still recording


# -- 2. RNG -------------------------------------------------------------------------------------------------
def dropout_stack():
    g.manual_seed(5)
    return [g.ag_linear(8, 8, "relu") for _ in range(3)], g.ag_dropout(0.5)


def test_dropout_segment_replays_the_same_mask():
    (layers, drop), x, y = dropout_stack(), g.ag_tensor(mats(8, 6)), g.ag_tensor(mats(8, 6))
    g.manual_seed(99)
    plain = train_grads(layers, x, y, extra=drop)
    g.manual_seed(99)
    ckpt = train_grads(layers, x, y, checkpoint_every=1, extra=drop)
    assert_bitwise(plain[0], ckpt[0])


def test_rng_stream_after_checkpoint_is_as_without_it():
    (layers, drop), x = dropout_stack(), g.ag_tensor(mats(8, 6))
    after = []
    for use_ckpt in (False, True):
        g.manual_seed(7)
        with g.with_grad_tape():
            h = g.ag_checkpoint(lambda t: drop(layers[0](t)), x) if use_ckpt else drop(layers[0](x))
            second = drop(h)  # a second dropout after the segment
        after.append((second.numpy(), g.random.generator().uniform()))
    np.testing.assert_array_equal(after[0][0], after[1][0])
    assert after[0][1] == after[1][1]


def test_two_checkpointed_dropout_blocks_draw_different_masks():
    drop = g.ag_dropout(0.5)
    ones = g.ag_tensor(np.ones((64, 4)))
    g.manual_seed(3)
    with g.with_grad_tape():
        a = g.ag_checkpoint(drop, ones)
        b = g.ag_checkpoint(drop, ones)
    assert not np.array_equal(a.numpy(), b.numpy())


def test_segment_that_raises_restores_the_rng():
    drop = g.ag_dropout(0.5)
    g.manual_seed(8)
    state = g.get_rng_state()

    def draws_then_fails(t):
        drop(t)
        raise ValueError("nope")

    with g.with_grad_tape():
        with pytest.raises(ValueError):
            g.ag_checkpoint(draws_then_fails, g.ag_tensor(np.ones((4, 4))))
    assert g.get_rng_state() == state


def test_backward_does_not_move_the_callers_rng_stream():
    (layers, drop), x, y = dropout_stack(), g.ag_tensor(mats(8, 6)), g.ag_tensor(mats(8, 6))
    with g.with_grad_tape():
        loss = g.ag_mse_loss(g.ag_checkpoint(lambda t: drop(layers[0](t)), x), y)
    state = g.get_rng_state()
    g.backward(loss)
    assert g.get_rng_state() == state


# -- 3. the output is a fresh tensor, connected to the outer graph ------------------------------------------------
def test_parameter_gradient_is_not_doubled(stack):
    layers, x, y = stack
    plain = train_grads(layers, x, y)
    ckpt = train_grads(layers, x, y, checkpoint_every=1)
    for p, c in zip(plain[0], ckpt[0]):
        np.testing.assert_array_equal(c, p)  # a doubled gradient would be 2 * p


def test_layers_before_the_checkpoint_still_get_gradients(stack):
    layers, x, y = stack
    plain = train_grads(layers, x, y)[0]
    g.zero_grad(params_of(layers))
    with g.with_grad_tape():
        h = layers[0](x)  # before the checkpoint, not inside it
        h = g.ag_checkpoint(lambda t: layers[2](layers[1](t)), h)
        loss = g.ag_mse_loss(layers[3](h), y)
    grads = g.backward(loss)
    np.testing.assert_array_equal(grads[layers[0].W].numpy(), plain[0])
    assert np.abs(plain[0]).sum() > 0


# -- 4. recorded even when no input requires a gradient -----------------------------------------------------------
def test_segment_on_a_plain_input_still_trains_its_weights():
    g.manual_seed(2)
    lin = g.ag_linear(4, 3)
    x = g.ag_tensor(mats(4, 5))  # requires_grad=False
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_checkpoint(lin, x))
    grads = g.backward(loss)
    np.testing.assert_allclose(grads[lin.W].numpy(), np.ones((3, 5)) @ x.numpy().T, rtol=1e-5)
    assert lin.W.grad is not None


# -- 5. the replay runs on a private tape ---------------------------------------------------------------------
def test_replay_leaves_the_outer_tape_alone_and_routes_gradients():
    g.manual_seed(4)
    lin = g.ag_linear(4, 4, "tanh")
    x = g.ag_param(mats(4, 3))
    inside = []

    def seg(t):
        h = lin(t)
        inside.append(h)
        return h

    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_checkpoint(seg, x))
    nodes, count = AUTOGRAD.tape_nodes, len(AUTOGRAD.tape_nodes)
    grads = g.backward(loss)
    assert AUTOGRAD.tape_nodes is nodes and len(AUTOGRAD.tape_nodes) == count
    assert x in grads and x.grad is not None          # the caller's input: returned to the outer pass
    assert lin.W.grad is not None and lin.b.grad is not None  # the segment's leaves: .grad written
    assert all(t.grad is None for t in inside)        # tensors made inside the segment: no .grad
    first = lin.W.grad.numpy()
    g.backward(loss)
    np.testing.assert_allclose(lin.W.grad.numpy(), 2 * first, rtol=1e-6)  # accumulating


# -- 6. the replay must not reset any pool ------------------------------------------------------------------
def test_replay_that_resets_the_pass_pool_raises():
    x = g.ag_param(mats(3, 3))
    calls = []

    def seg(t):
        calls.append(1)
        if len(calls) == 2:  # the replay
            with g.with_grad_tape():
                pass
        return g.ag_relu(t)

    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_checkpoint(seg, x))
    with pytest.raises(g.CheckpointReplayError, match=r"pass \d+ -> \d+.*with_grad_tape\(\) or ag_device\(\)"):
        g.backward(loss)


def test_replay_that_switches_the_dtype_raises():
    x = g.ag_param(mats(3, 3))
    calls = []

    def seg(t):
        calls.append(1)
        if len(calls) == 2:
            g.ag_dtype("f16")  # the replay would differentiate another computation than the forward's
        return g.ag_relu(t)

    try:
        with g.with_grad_tape():
            loss = g.ag_sum(g.ag_checkpoint(seg, x))
        with pytest.raises(g.CheckpointReplayError, match=r"dtype f32 -> f16"):
            g.backward(loss)
    finally:
        g.ag_dtype("f32")


_SWITCH_DEVICE = """
import numpy as np, ggmlpy as g
others = [d.name for d in g.devices() if d.type in ("gpu", "igpu")]
if not others:
    print("no second device"); raise SystemExit(0)
x = g.ag_param(np.ones((3, 3)))
calls = []

def seg(t):
    calls.append(1)
    if len(calls) == 2:
        g.ag_device(others[0])
    return g.ag_relu(t)

with g.with_grad_tape():
    loss = g.ag_sum(g.ag_checkpoint(seg, x))
try:
    g.backward(loss)
except g.CheckpointReplayError as e:
    print("raised:", e)
"""


def test_replay_that_switches_device_raises():
    """Run where a second device exists: lavapipe (software Vulkan) when the build has Vulkan.
    A child process, because ggml reads the software-Vulkan switch once per process."""
    import os
    import subprocess
    import sys
    if "Vulkan" not in g.backends() and not any(d.type in ("gpu", "igpu") for d in g.devices()):
        pytest.skip("needs a second device: a GPU, or a build with Vulkan for lavapipe")
    env = dict(os.environ, GGMLPY_SOFTWARE_VULKAN="1")
    out = subprocess.run([sys.executable, "-c", _SWITCH_DEVICE], capture_output=True, text=True, timeout=300, env=env)
    if "no second device" in out.stdout:
        pytest.skip("no Vulkan device, not even lavapipe (apt-get install mesa-vulkan-drivers)")
    assert out.returncode == 0 and "raised:" in out.stdout and "ag_device" in out.stdout, out.stdout + out.stderr


# -- 7. resident gradients: one accumulation per leaf ------------------------------------------------------------
def test_each_leaf_gradient_is_accumulated_once_per_backward(stack, monkeypatch):
    from ggmlpy.autograd import engine
    layers, x, y = stack
    calls = []
    real = engine._add_into_grad
    monkeypatch.setattr(engine, "_add_into_grad", lambda leaf, gr: (calls.append(leaf.id), real(leaf, gr)))
    train_grads(layers, x, y, checkpoint_every=1)
    assert sorted(calls) == sorted(p.id for p in params_of(layers))


# -- 9. the loop-variable trap ---------------------------------------------------------------------------------
def test_late_bound_closure_is_detected_and_starves_earlier_layers(stack):
    layers, x, y = stack
    g.zero_grad(params_of(layers))
    with g.with_grad_tape():
        h = x
        for lyr in layers:
            h = g.ag_checkpoint(lambda t: lyr(t), h)  # the trap: every closure sees the last `lyr`
        loss = g.ag_mse_loss(h, y)
    with pytest.warns(RuntimeWarning, match="loop variable"):
        grads = g.backward(loss)
    assert layers[0].W not in grads  # earlier layers silently get nothing...
    assert layers[-1].W in grads      # ...while the last one is trained several times over


@pytest.mark.parametrize("bind", ["default_arg", "partial"])
def test_correct_binding_gives_plain_gradients_without_warning(stack, bind):
    layers, x, y = stack
    plain = train_grads(layers, x, y)[0]
    g.zero_grad(params_of(layers))
    with g.with_grad_tape():
        h = x
        for lyr in layers:
            fn = (lambda t, lyr=lyr: lyr(t)) if bind == "default_arg" else functools.partial(lyr.forward)
            h = g.ag_checkpoint(fn, h)
        loss = g.ag_mse_loss(h, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grads = g.backward(loss)
    assert_bitwise(plain, [grads[p].numpy() for p in params_of(layers)])


# -- correctness ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("every", [1, 2])
def test_pure_segments_match_plain_gradients_bit_for_bit(stack, every):
    layers, x, y = stack
    plain = train_grads(layers, x, y)
    ckpt = train_grads(layers, x, y, checkpoint_every=every)
    assert_bitwise(plain[0], ckpt[0])
    assert_bitwise(plain[1], ckpt[1])


def test_nested_checkpoints_give_the_same_gradients(stack):
    layers, x, y = stack
    plain = train_grads(layers, x, y)[0]
    g.zero_grad(params_of(layers))
    inner = lambda t: g.ag_checkpoint(lambda u: layers[2](layers[1](u)), t)  # noqa: E731
    with g.with_grad_tape():
        h = g.ag_checkpoint(lambda t: layers[3](inner(layers[0](t))), x)
        loss = g.ag_mse_loss(h, y)
    grads = g.backward(loss)
    assert_bitwise(plain, [grads[p].numpy() for p in params_of(layers)])


def test_checkpoint_output_used_twice_downstream():
    g.manual_seed(6)
    lin = g.ag_linear(4, 4, "sigmoid")
    x = g.ag_tensor(mats(4, 3))
    grads = []
    for use_ckpt in (False, True):
        with g.with_grad_tape():
            h = g.ag_checkpoint(lin, x) if use_ckpt else lin(x)
            loss = g.ag_sum(g.ag_mul(h, h))
        grads.append(g.backward(loss)[lin.W].numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


def test_checkpointing_blocks_of_two_layers_shrinks_the_tape_five_fold():
    g.manual_seed(1)
    layers = [g.ag_linear(64, 64, "relu") for _ in range(6)]
    blocks = [g.ag_sequential(layers[i], layers[i + 1]) for i in range(0, 6, 2)]
    x = g.ag_tensor(mats(64, 32))
    sizes = []
    for use_ckpt in (False, True):
        with g.with_grad_tape():
            h = x
            for blk in blocks:
                h = g.ag_checkpoint(blk, h) if use_ckpt else blk(h)
        sizes.append(g.tape_bytes())
    assert sizes[1] <= 0.2 * sizes[0]


# -- compiled: the segments are emitted again in the backward part of the graph ----------------------------
def _compiled_mlp(block, checkpointed, shared=False, nested=False, layers=8, width=64, seed=0, batch=256):
    rng = np.random.default_rng(seed)
    ws = [g.ag_param(rng.normal(size=(width, width)) * (2 / width) ** 0.5) for _ in range(layers)]
    if shared:  # the first weight also used after the segments: its gradient has two parts
        ws[-1] = ws[0]
    x, y = g.ag_tensor(rng.normal(size=(width, batch))), g.ag_tensor(rng.normal(size=(width, batch)))
    blocks = [ws[i:i + block] for i in range(0, layers, block)]

    def run_block(h, blk):
        for w in blk:
            h = g.ag_tanh(g.ag_matmul(w, h)) if shared else g.ag_relu(g.ag_matmul(w, h))
        return h

    def segment(h, blk):
        if nested:  # a checkpoint inside a checkpoint: recomputed with its outer segment
            return g.ag_checkpoint(lambda t: run_block(g.ag_checkpoint(lambda u: run_block(u, blk[:1]), t), blk[1:]), h)
        return g.ag_checkpoint(lambda t: run_block(t, blk), h)

    def loss_fn(a, b):
        h = a
        for blk in blocks:
            h = segment(h, blk) if checkpointed else run_block(h, blk)
        return g.ag_mse_loss(h, b)
    params = list(dict.fromkeys(ws))
    return params, loss_fn, x, y


@pytest.mark.parametrize("block,bound", [(2, 0.8), (3, 0.65), (4, 0.7)])
def test_compiled_checkpoint_recomputes_and_saves_compute_memory(block, bound):
    """Gradients (hence weights) bit for bit those of the uncheckpointed compiled step, and a
    smaller compute buffer: the segments' activations are not held across the backward pass
    (activations, 64 x 256, outweigh the weights' gradients, 64 x 64, as in the seed's setting:
    three 4-layer blocks keep 3 block inputs and recompute 4 layers at a time)."""
    runs = {}
    for ckpt in (False, True):
        params, loss_fn, x, y = _compiled_mlp(block, ckpt, layers=12)
        step = g.ag_compile(loss_fn, [x, y], optimizer=g.optimizer_sgd(params, lr=0.05))
        losses = [step(x, y) for _ in range(3)]
        runs[ckpt] = (losses, [p.numpy() for p in params], step.buffer_bytes, step.checkpoints)
    (l0, w0, b0, n0), (l1, w1, b1, n1) = runs[False], runs[True]
    assert n0 == 0 and n1 == 12 // block
    assert l1 == l0 and all(np.array_equal(a, b) for a, b in zip(w0, w1))
    assert 0 < b1 < bound * b0, (b1 / b0, b1, b0)


@pytest.mark.parametrize("shared,nested", [(True, False), (False, True)])
def test_compiled_checkpoint_follows_the_eager_checkpointed_trajectory(shared, nested):
    """A weight read inside a segment and after it, and checkpoints nested in checkpoints: the
    compiled step's losses and weights follow the eager, checkpointed steps."""
    params, loss_fn, x, y = _compiled_mlp(2, True, shared=shared, nested=nested, layers=4, width=32)
    init = [p.numpy() for p in params]
    opt = g.optimizer_adam(params, lr=0.01)
    want = []
    for _ in range(3):
        with g.with_grad_tape():
            loss = loss_fn(x, y)
        want.append(loss.item())
        opt.step(g.backward(loss))
    final = [p.numpy() for p in params]
    for p, v in zip(params, init):
        p.data = v
    step = g.ag_compile(loss_fn, [x, y], optimizer=g.optimizer_adam(params, lr=0.01))
    got = [step(x, y) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, v in zip(params, final):
        np.testing.assert_allclose(p.numpy(), v, rtol=1e-5, atol=1e-6)


def test_compiled_step_reports_its_compute_buffer():
    params, loss_fn, x, y = _compiled_mlp(2, False, layers=2, width=16, batch=64)
    step = g.ag_compile(loss_fn, [x, y], optimizer=g.optimizer_sgd(params, lr=0.1))
    assert step.buffer_bytes > 16 * 64 * 4 and step.buffer_bytes == step.compute_buffer_bytes


# -- checkpointing planned under a memory budget ---------------------------------------------------------
def _sgd_step(fn_args, **kw):
    params, loss_fn, x, y = fn_args
    return params, x, y, g.ag_compile(loss_fn, [x, y], optimizer=g.optimizer_sgd(params, lr=0.05), **kw)


def test_memory_budget_plans_the_recomputation():
    """The planned step's buffer is within the budget; at the budget the hand-placed per-block plan
    reaches it recomputes no more than that plan; at a budget the plain step meets it recomputes
    nothing; its numbers are the plain step's, bit for bit; below the reachable minimum, an error
    naming that minimum."""
    _, _, _, plain = _sgd_step(_compiled_mlp(3, False, layers=12))
    _, _, _, hand = _sgd_step(_compiled_mlp(3, True, layers=12))
    hand_recomputed = sum(e - s for s, e in hand.segments)
    p0, x0, y0, _ = _sgd_step(_compiled_mlp(3, False, layers=12))
    for budget in (plain.buffer_bytes, hand.buffer_bytes):
        params, x, y, step = _sgd_step(_compiled_mlp(3, False, layers=12), memory_budget=budget)
        assert step.buffer_bytes <= budget and step.plan["allocated_bytes"] == step.buffer_bytes
        if budget == plain.buffer_bytes:
            assert step.plan["segments"] == [] and step.plan["recomputed_primitives"] == 0
        else:
            assert 0 < step.plan["recomputed_primitives"] <= hand_recomputed
        ref_params, rx, ry, ref = _sgd_step(_compiled_mlp(3, False, layers=12))
        assert [step(x, y) for _ in range(2)] == [ref(rx, ry) for _ in range(2)]
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(params, ref_params))
    with pytest.raises(g.GGMLError, match=r"smallest compute buffer reachable is \d+ bytes"):
        _sgd_step(_compiled_mlp(3, False, layers=12), memory_budget=1000)


def test_memory_budget_is_checked_and_not_mixed_with_hand_placed_checkpoints():
    with pytest.raises(g.GGMLError, match="memory_budget must be a positive"):
        _sgd_step(_compiled_mlp(3, False, layers=4), memory_budget=-5)
    with pytest.raises(g.GGMLError, match="plans the checkpoints itself"):
        _sgd_step(_compiled_mlp(2, True, layers=4), memory_budget=1 << 30)


def test_memory_budget_on_a_small_gpt():
    """The char-GPT's blocks are cut where the residual stream alone crosses."""
    g.manual_seed(0)
    model = g.ag_gpt(16, d_model=32, n_heads=2, n_layers=4, context=16)
    rng = np.random.default_rng(0)
    x = g.ag_tensor(rng.integers(0, 16, (16, 4)), dtype="i32")
    y = g.ag_tensor(rng.integers(0, 16, (16, 4)), dtype="i32")
    plain = g.ag_compile(lambda a, b: model.loss(a, b), [x, y], optimizer=g.optimizer_sgd(model.parameters(), lr=0.01))
    budget = int(0.7 * plain.buffer_bytes)
    step = g.ag_compile(lambda a, b: model.loss(a, b), [x, y], optimizer=g.optimizer_sgd(model.parameters(), lr=0.01),
                        memory_budget=budget)
    assert step.buffer_bytes <= budget and step.plan["segments"]
    assert np.isfinite(step(x, y))


def _keras_cnn(seed=0):
    """conv 3x3 -> relu -> max pool -> conv 3x3 -> relu -> max pool -> flatten -> linear, on 16x16 images, batch 64."""
    g.manual_seed(seed)
    model = g.ag_sequential(g.ag_conv2d_layer(3, 8, 3, padding=1, activation="relu"), g.ag_max_pool2d_layer(2),
                            g.ag_conv2d_layer(8, 16, 3, padding=1, activation="relu"), g.ag_max_pool2d_layer(2),
                            g.ag_flatten_layer(), g.ag_linear(4 * 4 * 16, 10))
    rng = np.random.default_rng(seed)
    x = g.ag_tensor(rng.uniform(-1, 1, (16, 16, 3, 64)))
    y = g.ag_tensor(np.eye(10)[:, rng.integers(0, 10, 64)])
    return model, lambda p, t: g.ag_softmax_cross_entropy_loss(model(p), t), x, y


def test_memory_budget_on_a_keras_style_cnn():
    """Below the plain step's buffer the planner recomputes part of the network within the budget; its
    numbers are the plain step's, bit for bit, compiled and through ag_fit; below the reachable
    minimum, the clear error naming it."""
    def run(budget):
        model, loss_fn, x, y = _keras_cnn()
        step = g.ag_compile(loss_fn, [x, y], optimizer=g.optimizer_sgd(model.parameters(), lr=0.05),
                            memory_budget=budget)
        return step, [step(x, y) for _ in range(3)], [p.numpy() for p in model.parameters()]
    plain, plain_losses, plain_params = run(None)
    planned, losses, params = run(int(0.75 * plain.buffer_bytes))
    assert planned.buffer_bytes <= planned.plan["budget"] < plain.buffer_bytes
    assert planned.plan["segments"] and planned.plan["allocated_bytes"] == planned.buffer_bytes
    assert losses == plain_losses and all(np.array_equal(a, b) for a, b in zip(params, plain_params))
    with pytest.raises(g.GGMLError, match=r"smallest compute buffer reachable is \d+ bytes"):
        run(1000)
    fitted = []
    for budget in (None, planned.plan["budget"], planned.buffer_bytes // 2):
        model, _, x, y = _keras_cnn()
        fit = functools.partial(g.ag_fit, model, g.ag_softmax_cross_entropy_loss,
                                g.optimizer_sgd(model.parameters(), lr=0.05), [(x, y)] * 3, epochs=1, progress=False,
                                compile=True, memory_budget=budget)
        if budget == planned.buffer_bytes // 2:
            with pytest.raises(g.GGMLError, match=r"smallest compute buffer reachable is \d+ bytes"):
                fit()
        else:
            fitted.append((fit()["loss"], [p.numpy() for p in model.parameters()]))
    assert fitted[0][0] == fitted[1][0] and all(np.array_equal(a, b) for a, b in zip(fitted[0][1], fitted[1][1]))


def test_ag_fit_takes_a_memory_budget():
    params, loss_fn, x, y = _compiled_mlp(3, False, layers=6, width=32, batch=64)
    model = lambda a: a  # noqa: E731  (the stack is in loss_fn)
    loader = [(x, y)] * 2
    hist = g.ag_fit(model, loss_fn, g.optimizer_sgd(params, lr=0.05), loader, epochs=1, progress=False,
                    memory_budget=1 << 30)
    assert np.isfinite(hist["loss"][0])
    with pytest.raises(g.GGMLError, match="no checkpoint plan fits"):
        g.ag_fit(model, loss_fn, g.optimizer_sgd(params, lr=0.05), loader, epochs=1, progress=False,
                 memory_budget=100)
    with pytest.raises(g.GGMLError, match="needs compile"):
        g.ag_fit(model, loss_fn, g.optimizer_sgd(params, lr=0.05), loader, epochs=1, progress=False,
                 memory_budget=1 << 30, compile=False)
