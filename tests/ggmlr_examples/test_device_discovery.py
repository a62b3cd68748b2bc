"""inst/examples/device_discovery.R"""
import ggmlpy as g


def test_device_discovery(capsys):
    print("=== GGML Device Discovery ===\n")

    # Load all available backends
    print("Loading all backends...")
    g.ggml_backend_load_all()

    # Part 1: Device Enumeration
    print("\n--- Device Enumeration ---")
    n_devices = g.ggml_backend_dev_count()
    print("Total devices found:", n_devices, "\n")
    if n_devices == 0:
        raise RuntimeError("No devices found!")

    for i in range(1, n_devices + 1):
        dev = g.ggml_backend_dev_get(i - 1)  # 0-based index
        name = g.ggml_backend_dev_name(dev)
        desc = g.ggml_backend_dev_description(dev)
        dtype = g.ggml_backend_dev_type(dev)
        mem = g.ggml_backend_dev_memory(dev)
        type_name = {"0": "CPU", "1": "GPU", "2": "Integrated GPU", "3": "Accelerator"}.get(str(dtype), "Unknown")
        print(f"Device {i}: {name}")
        print(f"  Type: {type_name}")
        print(f"  Description: {desc}")
        print(f"  Memory: {mem['free'] / 1e9:.2f} GB free / {mem['total'] / 1e9:.2f} GB total")
        print()

    # Part 2: Backend Registry
    print("--- Backend Registry ---")
    n_regs = g.ggml_backend_reg_count()
    print("Registered backends:", n_regs, "\n")
    for i in range(1, n_regs + 1):
        reg = g.ggml_backend_reg_get(i - 1)
        reg_name = g.ggml_backend_reg_name(reg)
        dev_count = g.ggml_backend_reg_dev_count(reg)
        print(f"Registry {i}: {reg_name} ({dev_count} device(s))")
    print()

    # Part 3: Find Device by Type
    print("--- Find by Type ---")
    cpu_dev = g.ggml_backend_dev_by_type(g.ggml_backend_device_type_cpu())
    if cpu_dev is not None:
        print("CPU device found:", g.ggml_backend_dev_name(cpu_dev))
    gpu_dev = g.ggml_backend_dev_by_type(g.ggml_backend_device_type_gpu())
    if gpu_dev is not None:
        print("GPU device found:", g.ggml_backend_dev_name(gpu_dev))
        props = g.ggml_backend_dev_get_props(gpu_dev)
        print("  Capabilities:")
        print("    Async:", props["caps"]["async"])
        print("    Host buffer:", props["caps"]["host_buffer"])
        print("    Events:", props["caps"]["events"])
    else:
        print("No discrete GPU found")
    print()

    # Part 4: Initialize Best Backend
    print("--- Initialize Best Backend ---")
    backend = g.ggml_backend_init_best()
    if backend is not None:
        dev = g.ggml_backend_get_device(backend)
        name = g.ggml_backend_dev_name(dev)
        print("Best backend initialized:", name)
        g.ggml_backend_free(backend)
    print()

    # Part 5: Simple Computation with Device
    print("--- Simple Computation ---")
    backend = g.ggml_backend_init_by_name("CPU")
    if backend is None:
        raise RuntimeError("Failed to initialize CPU backend")
    ctx = g.ggml_init(1024 * 1024, no_alloc=True)
    a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 100)
    b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 100)
    c = g.ggml_add(ctx, a, b)
    buffer = g.ggml_backend_alloc_ctx_tensors(ctx, backend)
    g.ggml_backend_tensor_set_data(a, [float(v) for v in range(1, 101)])
    g.ggml_backend_tensor_set_data(b, [float(v) for v in range(101, 201)])
    graph = g.ggml_build_forward_expand(ctx, c)
    status = g.ggml_backend_graph_compute(backend, graph)
    print("Computation status:", status, "(0 = success)")
    result = g.ggml_backend_tensor_get_data(c)
    print("Result[1:5]:", ", ".join(f"{v:g}" for v in result[:5]))
    print("Expected[1:5]: 102, 104, 106, 108, 110")

    print("\nBuffer info:")
    print("  Name:", g.ggml_backend_buffer_name(buffer))
    print("  Size:", g.ggml_backend_buffer_get_size(buffer), "bytes")
    print("  Is host:", g.ggml_backend_buffer_is_host(buffer))

    g.ggml_backend_buffer_free(buffer)
    g.ggml_free(ctx)
    g.ggml_backend_free(backend)
    print("\n=== Device Discovery Complete ===")

    out = capsys.readouterr().out
    # ggmlR's numbers, as it prints them
    assert "Computation status: 0 (0 = success)" in out
    assert "Result[1:5]: 102, 104, 106, 108, 110" in out
    align = g.ggml_backend_cpu_init().alignment
    assert f"  Size: {3 * -(-400 // align) * align} bytes" in out and "  Is host: True" in out  # 3 aligned tensors
    assert f"Registered backends: {n_regs}" in out and "CPU device found: CPU" in out
