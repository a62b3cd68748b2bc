"""Port of ggmlR's tests/testthat/test-vulkan-tensor-parallel.R (ggmlR 0.8.2).

ggmlR skips the whole file where Vulkan is not compiled in. ggmlpy's row-split arithmetic and
batch shards are pure, so those tests run everywhere; the ones that touch a device skip without a
Vulkan device, and the last test runs this file again on lavapipe (tests/lavapipe.py). The
multi-GPU blocks skip below ggmlR's device counts, as in ggmlR.

Where ggmlpy differs (README, "Vulkan tensor parallelism"): the split buffer type is ggml's meta
device, so its result also has a `device` entry, and `alloc_size` is the sum of each device's band
of rows in its own buffer type (ggmlR's fork pads each band's rows to 512 columns, which ggml's
Vulkan buffers do not); the only transport is host-staging (ggmlR's fd transport answers -2 where
a driver lacks it, as here).
"""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.extras.parallel_forward import _batch_shards

from lavapipe import rerun_on_lavapipe

ROUNDING = 512  # VK_SPLIT_MATRIX_ROW_PADDING
TP_TOL = 5e-2   # f16 accumulation slack for the GPU matmul


def vk_n_devices() -> int:
    return g.ggml_vulkan_device_count()


def need(n: int):
    if vk_n_devices() < n:
        pytest.skip("no Vulkan device" if n == 1 else f"need >= {n} Vulkan devices")


# -- Stage E2: pure row-split math ------------------------------------------------------------------------------
def test_even_split_covers_all_rows_contiguously():
    nrows = 4096
    r = g.ggml_vulkan_split_row_ranges(nrows, 2)
    assert list(r) == ["row_low", "row_high"]
    assert len(r["row_low"]) == 2 and len(r["row_high"]) == 2
    assert r["row_low"][0] == 0 and r["row_high"][-1] == nrows
    assert r["row_high"][0] == r["row_low"][1]
    assert r["row_high"][0] == 2048


def test_single_device_owns_all_rows():
    r = g.ggml_vulkan_split_row_ranges(1000, 1)
    assert list(r["row_low"]) == [0] and list(r["row_high"]) == [1000]


def test_boundaries_are_rounded_down_to_the_padding_granularity():
    r = g.ggml_vulkan_split_row_ranges(5000, 4)
    interior_highs = r["row_high"][:-1]
    assert np.all(interior_highs % ROUNDING == 0), f"interior highs: {interior_highs}"
    assert r["row_high"][3] == 5000


def test_ranges_are_total_monotone_and_non_overlapping_for_many_configs():
    for nrows in (0, 1, 511, 512, 513, 4096, 100000):
        for nd in range(1, 9):
            r = g.ggml_vulkan_split_row_ranges(nrows, nd)
            low, high = r["row_low"], r["row_high"]
            assert np.all(high >= low), f"nrows={nrows} nd={nd} inverted range"
            if nd > 1:
                np.testing.assert_array_equal(high[:-1], low[1:], err_msg=f"nrows={nrows} nd={nd} not contiguous")
            assert low[0] == 0 and high[nd - 1] == nrows
            assert np.all((low >= 0) & (high <= nrows)), f"nrows={nrows} nd={nd} out of bounds"


def test_weighted_split_allocates_more_rows_to_heavier_devices():
    nrows = 8192
    r = g.ggml_vulkan_split_row_ranges(nrows, 2, weights=[3, 1])
    rows_dev0 = r["row_high"][0] - r["row_low"][0]
    rows_dev1 = r["row_high"][1] - r["row_low"][1]
    assert rows_dev0 > rows_dev1
    assert rows_dev0 + rows_dev1 == nrows
    assert abs(rows_dev0 / rows_dev1 - 3) < 0.2


def test_weights_length_must_match_n_devices():
    with pytest.raises(g.GGMLError, match="weights length"):
        g.ggml_vulkan_split_row_ranges(4096, 2, weights=[1, 1, 1])


def test_n_devices_must_be_positive():
    with pytest.raises(g.GGMLError, match="n_devices"):
        g.ggml_vulkan_split_row_ranges(4096, 0)


# -- Stage E4a: transfer self-test -------------------------------------------------------------------------------
def test_fd_loopback_self_test_verifies_data_on_a_single_device():
    need(1)
    r = g.ggml_vulkan_p2p_selftest(0, 0, bytes=1 * 1024 * 1024, iters=1)
    if r["status"] == -2:
        pytest.skip("transport not supported on this device")
    assert r["status"] == 0
    assert isinstance(r["report"], str) and r["report"]


def test_cross_device_p2p_transfers_data_correctly_and_reports_bandwidth():
    need(2)
    r = g.ggml_vulkan_p2p_selftest(0, 1, bytes=64 * 1024 * 1024, iters=50)
    if r["status"] == -2:
        pytest.skip("transport not supported on these devices")
    assert r["status"] == 0
    assert r["gbps"] > 0
    print(f"\n[E4a] dev0->dev1 P2P: {r['gbps']:.2f} GB/s\n{r['report']}")


# -- Stage E3: tensor-parallel mul_mat -------------------------------------------------------------------------
def test_split_mul_mat_on_a_single_device_equals_x_t_w():
    need(1)
    rng = np.random.default_rng(1)
    N, K, M = 16, 8, 5
    W = rng.normal(size=(N, K))
    X = rng.normal(size=(M, K))
    Y = g.ggml_vulkan_split_mul_mat(W, X, n_devices=1)
    assert Y.shape == (M, N)
    assert np.max(np.abs(Y - X @ W.T)) < TP_TOL


def test_split_mul_mat_across_2_devices_equals_the_single_device_result():
    need(2)
    rng = np.random.default_rng(2)
    N, K, M = 2048, 64, 4
    W, X = rng.normal(size=(N, K)), rng.normal(size=(M, K))
    ref = X @ W.T
    Y = g.ggml_vulkan_split_mul_mat(W, X, n_devices=2)
    assert Y.shape == (M, N)
    assert np.max(np.abs(Y - ref)) < TP_TOL


def test_weighted_split_still_computes_the_correct_product():
    need(2)
    rng = np.random.default_rng(3)
    N, K, M = 2048, 32, 3
    W, X = rng.normal(size=(N, K)), rng.normal(size=(M, K))
    Y = g.ggml_vulkan_split_mul_mat(W, X, n_devices=2, weights=[3, 1])
    assert np.max(np.abs(Y - X @ W.T)) < TP_TOL


def test_split_mul_mat_validates_shapes():
    need(1)
    rng = np.random.default_rng(0)
    W = rng.normal(size=(16, 8))
    X = rng.normal(size=(5, 7))
    with pytest.raises(g.GGMLError, match="input dimension"):
        g.ggml_vulkan_split_mul_mat(W, X, n_devices=1)


# -- Stage E4: split buffer type ---------------------------------------------------------------------------------
def test_split_buffer_type_factory_returns_a_named_config():
    need(1)
    bt = g.ggml_vulkan_split_buffer_type(n_devices=1)
    assert list(bt)[:3] == ["ptr", "name", "alloc_size"]  # ggmlR's; ggmlpy adds the meta "device"
    assert isinstance(bt["name"], str) and bt["name"]
    assert "vk_split" in bt["name"]
    assert bt["ptr"] is not None


def split_alloc_bytes(N, K, n_devices, weights=None):
    """Each device's band of an f32 [N, K] weight (ggmlR's formula without its 512-column row
    padding, which ggml's Vulkan buffers do not have)."""
    r = g.ggml_vulkan_split_row_ranges(N, n_devices, weights=weights)
    rows = r["row_high"] - r["row_low"]
    return float(np.sum(rows) * K * 4)


def test_even_split_alloc_size_matches_the_slice_formula():
    need(1)
    N, K = 2048, 64
    bt = g.ggml_vulkan_split_buffer_type(n_devices=1, probe=(N, K))
    assert bt["alloc_size"] == split_alloc_bytes(N, K, 1)


def test_split_alloc_size_equals_the_sum_of_per_device_slice_bytes():
    need(2)
    N, K = 4096, 128
    bt = g.ggml_vulkan_split_buffer_type(n_devices=2, probe=(N, K))
    assert bt["alloc_size"] == split_alloc_bytes(N, K, 2)


def test_buffer_type_is_cached_same_config_returns_the_same_pointer():
    need(1)
    a = g.ggml_vulkan_split_buffer_type(n_devices=1)
    b = g.ggml_vulkan_split_buffer_type(n_devices=1)
    assert a["ptr"] == b["ptr"] and a["device"] is b["device"]


def test_weighted_split_total_matches_the_slice_formula():
    need(2)
    N, K = 4096, 64
    bt = g.ggml_vulkan_split_buffer_type(n_devices=2, weights=[3, 1], probe=(N, K))
    assert bt["alloc_size"] == split_alloc_bytes(N, K, 2, weights=[3, 1])


# -- Stage E6.1: explicit device subsets ------------------------------------------------------------------------
def test_device_ids_single_device_matches_the_default_path():
    need(1)
    rng = np.random.default_rng(4)
    N, K, M = 32, 8, 4
    W, X = rng.normal(size=(N, K)), rng.normal(size=(M, K))
    Y = g.ggml_vulkan_split_mul_mat(W, X, device_ids=[0])
    assert np.max(np.abs(Y - X @ W.T)) < TP_TOL


def test_split_buffer_type_distinguishes_device_subsets_in_its_name_and_cache():
    need(4)
    a = g.ggml_vulkan_split_buffer_type(device_ids=[0, 1], probe=(2048, 64))
    b = g.ggml_vulkan_split_buffer_type(device_ids=[2, 3], probe=(2048, 64))
    assert a["name"] != b["name"]
    assert a["alloc_size"] == b["alloc_size"]


def test_split_mul_mat_on_the_second_gpu_group_2_3_equals_the_reference():
    need(4)
    rng = np.random.default_rng(5)
    N, K, M = 2048, 64, 4
    W, X = rng.normal(size=(N, K)), rng.normal(size=(M, K))
    Y = g.ggml_vulkan_split_mul_mat(W, X, device_ids=[2, 3])
    assert np.max(np.abs(Y - X @ W.T)) < TP_TOL


# -- Stage E6.2: TP x DP hybrid ---------------------------------------------------------------------------------
def test_batch_shards_are_contiguous_complete_and_near_even():
    s = _batch_shards(8, 2)  # 0-based rows here (R's 1:8)
    assert len(s) == 2 and list(np.concatenate(s)) == list(range(8)) and [len(x) for x in s] == [4, 4]
    s = _batch_shards(7, 2)
    assert [len(x) for x in s] == [4, 3] and list(np.concatenate(s)) == list(range(7))
    s = _batch_shards(2, 4)
    assert list(np.concatenate(s)) == [0, 1] and all(len(x) >= 1 for x in s)


def test_tpxdp_forward_equals_x_t_w_across_2_replicas_x_tp2():
    need(4)
    rng = np.random.default_rng(6)
    N, K, M = 2048, 64, 8
    W, X = rng.normal(size=(N, K)), rng.normal(size=(M, K))
    Y = g.ggml_tp_dp_forward(W, X, replicas=[[0, 1], [2, 3]])
    assert Y.shape == (M, N)
    assert np.max(np.abs(Y - X @ W.T)) < TP_TOL


def test_tpxdp_with_a_single_replica_reduces_to_plain_tp():
    need(2)
    rng = np.random.default_rng(7)
    N, K, M = 2048, 32, 5
    W, X = rng.normal(size=(N, K)), rng.normal(size=(M, K))
    Y = g.ggml_tp_dp_forward(W, X, replicas=[[0, 1]])
    assert np.max(np.abs(Y - X @ W.T)) < TP_TOL


# -- Stage E7: pipeline parallelism -----------------------------------------------------------------------------
def _pp_build_stages(K, M, W1, W2, dev1, dev2):
    def mk(dev, Wt, relu):
        def build(ctx, inp):
            w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, K, K)
            z = g.ggml_mul_mat(ctx, w, inp)
            out = g.ggml_relu(ctx, z) if relu else z
            return {"output": out, "set_weights": lambda: g.ggml_backend_tensor_set_data(w, Wt.ravel(order="F"))}
        return {"device": dev, "in_shape": (K, M), "build": build}
    return [mk(dev1, W1, True), mk(dev2, W2, False)]


def test_2_stage_pipeline_on_one_device_equals_the_composed_reference():
    need(1)
    rng = np.random.default_rng(8)
    K, M = 64, 8
    W1, W2 = rng.normal(size=(K, K)), rng.normal(size=(K, K))
    X = rng.normal(size=(K, M))
    stages = _pp_build_stages(K, M, W1, W2, dev1=0, dev2=0)
    y = g.ggml_pp_forward(stages, x=X.ravel(order="F"), out_shape=(K, M))
    Y = y.reshape((K, M), order="F")
    Y_ref = W2.T @ np.maximum(W1.T @ X, 0)
    assert Y.shape == (K, M)
    assert np.max(np.abs(Y - Y_ref)) < TP_TOL


def test_pipeline_handoff_really_crosses_devices():
    need(2)
    rng = np.random.default_rng(9)
    K, M = 128, 4
    W1, W2 = rng.normal(size=(K, K)), rng.normal(size=(K, K))
    X = rng.normal(size=(K, M))
    y = g.ggml_pp_forward(_pp_build_stages(K, M, W1, W2, dev1=0, dev2=1), x=X.ravel(order="F"), out_shape=(K, M))
    Y_ref = W2.T @ np.maximum(W1.T @ X, 0)
    assert np.max(np.abs(y.reshape((K, M), order="F") - Y_ref)) < TP_TOL


def test_single_stage_pipeline_is_just_a_plain_forward():
    need(1)
    rng = np.random.default_rng(10)
    K, M = 32, 3
    W1 = rng.normal(size=(K, K))
    X = rng.normal(size=(K, M))

    def build(ctx, inp):
        w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, K, K)
        return {"output": g.ggml_mul_mat(ctx, w, inp),
                "set_weights": lambda: g.ggml_backend_tensor_set_data(w, W1.ravel(order="F"))}
    y = g.ggml_pp_forward([{"device": 0, "in_shape": (K, M), "build": build}], x=X.ravel(order="F"), out_shape=(K, M))
    assert np.max(np.abs(y.reshape((K, M), order="F") - W1.T @ X)) < TP_TOL


# -- Stage E7.2: PP x DP hybrid ---------------------------------------------------------------------------------
def _ppdp_make_stages_factory(K, W1, W2):
    def make_stages(devices, m):
        return _pp_build_stages(K, m, W1, W2, devices[0], devices[1])
    return make_stages


def test_ppxdp_over_2_pipeline_replicas_on_one_device_equals_the_reference():
    need(1)
    rng = np.random.default_rng(11)
    K, M = 64, 8
    W1, W2 = rng.normal(size=(K, K)), rng.normal(size=(K, K))
    X = rng.normal(size=(M, K))
    Y = g.ggml_pp_dp_forward(_ppdp_make_stages_factory(K, W1, W2), X, replicas=[[0, 0], [0, 0]], out_ncol=K)
    Y_ref = (W2.T @ np.maximum(W1.T @ X.T, 0)).T
    assert Y.shape == (M, K)
    assert np.max(np.abs(Y - Y_ref)) < TP_TOL


def test_ppxdp_2_x_2_on_four_gpus_equals_the_reference():
    need(4)
    rng = np.random.default_rng(12)
    K, M = 128, 8
    W1, W2 = rng.normal(size=(K, K)), rng.normal(size=(K, K))
    X = rng.normal(size=(M, K))
    Y = g.ggml_pp_dp_forward(_ppdp_make_stages_factory(K, W1, W2), X, replicas=[[0, 1], [2, 3]], out_ncol=K)
    Y_ref = (W2.T @ np.maximum(W1.T @ X.T, 0)).T
    assert np.max(np.abs(Y - Y_ref)) < TP_TOL


def test_this_file_on_lavapipe():
    rerun_on_lavapipe("tests/ggmlr/test_vulkan_tensor_parallel.py")
