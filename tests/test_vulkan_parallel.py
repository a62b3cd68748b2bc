"""ggmlR's last eight names, ggml_vulkan_*: the split machinery over CPU devices (the same code the
Vulkan names run), what each name answers without a Vulkan device, and on lavapipe (this file runs
again in a child that sees it): device capabilities and groups, the split product and buffer
type, the transfer self-test, and shutdown releasing what ggmlpy holds."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.extras import vulkan_parallel as vp

from lavapipe import has_vulkan, rerun_on_lavapipe

CPU = g.ggml_backend_dev_by_type(g.ggml_backend_device_type_cpu())
rng = np.random.default_rng(0)
needs_vulkan = pytest.mark.skipif(not has_vulkan(), reason="no Vulkan device (the lavapipe child runs these)")
no_vulkan = pytest.mark.skipif(has_vulkan(), reason="this process has a Vulkan device")


# -- the split machinery on CPU devices -----------------------------------------------------------------------
@pytest.mark.parametrize("n_devs, weights, bands", [(2, None, (512, 588)), (3, [1, 1, 2], (0, 512, 588)),
                                                    (2, [0, 1], (0, 1100)), (1, None, (1100,))])
def test_split_product_over_cpu_devices_splits_ggmlrs_row_bands(n_devs, weights, bands):
    W, X = rng.normal(size=(1100, 8)), rng.normal(size=(3, 8))
    meta = vp.split_device([CPU] * n_devs, weights)
    np.testing.assert_allclose(vp.split_mul_mat(meta, W, X), X @ W.T, rtol=1e-5, atol=1e-5)
    states = list(meta.states.values())
    assert (1, bands, (1,)) in states  # W's rows, by ggml_vulkan_split_row_ranges
    assert any(s.axis == g.GGML_BACKEND_SPLIT_AXIS_MIRRORED for s in states)  # X, a graph input
    assert vp.split_device([CPU] * n_devs, weights) is meta  # one meta device per configuration


def test_split_bytes_are_each_devices_band():
    meta = vp.split_device([CPU, CPU], None)
    assert vp._slice_bytes(meta, 2048, 64, None) == 2048 * 64 * 4


def test_transfer_check_between_two_cpu_backends():
    a, b = g.ggml_backend_cpu_init(), g.ggml_backend_cpu_init()
    r = vp.p2p_copy_check(a, b, 1 << 20, 3)
    assert r.status == 0 and r.gbps > 0 and "verified" in r.report and "3 copies" in r.report
    r = vp.p2p_copy_check(a, a, 1000, 3)
    assert r.status == 0 and r.gbps == 0 and "loopback" in r.report


def test_row_ranges_follow_ggmlrs_float32_arithmetic():
    r = g.ggml_vulkan_split_row_ranges(5000, 4)
    assert list(r["row_low"]) == [0, 1024, 2048, 3584] and list(r["row_high"]) == [1024, 2048, 3584, 5000]
    r = g.ggml_vulkan_split_row_ranges(4096, 3, weights=[-1, 0, 0])  # no positive weight: even
    assert list(r["row_high"]) == [1024, 2560, 4096]
    with pytest.raises(g.GGMLError, match="1..16"):
        g.ggml_vulkan_split_row_ranges(10, 17)
    with pytest.raises(g.GGMLError, match="finite"):
        g.ggml_vulkan_split_row_ranges(10, 2, weights=[np.nan, 1])
    with pytest.raises(g.GGMLError, match="whole number"):
        g.ggml_vulkan_split_row_ranges(10.5, 2)


def test_hard_exit_is_available_and_ends_the_process_with_the_status_after_flushing(tmp_path):
    assert g.ggml_vulkan_hard_exit_available() is True
    code = "import ggmlpy as g\nprint('before', flush=False)\ng.ggml_vulkan_shutdown(hard=True, status=3)\nprint('after')\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 3 and r.stdout == "before\n"


def test_transports_other_than_host_staging_are_refused_or_answer_minus_2():
    with pytest.raises(g.GGMLError, match="only 'host-staging'"):
        g.ggml_vulkan_split_mul_mat(np.ones((2, 2)), np.ones((2, 2)), transport="opaque-fd")
    with pytest.raises(g.GGMLError, match="one of"):
        g.ggml_vulkan_split_buffer_type(transport="nvlink")


# -- without a Vulkan device -------------------------------------------------------------------------------
@no_vulkan
def test_without_vulkan_the_device_names_say_so():
    assert g.ggml_vulkan_device_groups()["n_groups"] == 0
    with pytest.raises(g.GGMLError, match=r"^Invalid device index: 0 \(available: none"):
        g.ggml_vulkan_device_caps(0)
    with pytest.raises(g.GGMLError, match="no Vulkan device is visible"):
        g.ggml_vulkan_split_mul_mat(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(g.GGMLError, match="no Vulkan device is visible"):
        g.ggml_vulkan_split_buffer_type()
    with pytest.raises(g.GGMLError, match=r"\[0, 0\] do not exist"):
        g.ggml_vulkan_p2p_selftest(0, 0)
    assert g.ggml_vulkan_shutdown() is None  # nothing to release


# -- on a Vulkan device (lavapipe in the child) -----------------------------------------------------------
@needs_vulkan
def test_device_caps_and_groups_from_ggml():
    caps = g.ggml_vulkan_device_caps(0)
    for k in ("async", "host_buffer", "events", "fp16", "bf16", "integer_dot_product", "coopmat_support", "uma"):
        assert isinstance(caps[k], bool), k
    assert caps["subgroup_size"] > 0 and caps["shared_memory"] > 0 and isinstance(caps["matrix_cores"], str)
    assert caps["name"] == g.ggml_vulkan_device_description(0)
    groups = g.ggml_vulkan_device_groups()
    assert groups["n_groups"] == g.ggml_vulkan_device_count()
    assert groups["report"].startswith(f"Vulkan device groups: {groups['n_groups']}")
    assert caps["name"] in groups["report"]


@needs_vulkan
def test_device_caps_report_the_drivers_standard_properties():
    """lavapipe reports subgroup sizes, operations and the push-constant limit; ggmlR's fork-only
    fields are absent; what the loader reports for the device matches what ggml reports of it."""
    from ggmlpy.core import vulkan_driver
    caps = g.ggml_vulkan_device_caps(0)
    assert isinstance(caps["subgroup_min_size"], int) and isinstance(caps["subgroup_max_size"], int)
    assert 1 <= caps["subgroup_min_size"] <= caps["subgroup_max_size"]
    assert isinstance(caps["subgroup_shuffle"], bool) and isinstance(caps["subgroup_vote"], bool)
    assert caps["max_push_constants_size"] >= 128  # Vulkan's required minimum
    for k in ("coopmat1_fa_support", "subgroup_no_shmem", "coopmat_m", "coopmat_n", "coopmat_k"):
        assert k not in caps
    phys = [p for p in vulkan_driver.physical_device_properties() if p["name"] == caps["name"]]
    assert phys, "the Vulkan loader lists ggml's device"
    p = phys[0]
    for k in ("subgroup_min_size", "subgroup_max_size", "subgroup_shuffle", "subgroup_vote",
              "max_push_constants_size", "coopmat_shapes", "arch"):
        assert caps[k] == p[k], k
    if p["vendor_id"] not in (vulkan_driver.VENDOR_AMD, vulkan_driver.VENDOR_INTEL, vulkan_driver.VENDOR_NVIDIA,
                              vulkan_driver.VENDOR_QUALCOMM):
        assert caps["arch"] == "OTHER"  # lavapipe: ggml's class for every other vendor
    if "VK_KHR_cooperative_matrix" in p["extensions"]:
        assert caps["coopmat_shapes"] and all({"m", "n", "k", "a", "b", "c", "scope"} <= set(s)
                                              for s in caps["coopmat_shapes"])
    else:
        assert caps["coopmat_shapes"] is None
    n = g.ggml_vulkan_device_count()
    with pytest.raises(g.GGMLError, match=rf"^Invalid device index: {n} \(available: 0-{n - 1}\)$"):
        g.ggml_vulkan_device_caps(n)
    with pytest.raises(g.GGMLError, match=r"^Invalid device index: -1 \(available: 0-"):
        g.ggml_vulkan_device_caps(-1)


@needs_vulkan
def test_a_two_way_split_on_one_device_and_the_buffer_type():
    W, X = rng.normal(size=(1500, 16)), rng.normal(size=(4, 16))
    Y = g.ggml_vulkan_split_mul_mat(W, X, device_ids=[0, 0], weights=[1, 1])
    np.testing.assert_allclose(Y, X @ W.T, rtol=5e-3, atol=5e-3)
    bt = g.ggml_vulkan_split_buffer_type(device_ids=[0, 0], probe=(1500, 16))
    assert bt.alloc_size == 1500 * 16 * 4 and bt.name == "vk_split[0,0]"
    assert bt.device.n_devs == 2 and bt.ptr == g.ggml_vulkan_split_buffer_type(device_ids=[0, 0]).ptr


@needs_vulkan
def test_shutdown_releases_what_ggmlpy_holds_and_later_calls_start_again():
    from ggmlpy.core.device import cached_backend_names
    from ggmlpy.runtime.state import STATE
    prev = g.ag_device("vulkan")
    x = g.ag_tensor(np.ones((3, 3)))
    g.ag_relu(x)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 2, input_shape=3)
    m = g.ggml_compile(m, loss="mse", backend="vulkan")
    before = g.ggml_predict(m, np.ones((4, 3)))
    backend = m.compilation["backend"]
    g.ggml_vulkan_shutdown()
    assert not any(n.startswith("Vulkan") for n in STATE.contexts)
    assert not any(n.startswith("Vulkan") for n in cached_backend_names())
    assert backend.freed and g.ag_default_device() == "cpu"
    np.testing.assert_array_equal(x.numpy(), np.ones((3, 3)))  # still readable
    with pytest.raises(g.DeviceError, match="released"):
        g.ag_relu(x)
    np.testing.assert_allclose(g.ggml_predict(m, np.ones((4, 3))), before, rtol=1e-6)  # a new backend
    g.ag_device("vulkan")
    np.testing.assert_array_equal(g.ag_relu(g.ag_tensor(-np.ones((2, 2)))).numpy(), np.zeros((2, 2)))
    g.ag_device(prev)
    g.ggml_vulkan_shutdown()
    g.ggml_vulkan_shutdown()  # idempotent


@needs_vulkan
def test_transfer_self_test_on_the_device():
    r = g.ggml_vulkan_p2p_selftest(0, 0, bytes=4096, iters=2)
    assert r["status"] == 0 and r["gbps"] == 0 and "Vulkan0 -> Vulkan0" in r["report"]
    assert g.ggml_vulkan_p2p_selftest(0, 0, transport="device-group")["status"] == -2


def test_this_file_on_lavapipe():
    rerun_on_lavapipe("tests/test_vulkan_parallel.py")
