"""ggmlR's tests/testthat/test-ag-device.R: the device and dtype of ag tensors.

ggmlR guards its "GPU" blocks with `ggml_backend_dev_count() < 1`, which never skips (the CPU is a
device), so they run everywhere, on the CPU where there is no GPU: ag_device("gpu") falls back to
ggml_backend_init_best()'s CPU backend. ggmlpy does the same, and differs in two ways (docs/divergences.md,
"Autograd"):
  * it warns when "gpu" falls back to the CPU (ggmlR is silent);
  * a tensor reports where it really is: "cpu" after such a fallback (ggmlR labels it "gpu").
ag_default_device() reports the setting, "gpu", in both. The values compare as in R."""
import warnings

import numpy as np
import pytest

import ggmlpy as g
from .conftest import expect_equal

HAS_GPU = any(d.type in ("gpu", "igpu") and d.backend in ("Vulkan", "CUDA") for d in g.devices())
WHERE_GPU_IS = "gpu" if HAS_GPU else "cpu"  # the label of a tensor made with device="gpu"


@pytest.fixture(autouse=True)
def reset_to_cpu():
    """R's reset_to_cpu() (and ag_dtype("f32")) after every block; the fallback warning is
    tested once, in test_ag_device_gpu_does_not_error_when_backend_available."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no GPU here")
        yield
        g.ag_device("cpu")
        g.ag_dtype("f32")


def runif(seed, nrow, ncol, lo=0.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, size=(nrow, ncol))


M1234 = np.array([[1.0, 3], [2, 4]])  # R's matrix(1:4, 2, 2)


# ---- CPU path ---------------------------------------------------------------------------------------
def test_ag_tensor_device_field_defaults_to_cpu():
    x = g.ag_tensor(M1234)
    assert x.device == "cpu"
    expect_equal(x.data, M1234)


def test_ag_param_device_field_defaults_to_cpu():
    p = g.ag_param(M1234)
    assert p.device == "cpu"
    assert p.requires_grad


def test_ag_default_device_returns_cpu_by_default():
    g.ag_device("cpu")
    assert g.ag_default_device() == "cpu"


def test_ag_device_cpu_returns_previous_device_invisibly():
    g.ag_device("cpu")
    prev = g.ag_device("cpu")
    assert prev == "cpu"


def test_ag_matmul_cpu_path_unchanged_after_refactor():
    A = g.ag_param(np.eye(2))
    B = g.ag_tensor(M1234)
    expect_equal(g.ag_matmul(A, B).data, B.data)


def test_ag_relu_cpu_path_unchanged_after_refactor():
    x = g.ag_param(np.array([[-2.0, 0, 2], [-1, 1, 3]]))  # R's matrix(c(-2, -1, 0, 1, 2, 3), 2, 3)
    with g.with_grad_tape():
        out = g.ag_relu(x)
        loss = g.ag_mse_loss(out, np.zeros((2, 3)))
    gx = g.backward(loss)[x].data
    assert gx[0, 0] == 0  # -2
    assert gx[1, 0] == 0  # -1
    assert abs(gx[1, 2]) > 0  # 3


def test_full_training_loop_cpu_still_reduces_loss():
    rng = np.random.default_rng(42)
    g.ggml_set_seed(42)
    n = 32
    x_mat = rng.choice([0.0, 1.0], size=(2, n))
    y_mat = np.logical_xor(x_mat[0], x_mat[1]).astype(float).reshape(1, n)
    l1 = g.ag_linear(2, 4, activation="relu")
    l2 = g.ag_linear(4, 1, activation="sigmoid")
    opt = g.optimizer_adam(l1.params() + l2.params(), lr=0.05)
    losses = np.zeros(30)
    for i in range(30):
        with g.with_grad_tape():
            out = l2.forward(l1.forward(g.ag_tensor(x_mat)))
            loss = g.ag_mse_loss(out, g.ag_tensor(y_mat))
        opt.step(g.backward(loss))
        opt.zero_grad()
        losses[i] = loss.data[0, 0]
    assert losses[20:30].mean() < losses[0:10].mean()


def test_ag_to_device_returns_same_tensor_if_already_on_target_device():
    x = g.ag_tensor(M1234)
    y = g.ag_to_device(x, "cpu")
    assert x.id == y.id


# ---- "GPU" blocks (on the CPU where there is no GPU) ---------------------------------------------------
def test_ag_device_gpu_does_not_error_when_backend_available():
    """ggmlR: expect_silent. ggmlpy is silent with a GPU and warns when it falls back to the CPU."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g.ag_device("gpu")
    fallback = [w for w in caught if "no GPU" in str(w.message)]
    assert len(fallback) == (0 if HAS_GPU else 1)
    assert g.ag_default_device() == "gpu"


def test_ag_tensor_x_device_gpu_has_device_gpu():
    g.ag_device("gpu")
    x = g.ag_tensor(M1234, device="gpu")
    assert x.device == WHERE_GPU_IS  # ggmlR says "gpu" even on its CPU fallback
    assert x.data is not None


def test_ag_param_x_device_gpu_keeps_data_as_source_of_truth():
    g.ag_device("gpu")
    p = g.ag_param(M1234, device="gpu")
    assert p.device == WHERE_GPU_IS
    expect_equal(p.data, M1234)
    assert p.requires_grad


def test_ag_matmul_gpu_forward_equals_cpu_forward():
    a_mat, b_mat = runif(7, 2, 3), runif(71, 3, 2)
    g.ag_device("gpu")
    A = g.ag_param(a_mat, device="gpu")
    B = g.ag_tensor(b_mat, device="gpu")
    with g.with_grad_tape():
        out = g.ag_matmul(A, B)
    expect_equal(out.data, a_mat @ b_mat, rtol=1e-4, atol=0)


def test_ag_relu_gpu_forward_equals_cpu_forward():
    x_mat = runif(11, 3, 4, -1, 1)
    g.ag_device("gpu")
    x = g.ag_param(x_mat, device="gpu")
    with g.with_grad_tape():
        out = g.ag_relu(x)
    expect_equal(out.data, np.maximum(x_mat, 0), rtol=1e-6, atol=1e-7)


def test_backward_on_gpu_tensors_matches_cpu_backward():
    w_mat, x_mat, y_mat = runif(99, 2, 3, -1, 1), runif(991, 3, 1), runif(992, 2, 1)
    W_cpu = g.ag_param(w_mat)
    with g.with_grad_tape():
        loss_cpu = g.ag_mse_loss(g.ag_matmul(W_cpu, g.ag_tensor(x_mat)), y_mat)
    g_cpu = g.backward(loss_cpu)[W_cpu].data
    g.ag_device("gpu")
    W_gpu = g.ag_param(w_mat, device="gpu")
    with g.with_grad_tape():
        out_gpu = g.ag_matmul(W_gpu, g.ag_tensor(x_mat, device="gpu"))
        loss_gpu = g.ag_mse_loss(out_gpu, g.ag_tensor(y_mat, device="gpu"))
    g_gpu = g.backward(loss_gpu)[W_gpu].data
    expect_equal(g_gpu, g_cpu, rtol=1e-4, atol=1e-6)


def test_ag_gradcheck_passes_for_gpu_tensors_matmul_relu():
    g.ag_device("gpu")
    W = g.ag_param(runif(55, 2, 3, -0.5, 0.5), device="gpu")
    x = g.ag_tensor(runif(551, 3, 1), device="gpu")
    result = g.ag_gradcheck(lambda ins: g.ag_mse_loss(g.ag_relu(g.ag_matmul(ins["W"], ins["x"])), np.zeros((2, 1))),
                            {"W": W, "x": x}, atol=1e-3, quiet=True)
    assert result


def test_training_loop_on_gpu_reduces_loss_over_10_epochs():
    n = 32
    x_mat, y_mat = runif(77, 4, n), runif(771, 2, n)
    g.ag_device("gpu")
    W = g.ag_param(runif(772, 2, 4, -0.5, 0.5), device="gpu")
    b = g.ag_param(np.zeros((2, 1)), device="gpu")
    opt = g.optimizer_adam({"W": W, "b": b}, lr=0.01)
    losses = np.zeros(10)
    for i in range(10):
        x = g.ag_tensor(x_mat, device="gpu")
        y = g.ag_tensor(y_mat, device="gpu")
        with g.with_grad_tape():
            h = g.ag_relu(g.ag_add(g.ag_matmul(W, x), b))
            loss = g.ag_mse_loss(h, y)
        opt.step(g.backward(loss))
        opt.zero_grad()
        losses[i] = loss.data[0, 0]
    assert losses[9] < losses[0]


def test_ag_to_device_tensor_cpu_correctly_copies_gpu_data():
    d = runif(13, 2, 3)
    g.ag_device("gpu")
    gpu_t = g.ag_tensor(d, device="gpu")
    cpu_t = g.ag_to_device(gpu_t, "cpu")
    assert cpu_t.device == "cpu"
    expect_equal(cpu_t.data, d, rtol=1e-6, atol=0)


def test_ag_softmax_gpu_forward_equals_cpu_forward():
    x_mat = runif(21, 3, 4, -2, 2)
    e = np.exp(x_mat - x_mat.max(axis=0))
    expected = e / e.sum(axis=0)
    g.ag_device("gpu")
    x = g.ag_tensor(x_mat, device="gpu")
    with g.with_grad_tape():
        out = g.ag_softmax(x)
    expect_equal(out.data, expected, rtol=1e-5, atol=0)


def test_ag_add_gpu_with_m1_broadcast_equals_cpu():
    a_mat, b_mat = runif(22, 3, 4), runif(221, 3, 1)
    g.ag_device("gpu")
    A = g.ag_tensor(a_mat, device="gpu")
    B = g.ag_param(b_mat, device="gpu")
    with g.with_grad_tape():
        out = g.ag_add(A, B)
    expect_equal(out.data, a_mat + b_mat, rtol=1e-5, atol=0)


def test_ag_dtype_bf16_ag_matmul_gpu_result_close_to_f32():
    a_mat, b_mat = runif(51, 2, 3), runif(511, 3, 2)
    g.ag_device("gpu")
    g.ag_dtype("bf16")
    A = g.ag_param(a_mat, device="gpu")
    B = g.ag_tensor(b_mat, device="gpu")
    expected_dtype = "f16" if g.ag_device_name().startswith("Vulkan") else "bf16"  # Vulkan: f16, as ggmlR
    assert A.dtype == expected_dtype
    with g.with_grad_tape():
        out = g.ag_matmul(A, B)
    expect_equal(out.data, a_mat @ b_mat, rtol=1e-2, atol=0)  # bf16 keeps about 3 decimal digits
    assert out.dtype == expected_dtype


def test_ag_dtype_f16_ag_relu_gpu_result_close_to_f32():
    x_mat = runif(52, 2, 4, -1, 1)
    g.ag_device("gpu")
    g.ag_dtype("f16")
    x = g.ag_param(x_mat, device="gpu")
    with g.with_grad_tape():
        out = g.ag_relu(x)
    expect_equal(out.data, np.maximum(x_mat, 0), rtol=1e-2, atol=1e-3)


def test_ag_default_dtype_returns_f32_by_default():
    g.ag_dtype("f32")
    assert g.ag_default_dtype() == "f32"


def test_ag_dtype_switches_and_returns_previous():
    g.ag_dtype("f32")
    prev = g.ag_dtype("bf16")
    assert prev == "f32"
    assert g.ag_default_dtype() == "bf16"
    g.ag_dtype("f32")


def _reduce_on_gpu(seed, fn, lo=0.0, hi=1.0):
    x_mat = runif(seed, 3, 4, lo, hi)
    g.ag_device("gpu")
    x = g.ag_tensor(x_mat, device="gpu")
    with g.with_grad_tape():
        out = fn(x)
    return x_mat, out.data


def test_ag_sum_gpu_dim1_rowsums_equals_cpu():
    x_mat, got = _reduce_on_gpu(31, lambda x: g.ag_sum(x, dim=1))
    expect_equal(got, x_mat.sum(axis=1, keepdims=True), rtol=1e-5, atol=0)


def test_ag_sum_gpu_dim2_colsums_equals_cpu():
    x_mat, got = _reduce_on_gpu(32, lambda x: g.ag_sum(x, dim=2))
    expect_equal(got, x_mat.sum(axis=0, keepdims=True), rtol=1e-5, atol=0)


def test_ag_mean_gpu_dim1_rowmeans_equals_cpu():
    x_mat, got = _reduce_on_gpu(33, lambda x: g.ag_mean(x, dim=1))
    expect_equal(got, x_mat.mean(axis=1, keepdims=True), rtol=1e-5, atol=0)


def test_ag_mean_gpu_dim2_colmeans_equals_cpu():
    x_mat, got = _reduce_on_gpu(34, lambda x: g.ag_mean(x, dim=2))
    expect_equal(got, x_mat.mean(axis=0, keepdims=True), rtol=1e-5, atol=0)


def test_ag_pow_gpu_p2_sqr_equals_cpu():
    x_mat = runif(41, 2, 3, 0.1, 2)
    g.ag_device("gpu")
    with g.with_grad_tape():
        out = g.ag_pow(g.ag_tensor(x_mat, device="gpu"), 2)
    expect_equal(out.data, x_mat ** 2, rtol=1e-5, atol=0)


def test_ag_pow_gpu_p05_sqrt_equals_cpu():
    x_mat = runif(42, 2, 3, 0.1, 2)
    g.ag_device("gpu")
    with g.with_grad_tape():
        out = g.ag_pow(g.ag_tensor(x_mat, device="gpu"), 0.5)
    expect_equal(out.data, x_mat ** 0.5, rtol=1e-5, atol=0)


def test_ag_pow_gpu_p3_general_equals_cpu():
    x_mat = runif(43, 2, 3, 0.1, 2)
    g.ag_device("gpu")
    with g.with_grad_tape():
        out = g.ag_pow(g.ag_tensor(x_mat, device="gpu"), 3)
    expect_equal(out.data, x_mat ** 3, rtol=1e-4, atol=0)


def test_ag_add_gpu_with_1n_broadcast_equals_cpu():
    a_mat, b_mat = runif(23, 3, 4), runif(231, 1, 4)
    g.ag_device("gpu")
    A = g.ag_tensor(a_mat, device="gpu")
    B = g.ag_param(b_mat, device="gpu")
    with g.with_grad_tape():
        out = g.ag_add(A, B)
    expect_equal(out.data, a_mat + b_mat, rtol=1e-5, atol=0)
