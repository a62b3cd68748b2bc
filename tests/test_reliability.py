"""No public call may kill the interpreter, no single call may return a silently wrong value,
and a save never loses the previous file. Calls that aborted or crashed the process before
run in a child process, so a regression is a failed test, not a dead test run."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ggmlpy as g

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, timeout: int = 120, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    # -X faulthandler: a child that crashes where it should not says where, in the failure's stderr
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env, **kw)


ABORTED_BEFORE = {  # each of these aborted or segfaulted the process (audit, single thread)
    "i32_relu": "g.ag_relu(g.ag_tensor(np.ones((3, 3)), dtype='i32'))",
    "i32_sum": "g.ag_sum(g.ag_tensor(np.ones((3, 3)), dtype='i32'))",
    "i32_scale": "g.ag_scale(g.ag_tensor(np.ones((3, 3)), dtype='i32'), 2.0)",
    "i32_add_f32": "g.ag_add(g.ag_tensor(np.ones((3, 3))), g.ag_tensor(np.ones((3, 3)), dtype='i32'))",
    "i32_matmul": "x = g.ag_tensor(np.ones((3, 3)), dtype='i32'); g.ag_matmul(x, x)",
    "backward_bad_grad": """
        x = g.ag_param(np.ones((3, 3)))
        with g.with_grad_tape():
            y = g.ag_scale(x, 2.0)
        g.backward(y, grad=g.ag_tensor(np.ones((2, 2))))
        x.grad.numpy()""",
    "release_cpu_then_op": "x = g.ag_param(np.ones((3, 3))); g.release_device('cpu'); g.ag_relu(x)",
    "release_cpu_then_step": """
        x = g.ag_param(np.ones((3, 3))); y = g.ag_tensor(np.ones((3, 3)))
        step = g.ag_compile(lambda a: g.ag_mse_loss(g.ag_mul(x, a), y), [y], optimizer=g.optimizer_sgd([x], 0.1))
        step(y)
        g.release_device('cpu')
        step(y)""",
    "huge_context": "g.ggml_init(64 << 30)",
}


@pytest.mark.parametrize("name", sorted(ABORTED_BEFORE))
def test_calls_that_aborted_now_raise(name):
    code = "import numpy as np, ggmlpy as g\ntry:\n" + textwrap.indent(textwrap.dedent(ABORTED_BEFORE[name]), "    ") + \
        "\nexcept (g.GGMLError, g.DeviceError, MemoryError) as e:\n    print('raised', type(e).__name__, e)\nelse:\n    print('no error')"
    out = run_child(code)
    assert out.returncode == 0, f"the process died ({out.returncode}): {out.stderr[-1500:]}"
    assert out.stdout.startswith("raised"), out.stdout


def test_a_compiled_step_bigger_than_the_old_fixed_graph_capacity():
    """ag_compile sized its graph for 16 384 nodes and aborted past it; now it sizes it from the trace."""
    out = run_child("""
        import numpy as np, ggmlpy as g
        W = [g.ag_param(np.full((4, 4), 0.01 * (i % 7))) for i in range(40)]
        x, y = g.ag_tensor(np.ones((4, 4))), g.ag_tensor(np.zeros((4, 4)))
        def loss(a, b):
            h = a
            for _ in range(60):  # 40 * 60 * 3 primitives: several tens of thousands of nodes
                for w in W:
                    h = g.ag_tanh(g.ag_add(g.ag_mul(h, w), a))
            return g.ag_mse_loss(h, b)
        step = g.ag_compile(loss, [x, y], optimizer=g.optimizer_sgd(W, 0.01))
        print("loss", step(x, y), max(p.n_nodes for p in step.plans.values()))
    """, timeout=600)
    assert out.returncode == 0, out.stderr[-1500:]
    loss, n_nodes = out.stdout.split()[1:]
    assert np.isfinite(float(loss)) and int(n_nodes) > 16384


def test_the_same_tensor_twice_is_traced_by_position():
    a, b = g.ag_tensor(np.full((2, 2), 2.0)), g.ag_tensor(np.full((2, 2), 5.0))
    w = g.ag_param(np.ones((2, 2)))
    step = g.ag_compile(lambda p, q: g.ag_sum(g.ag_add(g.ag_mul(w, p), g.ag_scale(q, 10.0))), [a, a])
    assert step(a, b) == pytest.approx(4 * 2.0 + 4 * 50.0)  # fn(a, b), not fn(b, b)


def test_ag_compile_takes_numpy_example_inputs():
    w = g.ag_param(np.ones((2, 2)))
    step = g.ag_compile(lambda p: g.ag_sum(g.ag_mul(w, p)), [np.full((2, 2), 3.0)])
    assert step(np.full((2, 2), 2.0)) == pytest.approx(8.0)


@pytest.mark.parametrize("bad", [123, None.__class__, 1.5])
def test_ag_device_with_a_non_string_raises_ggml_error(bad):
    with pytest.raises(g.GGMLError, match="device name"):
        g.ag_device(bad)


def test_i32_values_out_of_range_or_fractional_raise():
    with pytest.raises(g.GGMLError, match="2\\^31"):
        g.ag_tensor(np.array([2**33 + 5]), dtype="i32")
    with pytest.raises(g.GGMLError, match="whole numbers"):
        g.ag_tensor(np.array([1.5]), dtype="i32")
    np.testing.assert_array_equal(g.ag_tensor(np.array([-2**31, 2**31 - 1]), dtype="i32").numpy().ravel(),
                                  [-2**31, 2**31 - 1])


def test_ag_slice_takes_negative_indices():
    x = g.ag_tensor(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(g.ag_slice(x, -1).numpy(), [[8.0, 9.0, 10.0, 11.0]])
    np.testing.assert_array_equal(g.ag_slice(x, None, -2).numpy(), [[2.0], [6.0], [10.0]])
    with pytest.raises(g.GGMLError, match="out of range"):
        g.ag_slice(x, -4)


def test_backward_grad_must_match_the_output():
    x = g.ag_param(np.ones((3, 2)))
    with g.with_grad_tape():
        y = g.ag_scale(x, 2.0)
    with pytest.raises(g.GGMLError, match="must match"):
        g.backward(y, grad=np.ones((2, 3)))
    grads = g.backward(y, grad=np.full((3, 2), 0.5))  # numpy is taken, on the output's device
    np.testing.assert_array_equal(grads[x].numpy(), 1.0)


# -- files: nothing lost ------------------------------------------------------------------------------------
_SAVE = """
    import numpy as np, ggmlpy as g, sys
    g.manual_seed(0)
    model = g.ag_sequential(*[g.ag_linear(512, 512) for _ in range(24)])  # about 25 MB
    for p in model.parameters():
        p.data = np.full(p.shape, 7.0)
    print("saving", flush=True)
    g.ag_save_model(model, sys.argv[1])
    print("saved", flush=True)
"""


def _good_file(tmp_path):
    path = tmp_path / "model.gguf"
    model = g.ag_sequential(g.ag_linear(3, 2))
    g.ag_save_model(model, path, metadata={"good": True})
    return path, path.read_bytes()


def test_a_save_killed_midway_leaves_the_old_file_intact(tmp_path):
    path, before = _good_file(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_SAVE), str(path)], stdout=subprocess.PIPE,
                             text=True, env=env, cwd=ROOT)
    assert child.stdout.readline().strip() == "saving"
    # kill it while the temporary file grows
    for _ in range(2000):
        tmps = list(tmp_path.glob(".model.gguf.*.tmp"))
        if tmps and tmps[0].stat().st_size > 1 << 20:
            break
        if child.poll() is not None:
            break
        import time
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait(60)
    assert path.read_bytes() == before
    assert g.ag_load_model(g.ag_sequential(g.ag_linear(3, 2)), path) == {"good": True}


def test_a_save_that_hits_the_file_size_limit_leaves_the_old_file_and_no_temporary(tmp_path):
    path, before = _good_file(tmp_path)

    # The child limits itself before it imports anything: a preexec_fn would run Python in the forked
    # copy of this threaded process before exec, where it can crash (a SIGSEGV with no output)
    limited = "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
    out = run_child(limited + textwrap.dedent(_SAVE).replace("sys.argv[1]", repr(str(path))))
    assert out.returncode != 0 and "could not write" in out.stderr and "unchanged" in out.stderr, out.stderr[-800:]
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_bad_metadata_json_is_a_ggml_error(tmp_path):
    import gguf
    path = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(path), "ggmlpy")
    w.add_string("ggmlpy.version", "0.1.0")
    w.add_string("ggmlpy.metadata", "{not json")
    w.add_tensor("layer1_weight", np.zeros((3, 2), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(g.GGMLError, match="not valid JSON"):
        g.ag_load_model(g.ag_sequential(g.ag_linear(2, 3)), path)


# -- NaN propagates (ggml's relu and clamp turn it into a number) ---------------------------------------------
SPECIALS = np.array([[np.nan, -np.inf, -2.0, 0.0, 3.0, np.inf]])


@pytest.mark.parametrize("kernels_on", [True, False])
def test_relu_and_clamp_keep_nan_and_infinities(kernels_on):
    """PyTorch's values, relu(-inf) = 0 included, with ggmlpy's kernels and with ggml ops alone."""
    from ggmlpy import kernels
    before = kernels.set_enabled(kernels_on)
    try:
        x = g.ag_tensor(SPECIALS)
        np.testing.assert_array_equal(g.ag_relu(x).numpy(), [[np.nan, 0.0, 0.0, 0.0, 3.0, np.inf]])
        np.testing.assert_array_equal(g.ag_clamp(x, -1.0, 1.0).numpy(), [[np.nan, -1.0, -1.0, 0.0, 1.0, 1.0]])
        lin = g.ag_linear(1, 1, "relu")
        lin.W.data, lin.b.data = np.ones((1, 1)), np.zeros((1, 1))
        np.testing.assert_array_equal(lin(g.ag_tensor(SPECIALS)).numpy(), [[np.nan, 0.0, 0.0, 0.0, 3.0, np.inf]])
    finally:
        kernels.set_enabled(before)


@pytest.mark.parametrize("backward", ["rules", "ggml"])
def test_compiled_relu_keeps_nan(backward):
    w = g.ag_param(np.ones((1, 2)))
    x = g.ag_tensor(np.array([[np.nan, 2.0]]))
    step = g.ag_compile(lambda a: g.ag_sum(g.ag_relu(g.ag_mul(a, w))), [x], optimizer=g.optimizer_sgd([w], 0.1),
                        backward=backward)
    assert np.isnan(step(x))


def test_graph_caches_are_bounded_by_bytes():
    ex = g.runtime.state.STATE.context().executor
    before = g.set_cache_limits(graph_cache_bytes=1 << 20)
    try:
        for n in range(1, 60):
            g.ag_tanh(g.ag_tensor(np.ones((3, n))))
            assert ex.bytes <= 1 << 20 or len(ex.cache) == 1
        assert 1 < len(ex.cache) < 59
    finally:
        g.set_cache_limits(**before)


# -- busy machines: OpenMP spinning --------------------------------------------------------------------------
def test_importing_ggmlpy_leaves_libgomps_spin_policy_alone():
    """libgomp, once loaded, is the process's (PyTorch imported later binds to it by name): ggmlpy
    sets nothing it reads, so torch spins as it would without ggmlpy. libgomp reports the count it
    read when OMP_DISPLAY_ENV asks (its default, or the user's own)."""
    def spincount(**env):
        out = subprocess.run([sys.executable, "-c", "import os, ggmlpy; print('ENV', os.environ.get('GOMP_SPINCOUNT'))"],
                             capture_output=True, text=True, cwd=ROOT, timeout=120,
                             env={**{k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")},
                                  "OMP_DISPLAY_ENV": "VERBOSE", **env})
        assert out.returncode == 0, out.stderr[-2000:]
        shown = [line.split("=")[1].strip().strip("'") for line in out.stderr.splitlines() if "GOMP_SPINCOUNT" in line]
        return out.stdout.split("ENV")[-1].strip(), shown
    env_seen, shown = spincount()
    assert env_seen == "None"
    if not shown:
        pytest.skip("this libggml loads no libgomp (no OpenMP BLAS)")
    assert shown == ["300000"], shown  # libgomp's own default
    assert spincount(GOMP_SPINCOUNT="5") == ("5", ["5"])
