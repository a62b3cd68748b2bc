"""Port of ggmlR's tests/testthat/test-meta-backend.R (ggmlR 0.8.2).

ggmlR's split_fn errors are caught and turn into ggml's MIRRORED split (sticky); ggmlpy does the
same and also says so with a RuntimeWarning, which the last test expects."""
import numpy as np  # noqa: F401
import pytest

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError

from .rlike import *  # noqa: F401,F403


def test_ggml_backend_meta_device_validates_inputs():
    """ggml_backend_meta_device validates inputs"""
    cpu_dev = ggml_backend_dev_by_type(ggml_backend_device_type_cpu())
    assert cpu_dev is not None

    # devs must be a list
    with pytest.raises(GGMLError):
        ggml_backend_meta_device("not-a-list", lambda ti, n: None)
    # split_fn must be a function
    with pytest.raises(GGMLError):
        ggml_backend_meta_device([cpu_dev], "not-a-function")
    # empty devs list
    with pytest.raises(GGMLError):
        ggml_backend_meta_device([], lambda ti, n: None)


def test_meta_backend_1_device_mirrored_round_trips_tensor_data():
    """meta backend (1 device, MIRRORED) round-trips tensor data"""
    cpu_dev = ggml_backend_dev_by_type(ggml_backend_device_type_cpu())

    def split_fn(tensor_info, n_devs):
        # MIRRORED axis = 10
        return {"axis": 10, "ne": rep(0, n_devs), "n_segments": 1}

    meta_dev = ggml_backend_meta_device([cpu_dev], split_fn)
    assert meta_dev is not None

    meta_backend = ggml_backend_dev_init(meta_dev)
    assert meta_backend is not None

    ctx = ggml_init(16 * 1024, no_alloc=True)
    tensor = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)

    buffer = ggml_backend_alloc_ctx_tensors(ctx, meta_backend)
    assert buffer is not None

    data_in = as_numeric(seq_len(10))
    ggml_backend_tensor_set_data(tensor, data_in)
    data_out = ggml_backend_tensor_get_data(tensor)
    expect_equal(data_out, data_in)

    ggml_backend_buffer_free(buffer)
    ggml_free(ctx)
    ggml_backend_free(meta_backend)


def test_meta_backend_2_devices_mirrored_round_trips_tensor_data():
    """meta backend (2 devices, MIRRORED) round-trips tensor data"""
    cpu_dev = ggml_backend_dev_by_type(ggml_backend_device_type_cpu())

    # Two references to the same CPU device: two simple devices, a full copy on each.
    def split_fn(tensor_info, n_devs):
        return {"axis": 10, "ne": rep(0, n_devs), "n_segments": 1}

    meta_dev = ggml_backend_meta_device([cpu_dev, cpu_dev], split_fn)
    assert meta_dev is not None

    meta_backend = ggml_backend_dev_init(meta_dev)
    assert meta_backend is not None

    ctx = ggml_init(16 * 1024, no_alloc=True)
    tensor = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8)

    buffer = ggml_backend_alloc_ctx_tensors(ctx, meta_backend)
    assert buffer is not None

    data_in = as_numeric(c(-3, -1, 0, 1, 2, 3, 4, 5))
    ggml_backend_tensor_set_data(tensor, data_in)
    data_out = ggml_backend_tensor_get_data(tensor)
    expect_equal(data_out, data_in)

    ggml_backend_buffer_free(buffer)
    ggml_free(ctx)
    ggml_backend_free(meta_backend)


def test_meta_backend_split_fn_receives_tensor_info_with_expected_fields():
    """meta backend split_fn receives tensor_info with expected fields"""
    cpu_dev = ggml_backend_dev_by_type(ggml_backend_device_type_cpu())

    observed = {"calls": 0, "last_info": None, "last_n_devs": None}

    def split_fn(tensor_info, n_devs):
        observed["calls"] += 1
        observed["last_info"] = tensor_info
        observed["last_n_devs"] = int(n_devs)
        return {"axis": 10, "ne": rep(0, n_devs), "n_segments": 1}

    meta_dev = ggml_backend_meta_device([cpu_dev, cpu_dev], split_fn, env=None)
    meta_backend = ggml_backend_dev_init(meta_dev)

    ctx = ggml_init(16 * 1024, no_alloc=True)
    t1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)  # noqa: F841
    buffer = ggml_backend_alloc_ctx_tensors(ctx, meta_backend)
    assert buffer is not None

    assert observed["calls"] > 0
    expect_equal(observed["last_n_devs"], 2)
    expect_type(observed["last_info"], "list")
    assert all(k in names(observed["last_info"]) for k in ["name", "type", "ne", "op", "flags"])
    expect_type(observed["last_info"]["ne"], "double")

    ggml_backend_buffer_free(buffer)
    ggml_free(ctx)
    ggml_backend_free(meta_backend)


def test_meta_backend_tolerates_a_misbehaving_split_fn_sticky_fallback():
    """meta backend tolerates a misbehaving split_fn (sticky fallback)"""
    cpu_dev = ggml_backend_dev_by_type(ggml_backend_device_type_cpu())

    # split_fn always errors: the meta backend falls back to MIRRORED and stops calling it.
    def split_fn(tensor_info, n_devs):
        raise RuntimeError("intentional split_fn failure")

    meta_dev = ggml_backend_meta_device([cpu_dev, cpu_dev], split_fn)
    meta_backend = ggml_backend_dev_init(meta_dev)

    ctx = ggml_init(16 * 1024, no_alloc=True)
    tensor = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 6)
    with pytest.warns(RuntimeWarning, match="intentional split_fn failure"):
        buffer = ggml_backend_alloc_ctx_tensors(ctx, meta_backend)
    assert buffer is not None

    data_in = as_numeric(seq_len(6))
    ggml_backend_tensor_set_data(tensor, data_in)
    data_out = ggml_backend_tensor_get_data(tensor)
    expect_equal(data_out, data_in)

    ggml_backend_buffer_free(buffer)
    ggml_free(ctx)
    ggml_backend_free(meta_backend)
