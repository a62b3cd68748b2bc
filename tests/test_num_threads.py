"""One thread setting (ggmlpy.set_num_threads / get_num_threads, $GGMLPY_N_THREADS) that every
front end obeys: ag_* eager and compiled, the Keras-like models, ONNX models, ggml_graph_compute.

What is checked is what the operating system sees: in a child process, each front end is made
and first computes with one thread (which loads everything), then computes with five; at least
four threads besides the calling one must then have computed (their CPU time, per thread, grew).
Counting threads that worked rather than threads that exist: ggml's pools start their threads
when a backend is given its count, whether or not it computes. A front end that ignored the
setting would keep its one thread, or take this machine's core count.
"""
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.core.device import get_backend

ROOT = pathlib.Path(__file__).resolve().parent.parent

PROBE = r'''
import os, sys, threading, time
import numpy as np
import ggmlpy as g

def cpu_times():
    """CPU seconds of each thread of this process (Linux's per-thread CPU clock of a thread id)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            out[t] = time.clock_gettime((~int(t) << 3) | 6)
        except OSError:  # ended meanwhile
            pass
    return out

g.set_num_threads(1)   # everything below is made, and first run, with one thread
rng = np.random.default_rng(0)
a = rng.normal(size=(256, 256)).astype(np.float32)
front = sys.argv[1]
if front == "eager":
    x = g.ag_tensor(a)
    run = lambda: g.ag_matmul(x, x).numpy()
elif front == "compiled":
    w = g.ag_param(a)
    x, y = g.ag_tensor(a), g.ag_tensor(a)
    step = g.ag_compile(lambda x, y: g.ag_mse_loss(g.ag_matmul(w, x), y), [x, y])
    run = lambda: step(x, y)
elif front == "keras":
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, units=256, activation="relu", input_shape=(256,))
    m = g.ggml_layer_dense(m, units=4, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    yk = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 256)]
    run = lambda: g.ggml_fit(m, a, yk, epochs=1, batch_size=128, verbose=0)
elif front == "keras_small":   # every product under 2M multiply-adds: one thread whatever the setting
    m = g.ggml_compile(g.ggml_default_mlp(50, 4, hidden_layers=(128, 64), dropout=0.0))
    xs, ys = a[:, :50], np.eye(4, dtype=np.float32)[rng.integers(0, 4, 256)]
    run = lambda: g.ggml_fit(m, xs, ys, epochs=1, batch_size=32, verbose=0)
elif front in ("onnx", "onnx_explicit"):
    import onnx
    from onnx import TensorProto as T, helper, numpy_helper
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", T.FLOAT, [256, 256])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [256, 256])],
                              [numpy_helper.from_array(a, "W")])
    model = g.onnx_load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device="cpu",
                        n_threads=1 if front == "onnx_explicit" else None)
    run = lambda: g.onnx_run(model, {"x": a})
elif front == "graph_compute":
    ctx = g.ggml_init(16 << 20)
    t = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 256, 256)
    g.ggml_set_f32(t, a.ravel())
    graph = g.ggml_build_forward_expand(g.ggml_new_graph(ctx), g.ggml_mul_mat(ctx, t, t))
    run = lambda: g.ggml_graph_compute(ctx, graph)
run(); run()
g.set_num_threads(5)
time.sleep(0.2)   # threads a pool started have settled into their wait: from here only work moves them
before = cpu_times()
run(); run()
after, me = cpu_times(), str(threading.get_native_id())
print("WORKED", sum(1 for t, s in after.items() if t != me and s - before.get(t, 0.0) > 1e-6))
# threads that took a real share of the work: a tenth of the calling thread's CPU time or more
# (a pool's threads also wake, briefly, when a backend switches pools)
mine = after[me] - before[me]
print("SHARED", sum(1 for t, s in after.items() if t != me and s - before.get(t, 0.0) > 0.1 * mine))
'''

# Spinning processes for the probe's whole life, the probe itself on two cores (so that two
# spinners leave it no free core whatever the machine has).
BUSY_PREFIX = r'''
import atexit, os, subprocess, sys, time
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
_spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range({busy})]
atexit.register(lambda: [p.kill() for p in _spin])
time.sleep(0.5)
'''


def _workers(front: str, *, busy: int = 0, **env) -> int:
    """Threads besides the calling one that computed in `front`'s probe; `busy`: that many
    spinning processes run meanwhile, the probe on two cores, and what counts is a thread that
    took a real share of the work. Dynamic threads are off unless `env` turns them on: the count
    asked for is what is checked."""
    env = {"GGMLPY_DYNAMIC_THREADS": "0", **env}
    code = PROBE if not busy else BUSY_PREFIX.format(busy=busy) + PROBE
    out = subprocess.run([sys.executable, "-c", code, front], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **env), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split("SHARED" if busy else "WORKED")[-1].split()[0])


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc/self/task")


@needs_proc
@pytest.mark.parametrize("front", ["eager", "compiled", "keras", "onnx", "graph_compute"])
def test_every_front_end_computes_with_the_set_number_of_threads(front):
    assert _workers(front) >= 4


@needs_proc
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins the probe to two cores")
@pytest.mark.parametrize("front", ["compiled", "keras", "onnx"])
def test_on_a_busy_machine_graphs_compute_on_the_cores_left(front):
    """Two spinning processes on the probe's two cores: ggml's static split would make every node
    wait for a thread without a core, so the graph computes on one (dynamic threads, the default);
    with dynamic threads off it takes the five asked for."""
    assert _workers(front, busy=2, GGMLPY_DYNAMIC_THREADS="1") == 0
    assert _workers(front, busy=2) >= 4


def test_threads_for_load_leaves_the_cores_others_hold(monkeypatch):
    from ggmlpy.core import threads
    monkeypatch.setattr(threads, "_cores", lambda: 8)
    monkeypatch.setattr(threads, "_dynamic", True)
    for others, n, want in [(0, 8, 8), (None, 8, 8), (1, 8, 4), (3, 4, 4), (4, 4, 4), (5, 4, 2), (6, 4, 2),
                            (7, 4, 1), (8, 4, 1), (20, 16, 1), (0, 12, 12), (2, 12, 4), (4, 1, 1)]:
        monkeypatch.setattr(threads, "others_runnable", lambda: others)
        assert threads.threads_for_load(n) == want, (others, n)
    monkeypatch.setattr(threads, "others_runnable", lambda: 8)
    g.set_dynamic_threads(False)
    assert threads.threads_for_load(8) == 8 and not g.get_dynamic_threads()
    g.set_dynamic_threads(True)
    assert threads.threads_for_load(8) == 1 and g.get_dynamic_threads()


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    """`code` run in a new interpreter (importing the ggmlpy under test) with `env` added."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env), cwd=ROOT)


@pytest.mark.parametrize("value,ok", [("0", True), ("1", True), ("", True), ("yes", False), ("2", False)])
def test_the_dynamic_threads_variable(value, ok):
    out = _fresh("import ggmlpy as g; print('D', g.get_dynamic_threads())", GGMLPY_DYNAMIC_THREADS=value)
    if ok:
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split("D")[-1].strip() == str(value != "0")
    else:
        assert "GGMLPY_DYNAMIC_THREADS" in out.stderr and "Traceback" in out.stderr


def test_set_dynamic_threads_takes_a_bool():
    with pytest.raises(g.GGMLError, match="set_dynamic_threads"):
        g.set_dynamic_threads(1)


@needs_proc
def test_a_model_given_its_own_thread_count_keeps_it():
    assert _workers("onnx_explicit") == 0


@needs_proc
def test_a_small_model_fits_on_one_thread():
    """ggml synchronises its threads after every node: for a model this small a second thread
    costs more than it saves (and on a busy machine it made such a fit ten times slower)."""
    assert _workers("keras_small") == 0


@pytest.fixture
def restore_threads():
    before = g.get_num_threads()
    yield
    g.set_num_threads(before)


def test_the_setting_reaches_backends_made_before_it(restore_threads):
    cpu = get_backend("cpu")
    g.set_num_threads(3)
    assert g.get_num_threads() == 3 and cpu.n_threads == 3
    assert g.ggml_get_n_threads() == 3   # ggmlR's name for the same setting
    g.ggml_set_n_threads(1)
    assert g.get_num_threads() == 1 and cpu.n_threads == 1


def test_a_backend_set_explicitly_stops_following_until_told_to(restore_threads):
    b = g.ggml_backend_cpu_init()
    g.ggml_backend_cpu_set_n_threads(b, 2)
    g.set_num_threads(3)
    assert b.n_threads == 2
    b.set_n_threads(None)
    assert b.n_threads == 3
    b.free()
    g.set_num_threads(1)   # a freed backend is no longer told (its pointer is gone)


@pytest.mark.parametrize("bad", [0, -2, 513, 2 ** 40, 1.5, True, "2", None])
def test_a_bad_count_raises_naming_the_setting(bad, restore_threads):
    with pytest.raises(g.GGMLError, match="set_num_threads"):
        g.set_num_threads(bad)
    with pytest.raises(g.GGMLError, match="ggml_set_n_threads"):
        g.ggml_set_n_threads(bad)


def test_onnx_load_checks_its_thread_count():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    with pytest.raises(g.GGMLError, match="onnx_load: n_threads"):
        g.onnx_load(helper.make_model(graph), device="cpu", n_threads=0)


@pytest.mark.parametrize("value,ok", [("3", True), ("0", False), ("many", False), ("100000", False)])
def test_the_environment_variable_sets_the_starting_count(value, ok):
    out = _fresh("import ggmlpy as g; print('N', g.get_num_threads(), g.ggml_get_n_threads())", GGMLPY_N_THREADS=value)
    if ok:
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split("N")[-1].split() == [value, value]
    else:
        assert out.returncode != 0 and "GGMLPY_N_THREADS" in out.stderr
        assert "Traceback" in out.stderr   # a Python exception, not an abort


def test_threads_for_the_user_do_not_change_values(restore_threads):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(64, 64)).astype(np.float32)
    g.set_num_threads(1)
    one = g.ag_matmul(g.ag_tensor(a), g.ag_tensor(a)).numpy()
    g.set_num_threads(3)
    three = g.ag_matmul(g.ag_tensor(a), g.ag_tensor(a)).numpy()
    np.testing.assert_allclose(one, three, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="no /proc/loadavg here")
def test_the_load_is_read_again_after_its_descriptor_is_closed_or_reused(tmp_path):
    from ggmlpy.core import threads
    assert threads._runnable_now() >= 1  # the caller itself runs
    fd = threads._loadavg[0]
    os.close(fd)  # as a daemonising library closing every descriptor would
    assert threads._runnable_now() >= 1 and threads._loadavg[0] is not None
    kept = threads._loadavg[0]
    os.close(kept)
    other = tmp_path / "other"
    other.write_bytes(b"not a load average\n")
    reused = os.open(other, os.O_RDONLY)  # the lowest free number: the one just closed
    try:
        assert reused == kept
        assert threads._runnable_now() >= 1 and threads._loadavg[0] != reused
    finally:
        os.close(reused)


@pytest.fixture
def spinners():
    """Start spinning processes (nice levels given); killed at the end."""
    started = []

    def start(nice: int) -> int:
        p = subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", "while True: pass"])
        started.append(p)
        time.sleep(0.3)  # running, past the interpreter's start
        return p.pid
    yield start
    for p in started:
        p.kill()
        p.wait()


@needs_proc
@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="reads nice levels")
def test_a_lowest_priority_process_is_not_counted_as_competing(monkeypatch, spinners):
    """A `nice -n 19` process beside takes about 1.5 % of a core it shares with ours: dynamic
    threads keep every thread for it (it is not a competitor), and give one up for a process at
    our own priority."""
    from ggmlpy.core import threads
    if os.getpriority(os.PRIO_PROCESS, 0) + threads.NICE_GAP > 19:
        pytest.skip("this process is itself niced: nothing can be NICE_GAP levels below it")
    low, same = spinners(19), spinners(0)
    found = {pid for pid, _ in threads.idle_threads()}
    assert low in found and same not in found
    monkeypatch.setattr(threads, "_cores", lambda: 2)
    monkeypatch.setattr(threads, "_dynamic", True)
    monkeypatch.setattr(threads, "_runnable_now", lambda: 2)  # the caller and one other, the niced spinner
    monkeypatch.setattr(threads, "_others", [float("-inf"), None])
    monkeypatch.setattr(threads, "_idle", [float("-inf"), 0])
    assert threads.threads_for_load(2) == 2
