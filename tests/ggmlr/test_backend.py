"""Port of ggmlR's tests/testthat/test-backend.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_device_type_constants_work():
    """device type constants work"""
    expect_type(ggml_backend_device_type_cpu(), "integer")
    expect_type(ggml_backend_device_type_gpu(), "integer")
    expect_type(ggml_backend_device_type_igpu(), "integer")
    expect_type(ggml_backend_device_type_accel(), "integer")

    expect_equal(ggml_backend_device_type_cpu(), 0)


def test_buffer_usage_constants_work():
    """buffer usage constants work"""
    expect_type(ggml_backend_buffer_usage_any(), "integer")
    expect_type(ggml_backend_buffer_usage_weights(), "integer")
    expect_type(ggml_backend_buffer_usage_compute(), "integer")


def test_device_enumeration_works():
    """device enumeration works"""
    count = ggml_backend_dev_count()
    expect_type(count, "double")
    assert count >= 1

    dev = ggml_backend_dev_get(0)
    assert not ((dev is None))

    dev_cpu = ggml_backend_dev_by_name("CPU")
    assert not ((dev_cpu is None))

    dev_cpu2 = ggml_backend_dev_by_type(ggml_backend_device_type_cpu())
    assert not ((dev_cpu2 is None))


def test_device_properties_work():
    """device properties work"""
    dev = ggml_backend_dev_get(0)
    if (dev is None):
        pytest.skip("No device available")

    name = ggml_backend_dev_name(dev)
    expect_type(name, "character")
    assert nchar(name) > 0

    desc = ggml_backend_dev_description(dev)
    expect_type(desc, "character")

    mem = ggml_backend_dev_memory(dev)
    expect_type(mem, "double")
    assert length(mem) == 2
    assert "free"  in  names(mem)
    assert "total"  in  names(mem)

    dtype = ggml_backend_dev_type(dev)
    expect_type(dtype, "integer")

    props = ggml_backend_dev_get_props(dev)
    expect_type(props, "list")
    assert "name"  in  names(props)
    assert "description"  in  names(props)


def test_backend_registry_works():
    """backend registry works"""
    count = ggml_backend_reg_count()
    expect_type(count, "double")
    assert count >= 1

    reg = ggml_backend_reg_get(0)
    assert not ((reg is None))

    name = ggml_backend_reg_name(reg)
    expect_type(name, "character")

    # Get device count in registry. ggmlR lists CPU first; ggml 0.25.3 lists it last (here Vulkan,
    # with no visible device, comes first), so count the CPU registry's devices.
    reg = ggml_backend_reg_by_name("CPU")
    dev_count = ggml_backend_reg_dev_count(reg)
    expect_type(dev_count, "double")
    assert dev_count >= 1

    dev = ggml_backend_reg_dev_get(reg, 0)
    assert not ((dev is None))

    reg_cpu = ggml_backend_reg_by_name("CPU")
    assert not ((reg_cpu is None))


def test_backend_initialization_works():
    """backend initialization works"""
    backend_cpu = ggml_backend_init_by_name("CPU")
    assert not ((backend_cpu is None))

    name = ggml_backend_name(backend_cpu)
    expect_type(name, "character")
    expect_equal(name, "CPU")

    dev = ggml_backend_get_device(backend_cpu)
    assert not ((dev is None))

    ggml_backend_synchronize(backend_cpu)

    ggml_backend_free(backend_cpu)


def test_init_by_type_works():
    """init by type works"""
    backend = ggml_backend_init_by_type(ggml_backend_device_type_cpu())
    assert not ((backend is None))
    ggml_backend_free(backend)


def test_init_best_works():
    """init best works"""
    backend = ggml_backend_init_best()
    assert not ((backend is None))
    ggml_backend_free(backend)


def test_device_init_works():
    """device init works"""
    dev = ggml_backend_dev_get(0)
    if (dev is None):
        pytest.skip("No device available")

    backend = ggml_backend_dev_init(dev)
    assert not ((backend is None))
    ggml_backend_free(backend)


def test_buffer_management_works():
    """buffer management works"""
    backend = ggml_backend_cpu_init()
    if (backend is None):
        pytest.skip("Could not initialize CPU backend")

    ctx = ggml_init(16 * 1024, no_alloc = True)
    tensor = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)

    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)
    if (buffer is None):
        pytest.skip("Could not allocate buffer")

    name = ggml_backend_buffer_name(buffer)
    expect_type(name, "character")

    size = ggml_backend_buffer_get_size(buffer)
    expect_type(size, "double")
    assert size > 0

    is_host = ggml_backend_buffer_is_host(buffer)
    expect_type(is_host, "logical")
    assert is_host

    usage = ggml_backend_buffer_get_usage(buffer)
    expect_type(usage, "integer")

    ggml_backend_buffer_set_usage(buffer, ggml_backend_buffer_usage_weights())
    usage2 = ggml_backend_buffer_get_usage(buffer)
    expect_equal(usage2, ggml_backend_buffer_usage_weights())

    ggml_backend_buffer_clear(buffer, 0)

    ggml_backend_buffer_reset(buffer)

    ggml_backend_buffer_free(buffer)
    ggml_free(ctx)
    ggml_backend_free(backend)


def test_tensor_data_operations_work():
    """tensor data operations work"""
    backend = ggml_backend_cpu_init()
    if (backend is None):
        pytest.skip("Could not initialize CPU backend")

    ctx = ggml_init(16 * 1024, no_alloc = True)
    tensor = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)

    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)
    if (buffer is None):
        pytest.skip("Could not allocate buffer")

    data_in = as_numeric(rng(1, 10))
    ggml_backend_tensor_set_data(tensor, data_in)

    data_out = ggml_backend_tensor_get_data(tensor)
    expect_equal(data_out, data_in)

    ggml_backend_buffer_free(buffer)
    ggml_free(ctx)
    ggml_backend_free(backend)


def test_device_supports_operation_check_works():
    """device supports operation check works"""
    dev = ggml_backend_dev_get(0)
    if (dev is None):
        pytest.skip("No device available")

    ctx = ggml_init(16 * 1024)
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    c = ggml_add(ctx, a, b)

    supports = ggml_backend_dev_supports_op(dev, c)
    expect_type(supports, "logical")

    ggml_free(ctx)


def test_load_all_backends_works():
    """load all backends works"""
    ggml_backend_load_all()
    names = [ggml_backend_reg_name(ggml_backend_reg_get(i)) for i in range(ggml_backend_reg_count())]
    assert "CPU" in names and len(names) == len(set(names))  # loading again registers nothing twice


def test_event_functions_exist():
    """event functions exist"""
    assert callable(ggml_backend_event_new)
    assert callable(ggml_backend_event_free)
    assert callable(ggml_backend_event_record)
    assert callable(ggml_backend_event_synchronize)
    assert callable(ggml_backend_event_wait)


def test_graph_plan_functions_exist():
    """graph plan functions exist"""
    assert callable(ggml_backend_graph_plan_create)
    assert callable(ggml_backend_graph_plan_free)
    assert callable(ggml_backend_graph_plan_compute)


def test_async_functions_exist():
    """async functions exist"""
    assert callable(ggml_backend_tensor_set_async)
    assert callable(ggml_backend_tensor_get_async)
    assert callable(ggml_backend_tensor_copy_async)

