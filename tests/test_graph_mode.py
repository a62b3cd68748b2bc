"""Graph mode: ag_backward_graph and ag_compile against eager mode."""
import pathlib
import sys

import numpy as np
import pytest

import ggmlpy as g
from op_cases import CASES, TARGETS

from ggmlpy import kernels
from ggmlpy.optim.optimizers import Optimizer


def gemm_kernel() -> bool:
    """Whether compiled CPU graphs compute products with ggmlpy.kernels' gemm."""
    k = kernels.get()
    return k is not None and k.gemm is not None

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_backward_graph_equals_eager_for_every_op(name, fn, ref, arrays, device):
    xs = [g.ag_param(a) for a in arrays]
    if name in TARGETS:
        xs[1] = g.ag_tensor(arrays[1])
    w = g.ag_tensor(np.random.default_rng(2).uniform(-1, 1, ref(*arrays).shape))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_mul(fn(*xs), w))
    eager = {x.id: g.backward(loss)[x].numpy() for x in xs if x.requires_grad}
    graph = g.ag_backward_graph(loss)
    for x in xs:
        if x.requires_grad:
            np.testing.assert_allclose(graph[x].numpy(), eager[x.id],
                                       **({"rtol": 1e-5, "atol": 1e-6} if device == "cpu" else
                                          {"rtol": 5e-3, "atol": 5e-4}))


def mlp(width=8, depth=3, seed=0):
    rng = np.random.default_rng(seed)
    ws = [g.ag_param(rng.normal(size=(width, width)) * 0.4) for _ in range(depth)]
    bs = [g.ag_param(rng.normal(size=(width, 1)) * 0.1) for _ in range(depth)]

    def loss_fn(x, y):
        h = x
        for w, b in zip(ws, bs):
            h = g.ag_tanh(g.ag_add(g.ag_matmul(w, h), b))
        return g.ag_mse_loss(h, y)
    return ws + bs, loss_fn


def relu_mlp(width=8, depth=3, seed=0):
    """Only ops ggml's own backward handles (no tanh, no broadcast bias)."""
    rng = np.random.default_rng(seed)
    ws = [g.ag_param(rng.normal(size=(width, width)) * 0.4) for _ in range(depth)]

    def loss_fn(x, y):
        h = x
        for w in ws:
            h = g.ag_relu(g.ag_matmul(w, h))
        return g.ag_mse_loss(h, y)
    return ws, loss_fn


def eager_losses(params, loss_fn, opt, x, y, steps):
    out = []
    for _ in range(steps):
        with g.with_grad_tape():
            loss = loss_fn(x, y)
        out.append(loss.item())
        opt.step(g.backward(loss))
        opt.zero_grad()
    return out


OPTIMIZERS = [("sgd", lambda ps: g.optimizer_sgd(ps, lr=0.1)),
              ("momentum", lambda ps: g.optimizer_sgd(ps, lr=0.05, momentum=0.9)),
              ("adam", lambda ps: g.optimizer_adam(ps, lr=0.01))]


@pytest.mark.parametrize("backward", ["rules", "ggml"])
@pytest.mark.parametrize("opt_name,make_opt", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_compiled_steps_follow_the_eager_trajectory(opt_name, make_opt, backward):
    rng = np.random.default_rng(5)
    # 32 wide: big enough for the CPU device to give its products to BLAS, when it has it
    x, y = g.ag_tensor(rng.normal(size=(32, 40))), g.ag_tensor(rng.normal(size=(32, 40)))
    params, loss_fn = relu_mlp(width=32) if backward == "ggml" else mlp(width=32)
    init = [p.numpy() for p in params]
    want = eager_losses(params, loss_fn, make_opt(params), x, y, 4)
    final = [p.numpy() for p in params]
    for p, v in zip(params, init):
        p.data = v
    step = g.ag_compile(loss_fn, [x, y], optimizer=make_opt(params), backward=backward)
    got = [step(x, y) for _ in range(4)]
    if backward == "rules" and g.ag_device_name() == "CPU":
        if gemm_kernel():  # products as ggmlpy's OpenBLAS op: the whole graph on the CPU backend
            assert all(p.sched is None for p in step.plans.values())
        elif "BLAS" in g.backends():
            assert all(p.sched is not None for p in step.plans.values())  # products on BLAS, the rest on CPU
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, v in zip(params, final):
        np.testing.assert_allclose(p.numpy(), v, rtol=1e-5, atol=1e-6)


MIXED_OPTIMIZERS = OPTIMIZERS + [("adamw", lambda ps: g.optimizer_adamw(ps, lr=0.01, weight_decay=0.1)),
                                 ("momentum_wd", lambda ps: g.optimizer_sgd(ps, lr=0.05, momentum=0.9,
                                                                            weight_decay=0.01))]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("opt_name,make_opt", MIXED_OPTIMIZERS, ids=[o[0] for o in MIXED_OPTIMIZERS])
def test_compiled_steps_on_low_precision_parameters_follow_the_eager_trajectory(opt_name, make_opt, dtype):
    """Under ag_dtype("f16") the compiled update is the mixed-precision one (f32 moments and
    arithmetic, p rounded once) and the hyper-parameters stay f32 (ggml aborted on an f16 one)."""
    old = g.ag_dtype(dtype)
    try:
        rng = np.random.default_rng(5)
        x, y = g.ag_tensor(rng.normal(size=(16, 24))), g.ag_tensor(rng.normal(size=(16, 24)))
        params, loss_fn = mlp(width=16)
        init = [p.numpy() for p in params]
        want = eager_losses(params, loss_fn, make_opt(params), x, y, 4)
        final = [p.numpy().astype(np.float64) for p in params]
        for p, v in zip(params, init):
            p.data = v
        step = g.ag_compile(loss_fn, [x, y], optimizer=make_opt(params))
        got = [step(x, y) for _ in range(4)]
    finally:
        g.ag_dtype(old)
    assert all(p.dtype == dtype for p in params)
    tol = {"f16": 1e-2, "bf16": 5e-2}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol)
    for p, v in zip(params, final):
        assert np.isfinite(p.numpy()).all()
        np.testing.assert_allclose(p.numpy().astype(np.float64), v, rtol=tol, atol=tol)


def test_auto_backward_is_ggml_where_it_is_supported_and_faster_and_rules_otherwise():
    rng = np.random.default_rng(0)
    w = g.ag_param(rng.normal(size=(4, 4)))
    x, y = g.ag_tensor(rng.normal(size=(4, 5))), g.ag_tensor(rng.normal(size=(4, 5)))

    def compiled(act, backward="auto"):
        return g.ag_compile(lambda a, b: g.ag_mse_loss(act(g.ag_matmul(w, a)), b), [x, y],
                            optimizer=g.optimizer_sgd([w]), backward=backward)
    # the CPU backend runs ggml's OUT_PROD-based backward 1.4x slower: auto keeps the rules there
    want = "rules" if g.ag_device_name() == "CPU" else "ggml"
    assert compiled(g.ag_relu).last_backward == want
    assert compiled(g.ag_relu, backward="ggml").last_backward == "ggml"
    assert compiled(g.ag_tanh).last_backward == "rules"
    with pytest.raises(g.GGMLError, match="no backward"):
        g.ag_compile(lambda a, b: g.ag_mse_loss(g.ag_tanh(g.ag_matmul(w, a)), b), [x, y],
                     optimizer=g.optimizer_sgd([w]), backward="ggml")


def test_a_new_input_shape_builds_a_new_graph():
    params, loss_fn = mlp()
    rng = np.random.default_rng(1)
    step = g.ag_compile(loss_fn, [g.ag_tensor(rng.normal(size=(8, 4))), g.ag_tensor(rng.normal(size=(8, 4)))])
    x, y = g.ag_tensor(rng.normal(size=(8, 6))), g.ag_tensor(rng.normal(size=(8, 6)))
    assert step(x, y) == pytest.approx(loss_fn(x, y).item(), rel=1e-6)
    assert len(step.plans) == 2


@pytest.mark.parametrize("opt_name,make_opt", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_steps_alternating_between_two_input_shapes_follow_the_eager_trajectory(opt_name, make_opt):
    """A loader's short last batch is a second graph; both must see every update of the optimizer's
    step count and learning rate (Adam's bias correction, a scheduler's lr)."""
    rng = np.random.default_rng(3)
    batches = [(g.ag_tensor(rng.normal(size=(8, n))), g.ag_tensor(rng.normal(size=(8, n)))) for n in (6, 3, 6, 3)]
    params, loss_fn = mlp()
    init = [p.numpy() for p in params]
    opt = make_opt(params)
    want = []
    for i, (x, y) in enumerate(batches):
        opt.lr *= 0.5 if i == 2 else 1.0
        want += eager_losses(params, loss_fn, opt, x, y, 1)
    for p, v in zip(params, init):
        p.data = v
    opt = make_opt(params)
    step = g.ag_compile(loss_fn, list(batches[0]), optimizer=opt)
    got = []
    for i, (x, y) in enumerate(batches):
        opt.lr *= 0.5 if i == 2 else 1.0
        got.append(step(x, y))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_tape_with_a_checkpoint_is_declined_by_the_graph_path():
    params, loss_fn = mlp()
    x = g.ag_tensor(np.ones((8, 2)))
    with g.with_grad_tape():
        loss = g.ag_checkpoint(loss_fn, x, x)
    with pytest.raises(g.GGMLError, match="ag_checkpoint"):
        g.ag_backward_graph(loss)
    assert g.backward(loss)[params[0]] is not None  # plain backward handles it


def test_reading_values_on_the_host_inside_fn_is_refused():
    """A branch on a value would be frozen into the graph: eager runs would take the other one."""
    params, loss_fn = mlp()
    rng = np.random.default_rng(2)
    x, y = g.ag_tensor(rng.normal(size=(8, 4))), g.ag_tensor(rng.normal(size=(8, 4)))

    def branching(xx, yy):
        h = g.ag_matmul(params[0], xx)
        if h.numpy().mean() > 0:
            h = g.ag_relu(h)
        return g.ag_mse_loss(h, yy)
    with pytest.raises(g.GGMLError, match="reads tensor values on the host"):
        g.ag_compile(branching, [x, y], optimizer=g.optimizer_sgd(params))
    with pytest.raises(g.GGMLError, match="reads tensor values on the host"):
        g.ag_compile(lambda a, b: g.ag_scale(loss_fn(a, b), 1.0 / (1.0 + loss_fn(a, b).item())), [x, y])
    assert g.ag_compile(loss_fn, [x, y])(x, y) == pytest.approx(loss_fn(x, y).item(), rel=1e-6)


def test_host_data_made_inside_fn_is_refused():
    drop = g.ag_dropout(0.5)
    w = g.ag_param(np.eye(3))
    x = g.ag_tensor(np.ones((3, 4)))
    state = g.get_rng_state()

    def fn(a):  # a dropout mask (drawn: an input of the step), then a tensor made from host data
        return g.ag_sum(g.ag_mul(drop(g.ag_matmul(w, a)), g.ag_tensor(np.full((3, 4), 2.0))))
    with pytest.raises(g.GGMLError, match="host data"):
        g.ag_compile(fn, [x], optimizer=g.optimizer_sgd([w]))
    assert g.get_rng_state() == state  # the mask the trace drew is put back: a refusal changes nothing


@pytest.mark.parametrize("checkpointed", [False, True])
def test_compiled_dropout_draws_the_eager_masks(checkpointed):
    """Dropout compiles: each call draws its masks from ggmlpy's stream in the eager forward's
    order, so the same seed gives the eager numbers; in a checkpointed segment the recomputation
    reads the forward's mask (it is one input of the graph). Two segments: the first is replayed
    (the last one's backward follows the forward at once and is not)."""
    def run(compiled):
        g.manual_seed(7)
        layers = [g.ag_linear(4, 16, "relu"), g.ag_dropout(0.3), g.ag_linear(16, 16, "tanh"), g.ag_dropout(0.5),
                  g.ag_linear(16, 2)]
        m = g.ag_sequential(*layers)
        opt = g.optimizer_sgd(m.parameters(), lr=0.1)
        rng = np.random.default_rng(0)
        x, y = g.ag_tensor(rng.normal(size=(4, 8))), g.ag_tensor(rng.normal(size=(2, 8)))

        def f(a, b):
            if checkpointed:
                h = g.ag_checkpoint(lambda t: layers[1](layers[0](t)), a)
                h = g.ag_checkpoint(lambda t: layers[3](layers[2](t)), h)
            else:
                h = layers[3](layers[2](layers[1](layers[0](a))))
            return g.ag_mse_loss(layers[4](h), b)
        if compiled:
            step = g.ag_compile(f, [x, y], optimizer=opt)
            return [step(x, y) for _ in range(4)], [p.numpy() for p in m.parameters()]
        out = []
        for _ in range(4):
            with g.with_grad_tape():
                loss = f(x, y)
            out.append(loss.item())
            opt.step(g.backward(loss))
        return out, [p.numpy() for p in m.parameters()]
    (le, we), (lc, wc) = run(False), run(True)
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    for a, b in zip(wc, we):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_an_optimizer_without_a_graph_form_is_refused_by_ag_compile():
    """The compiler asks the optimizer for its graph form (graph_update); one without is a clear error."""
    params, loss_fn = mlp()
    x = g.ag_tensor(np.ones((8, 2)))

    class Plain(Optimizer):  # no update of its own
        pass

    class NotAnOptimizer:
        def __init__(self, ps):
            self.params, self.t = ps, 0
    for opt in (Plain(params, lr=0.1), NotAnOptimizer(params)):
        with pytest.raises(g.GGMLError, match="no graph form"):
            g.ag_compile(loss_fn, [x, x], optimizer=opt)


def test_parity_programs_compile_to_the_same_results():
    sys.path.insert(0, str(ROOT / "scripts"))
    import parity
    fixtures = parity.DEFAULT_DIR  # tests/parity, in the repository
    compiled = 0
    for suite, case in parity.load_cases([fixtures], ["ag"]):
        if case.get("expect_error") or not case.get("loss") or case.get("device") == "gpu":
            continue
        prog = parity.Program(case)
        params = [prog.env[n] for n in prog.params if prog.env[n].requires_grad]
        try:
            step = g.ag_compile(prog.run, [], optimizer=g.optimizer_sgd(params, lr=0.1))
        except g.GGMLError as e:
            assert "ag_compile" in str(e), e
            continue
        with g.with_grad_tape():
            loss = prog.run()
        grads = g.backward(loss)
        want_loss = loss.item()
        want = [p.numpy() - 0.1 * (grads[p].numpy() if p in grads else 0) for p in params]
        assert step() == pytest.approx(want_loss, rel=1e-5, abs=1e-6), case["name"]
        for p, v in zip(params, want):
            np.testing.assert_allclose(p.numpy(), v, rtol=1e-4, atol=1e-5, err_msg=case["name"])
        compiled += 1
    assert compiled >= 40


def test_state_updated_in_place_is_refused_in_training_mode_and_compiles_in_eval_mode():
    bn = g.ag_batch_norm(3)
    w = g.ag_param(np.eye(3))
    x = g.ag_tensor(np.random.default_rng(3).normal(size=(3, 4)))
    fn = lambda a: g.ag_sum(bn(g.ag_matmul(w, a)))  # noqa: E731
    with pytest.raises(g.GGMLError, match="in place"):
        g.ag_compile(fn, [x], optimizer=g.optimizer_sgd([w]))
    g.ag_eval(bn)
    step = g.ag_compile(fn, [x], optimizer=g.optimizer_sgd([w], lr=0.0 + 1e-12))
    assert step(x) == pytest.approx(fn(x).item(), rel=1e-5)
