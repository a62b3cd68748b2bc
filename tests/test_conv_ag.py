"""ag_conv2d and ag_max_pool2d: values against torch, gradients against finite differences and
torch, the compiled backward against the eager one, forward mode, NaN, and bad arguments."""
import numpy as np
import pytest

import ggmlpy as g

try:
    import torch
except ImportError:  # the tests against PyTorch skip; the others run without it
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="compares against PyTorch: pip install torch")

rng = np.random.default_rng(11)

# x [W, H, C, N], w [KW, KH, C, OC], stride, padding, dilation (pairs along W, then H), bias
CONV_CASES = [
    ((7, 6, 3, 2), (3, 3, 3, 5), 1, 0, 1, True),
    ((5, 5, 3, 1), (1, 1, 3, 4), 1, 0, 1, False),         # 1x1 kernel, one image
    ((9, 8, 2, 3), (3, 3, 2, 3), 2, 1, 1, True),          # stride 2, padding
    ((8, 9, 3, 2), (3, 2, 3, 5), (2, 1), (1, 0), (1, 2), True),  # pairs, dilation
    ((6, 6, 1, 2), (2, 2, 1, 1), 1, 1, 2, True),          # one channel in and out
]


def _torch_conv(x, w, b, stride, padding, dilation):
    """torch.conv2d on ggml's [W, H, C, N] layout (torch's pairs are along H, then W)."""
    flip = lambda v: (v, v) if isinstance(v, int) else (v[1], v[0])  # noqa: E731
    tx = torch.tensor(x.transpose(3, 2, 1, 0), dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w.transpose(3, 2, 1, 0), dtype=torch.float64, requires_grad=True)
    tb = None if b is None else torch.tensor(b, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.conv2d(tx, tw, tb, stride=flip(stride), padding=flip(padding), dilation=flip(dilation))
    return y, (tx, tw, tb)


def _layout(t):
    return t.detach().numpy().transpose(3, 2, 1, 0)


def _conv_inputs(xs, ws, bias):
    x, w = rng.uniform(-1, 1, xs), rng.uniform(-1, 1, ws)
    return x, w, rng.uniform(-1, 1, ws[3]) if bias else None


@needs_torch
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x{}w{}s{}p{}d{}b{}".format(*c))
def test_conv2d_values_and_gradients_match_torch(case):
    xs, ws, stride, padding, dilation, bias = case
    x, w, b = _conv_inputs(xs, ws, bias)
    ref, leaves = _torch_conv(x, w, b, stride, padding, dilation)
    u = rng.uniform(-1, 1, ref.shape)
    (ref * torch.tensor(u)).sum().backward()
    params = [g.ag_param(x), g.ag_param(w)] + ([g.ag_param(b)] if bias else [])
    with g.with_grad_tape():
        y = g.ag_conv2d(*params[:2], params[2] if bias else None, stride=stride, padding=padding, dilation=dilation)
        loss = g.ag_sum(g.ag_mul(y, g.ag_tensor(u.transpose(3, 2, 1, 0))))
    np.testing.assert_allclose(y.numpy().reshape(_layout(ref).shape), _layout(ref), rtol=1e-5, atol=1e-5)
    grads = g.backward(loss)
    want = [_layout(leaves[0].grad), _layout(leaves[1].grad)] + ([leaves[2].grad.numpy()] if bias else [])
    for p, ref_grad in zip(params, want):
        np.testing.assert_allclose(grads[p].numpy().reshape(ref_grad.shape), ref_grad, rtol=1e-4, atol=1e-5)
    graph = g.ag_backward_graph(loss)  # the compiled backward, node for node the eager one
    for p in params:
        np.testing.assert_allclose(graph[p].numpy(), grads[p].numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", CONV_CASES[2:4], ids=["stride2", "dilation"])
def test_conv2d_gradcheck(case):
    xs, ws, stride, padding, dilation, bias = case
    x, w, b = _conv_inputs(xs, ws, bias)
    params = [g.ag_param(x), g.ag_param(w), g.ag_param(b)]
    assert g.ag_gradcheck(lambda: g.ag_sum(g.ag_tanh(g.ag_conv2d(*params, stride=stride, padding=padding,
                                                                  dilation=dilation))), params, atol=1e-3)


# x [W, H, C, N], kernel, stride
POOL_CASES = [((8, 8, 3, 2), 2, None), ((7, 5, 3, 2), (3, 2), (2, 3)), ((6, 6, 2, 1), 3, 1), ((5, 4, 1, 2), 1, 1)]


def _torch_pool(x, k, s):
    flip = lambda v: (v, v) if isinstance(v, int) else (v[1], v[0])  # noqa: E731
    tx = torch.tensor(x.transpose(3, 2, 1, 0), requires_grad=True)
    y = torch.nn.functional.max_pool2d(tx, flip(k), flip(k if s is None else s))
    return y, tx


@needs_torch
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: "x{}k{}s{}".format(*c))
def test_max_pool2d_values_and_gradients_match_torch(case):
    xs, k, s = case
    x = rng.permutation(np.arange(np.prod(xs), dtype=np.float64)).reshape(xs) / np.prod(xs)  # no ties
    ref, tx = _torch_pool(x, k, s)
    u = rng.uniform(-1, 1, ref.shape)
    (ref * torch.tensor(u)).sum().backward()
    p = g.ag_param(x)
    with g.with_grad_tape():
        y = g.ag_max_pool2d(p, k, s)
        loss = g.ag_sum(g.ag_mul(y, g.ag_tensor(u.transpose(3, 2, 1, 0))))
    np.testing.assert_allclose(y.numpy().reshape(_layout(ref).shape), _layout(ref), rtol=1e-6)
    grads = g.backward(loss)
    np.testing.assert_allclose(grads[p].numpy().reshape(xs), _layout(tx.grad), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.ag_backward_graph(loss)[p].numpy(), grads[p].numpy(), rtol=1e-6)


def _cnn(x, w, b):
    return g.ag_sum(g.ag_tanh(g.ag_max_pool2d(g.ag_relu(g.ag_conv2d(x, w, b, padding=1)), 2)))


def test_jvp_matches_central_differences_and_the_vjp():
    x, w, b = _conv_inputs((6, 6, 3, 2), (3, 3, 3, 4), True)
    dx, dw, db = (rng.uniform(-1, 1, a.shape) for a in (x, w, b))
    _, tangent = g.jvp(_cnn, [g.ag_tensor(a) for a in (x, w, b)], [g.ag_tensor(a) for a in (dx, dw, db)])
    h = 1e-3  # relu and max have kinks: a small step, compared loosely

    def f(s):
        return _cnn(*(g.ag_tensor(a + s * d) for a, d in ((x, dx), (w, dw), (b, db)))).item()
    np.testing.assert_allclose(tangent.item(), (f(h) - f(-h)) / (2 * h), rtol=2e-2)
    params = [g.ag_param(a) for a in (x, w, b)]
    with g.with_grad_tape():
        loss = _cnn(*params)
    grads = g.backward(loss)
    vjp = sum(np.sum(grads[p].numpy() * d.reshape(grads[p].numpy().shape)) for p, d in zip(params, (dx, dw, db)))
    np.testing.assert_allclose(tangent.item(), vjp, rtol=1e-4)


@needs_torch
def test_hvp_through_convolution_and_pooling():
    """Forward over reverse: the rules' primitives differentiate again (against torch's double backward)."""
    x, w, b = _conv_inputs((6, 6, 2, 2), (3, 3, 2, 3), True)
    v = rng.uniform(-1, 1, w.shape)
    X, B = g.ag_tensor(x), g.ag_tensor(b)
    _, hv = g.hvp(lambda k: _cnn(X, k, B), g.ag_tensor(w), g.ag_tensor(v))

    def torch_loss(tw):
        y, _ = None, None
        tx = torch.tensor(x.transpose(3, 2, 1, 0))
        z = torch.relu(torch.nn.functional.conv2d(tx, tw, torch.tensor(b), padding=1))
        return torch.tanh(torch.nn.functional.max_pool2d(z, 2)).sum()
    tw = torch.tensor(w.transpose(3, 2, 1, 0))
    _, want = torch.autograd.functional.hvp(torch_loss, tw, torch.tensor(v.transpose(3, 2, 1, 0)))
    np.testing.assert_allclose(hv.numpy(), _layout(want), rtol=1e-4, atol=1e-5)


def test_compiled_training_step_equals_eager():
    x, w, b = _conv_inputs((6, 6, 3, 4), (3, 3, 3, 4), True)
    runs = []
    for compiled in (False, True):
        params = [g.ag_param(w), g.ag_param(b)]
        X = g.ag_tensor(x)
        fn = lambda a: _cnn(a, *params)  # noqa: E731
        opt = g.optimizer_sgd(params, lr=0.1)
        if compiled:
            step = g.ag_compile(fn, [X], optimizer=opt)
            losses = [step(X) for _ in range(3)]
        else:
            losses = []
            for _ in range(3):
                with g.with_grad_tape():
                    loss = fn(X)
                grads = g.backward(loss)
                opt.step(grads)
                losses.append(loss.item())
        runs.append((losses, [p.numpy() for p in params]))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    for a, e in zip(runs[1][1], runs[0][1]):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-7)


def test_nan_propagates():
    x = rng.uniform(-1, 1, (6, 6, 2, 1))
    x[1, 1, 0, 0] = np.nan
    y = g.ag_conv2d(g.ag_tensor(x), g.ag_tensor(np.ones((3, 3, 2, 2))), stride=1).numpy()
    assert np.isnan(y[:2, :2]).all() and np.isfinite(y[3:, 3:]).all()
    p = g.ag_max_pool2d(g.ag_tensor(x), 2).numpy()
    assert np.isnan(p[0, 0, 0]) and np.isfinite(p).sum() == p.size - 1
    inf = np.full((4, 4, 1, 1), -1.0)
    inf[0, 0, 0, 0] = np.inf
    assert g.ag_max_pool2d(g.ag_tensor(inf), 2).numpy().ravel()[0] == np.inf
    low = np.full((4, 4, 1, 1), -np.inf)  # ggml's pool starts from -FLT_MAX
    low[2, 2, 0, 0], low[0, 2, 0, 0] = 1.0, -3.4028234663852886e38
    np.testing.assert_array_equal(g.ag_max_pool2d(g.ag_tensor(low), 2).numpy().ravel(),
                                  [-np.inf, -3.4028234663852886e38, -np.inf, 1.0])


def test_bad_arguments_are_clear_errors():
    x, w = g.ag_tensor(np.zeros((5, 5, 3, 1))), g.ag_tensor(np.zeros((3, 3, 2, 4)))
    with pytest.raises(g.GGMLError, match="ag_conv2d: w .* has 2 input channels, x .* has 3"):
        g.ag_conv2d(x, w)
    with pytest.raises(g.GGMLError, match="ag_conv2d: w .* has 2 input channels, x .* has 1"):
        g.ag_conv2d(g.ag_tensor(np.zeros((5, 5))), w)  # [W, H]: one image of one channel
    with pytest.raises(g.GGMLError, match="stride must be an int >= 1"):
        g.ag_conv2d(x, g.ag_tensor(np.zeros((3, 3, 3, 4))), stride=0)
    with pytest.raises(g.GGMLError, match="does not fit"):
        g.ag_conv2d(x, g.ag_tensor(np.zeros((3, 3, 3, 4))), dilation=3)
    with pytest.raises(g.GGMLError, match="one value per output channel"):
        g.ag_conv2d(x, g.ag_tensor(np.zeros((3, 3, 3, 4))), g.ag_tensor(np.zeros(3)))
    with pytest.raises(g.GGMLError, match="kernel .* larger than the images"):
        g.ag_max_pool2d(x, 6)
    with pytest.raises(g.GGMLError, match="padding must be"):
        g.ag_conv2d(x, g.ag_tensor(np.zeros((3, 3, 3, 4))), padding=(1, 2, 3))
    with pytest.raises(g.GGMLError, match="ag_flatten_layer: expected an ag tensor, got function"):
        g.ag_flatten_layer()(lambda: x)  # was an AttributeError (the fuzzer's "unchecked input")


def test_forward_mode_through_overlapping_pooling_is_refused():
    with pytest.raises(g.GGMLError, match="windows that do not overlap"):
        g.jvp(lambda t: g.ag_max_pool2d(t, 3, 1), [g.ag_tensor(rng.uniform(size=(6, 6, 1, 1)))],
              [g.ag_tensor(rng.uniform(size=(6, 6, 1, 1)))])


def test_layers_make_a_keras_style_cnn():
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_conv2d_layer(3, 4, 3, padding=1, activation="relu"), g.ag_max_pool2d_layer(2),
                            g.ag_flatten_layer(), g.ag_linear(4 * 4 * 4, 2))
    x = g.ag_tensor(rng.uniform(-1, 1, (8, 8, 3, 5)))
    assert model(x).shape == (2, 5)
    assert model.num_parameters() == 3 * 3 * 3 * 4 + 4 + 64 * 2 + 2
    assert "ag_conv2d_layer(3, 4, kernel_size=(3, 3)" in repr(model)
    assert "[W 3x3x3x4, b 4x1: 112 parameters]" in repr(model)
    with pytest.raises(g.GGMLError, match="ag_conv2d_layer: kernel_size must be"):
        g.ag_conv2d_layer(3, 4, 0)
    with pytest.raises(g.GGMLError, match="ag_conv2d_layer: activation must be"):
        g.ag_conv2d_layer(3, 4, 3, activation="swish")


def test_a_saved_cnn_loads_with_its_architecture(tmp_path):
    g.manual_seed(1)
    model = g.ag_sequential(g.ag_conv2d_layer(2, 3, (3, 2), stride=(1, 2), padding=1, activation="tanh"),
                            g.ag_max_pool2d_layer(2, stride=(2, 1)), g.ag_flatten_layer())
    x = g.ag_tensor(rng.uniform(-1, 1, (6, 7, 2, 3)))
    path = tmp_path / "cnn.gguf"
    g.ag_save_model(model, str(path))
    again = g.ag_load_model(str(path))
    np.testing.assert_array_equal(again(x).numpy(), g.ag_eval(model)(x).numpy())
