"""ggml's own thread pools under ggmlpy's CPU backends (ggmlpy/core/threadpool.py): libggml is
built without OpenMP, each CPU backend computes on a pool of its thread count that outlives the
graph computes, the polling level is ggmlpy's, and a forked child gets pools of its own."""
import os
import pathlib
import select
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.core import threadpool
from ggmlpy.errors import GGMLError

ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_pools = pytest.mark.skipif(not threadpool.available(), reason="this libggml keeps the CPU backend's pool out of reach")


def _build_ggml():
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_ggml", ROOT / "build_ggml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_build_ggml_builds_without_openmp_and_never_reuses_an_openmp_build():
    b = _build_ggml()

    class Args:
        native, cmake_arg, cuda_arch = True, [], None
    flags = b.cmake_flags(Args(), {"cpu"}, pathlib.Path("/nonexistent"), pathlib.Path("/nonexistent"))
    assert "-DGGML_OPENMP=OFF" in flags and "-DGGML_OPENMP=ON" not in flags
    assert f"-{b.THREADING_TAG}" in b.build_key({"cpu"}, native=True)


@needs_pools
def test_a_cpu_backend_computes_on_a_pool_of_its_thread_count_kept_per_count():
    b = g.ggml_backend_cpu_init()
    try:
        initial = set(b._pools.pools)  # the default count's pool, which the CPU affinity decides
        b.set_n_threads(3)
        three = b._pools.pools[3]
        assert b._pools.n == 3
        b.set_n_threads(2)
        assert b._pools.n == 2 and b._pools.pools[2] != three
        b.set_n_threads(3)
        assert b._pools.pools[3] == three  # a count used again: its pool
        assert set(b._pools.pools) == initial | {2, 3}
    finally:
        b.free()
    assert b._pools.pools == {}


def _matmul_on(backend, n=64):
    """A ggml product computed on `backend` (a host backend), against numpy."""
    rng = np.random.default_rng(1)
    a, c = rng.normal(size=(n, n)).astype(np.float32), rng.normal(size=(n, n)).astype(np.float32)
    ctx = g.ggml_init(16 << 20)
    ta = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, n, n)
    tc = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, n, n)
    g.ggml_set_f32(ta, a.ravel())
    g.ggml_set_f32(tc, c.ravel())
    out = g.ggml_mul_mat(ctx, ta, tc)
    graph = g.ggml_build_forward_expand(g.ggml_new_graph(ctx), out)
    g.ggml_backend_graph_compute(backend, graph)
    got = np.asarray(g.ggml_get_f32(out)).reshape(n, n)
    return float(np.abs(got - c @ a.T).max())


@needs_pools
def test_results_do_not_depend_on_the_pool_size():
    b = g.ggml_backend_cpu_init()
    try:
        for n in (1, 2, 3, 4, 2):
            b.set_n_threads(n)
            assert _matmul_on(b) < 1e-3, n
    finally:
        b.free()


needs_own_pool = pytest.mark.skipif(not threadpool.available() or threadpool.uses_openmp(),
                                    reason="an OpenMP libggml (its threads are OpenMP's) or no pool to set")


@needs_own_pool
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="lists threads in /proc/self/task")
def test_pool_threads_start_with_the_count_and_outlive_graph_computes():
    """ggml starts a pool per graph compute when the backend has none; each backend's is kept."""
    def tasks():
        return set(os.listdir("/proc/self/task"))
    b = g.ggml_backend_cpu_init()
    n = b.n_threads + 2
    try:
        before = tasks()
        b.set_n_threads(n)
        workers = tasks() - before
        assert len(workers) == n - 1  # the calling thread is the last
        for _ in range(3):
            assert _matmul_on(b) < 1e-3
            assert workers <= tasks()
    finally:
        b.free()
    assert not workers & tasks()  # stopped with their backend


@needs_own_pool
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_computes_on_pools_of_its_own():
    """The parent's pool threads do not exist in a forked child: computing on the parent's pool
    would wait at ggml's barrier for them for ever. (With an OpenMP libggml the child hangs in
    GNU libgomp, which does not support fork after a parallel region.)"""
    b = g.ggml_backend_cpu_init()
    b.set_n_threads(2)
    assert _matmul_on(b) < 1e-3  # the parent has used its pool
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running the parent's cleanup
        try:
            os.write(w, f"{_matmul_on(b):.3e}".encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 60)
        assert ready, "the forked child hung computing on the parent's pool"
        assert float(os.read(r, 64).decode()) < 1e-3
    finally:
        os.close(r)
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        b.free()


@needs_own_pool
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_after_a_backend_was_freed_leaves_that_backend_alone():
    """A freed CPU backend whose object is still referenced: the child's pool renewal must not set a
    pool on the freed backend (it did, and every forked child, multiprocessing's and a subprocess
    with a preexec_fn included, died of SIGSEGV)."""
    kept = []
    for _ in range(8):
        b = g.ggml_backend_cpu_init()
        b.set_n_threads(2)
        b.free()
        kept.append(b)
        np.ones(1 << 18)  # the freed memory taken for something else
    statuses = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        statuses.append(os.waitpid(pid, 0)[1])
    assert statuses == [0, 0, 0], [f"signal {os.WTERMSIG(s)}" if os.WIFSIGNALED(s) else s for s in statuses]


@pytest.mark.parametrize("text, want", [("", threadpool.POLL), ("0", 0), (" 7 ", 7), ("100", 100)])
def test_the_polling_level_comes_from_the_environment(monkeypatch, text, want):
    monkeypatch.setenv(threadpool.ENV_VAR, text)
    assert threadpool.poll_level() == want


@pytest.mark.parametrize("text", ["-1", "101", "fast", "1.5"])
def test_a_bad_polling_level_raises_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv(threadpool.ENV_VAR, text)
    with pytest.raises(GGMLError, match=threadpool.ENV_VAR):
        threadpool.poll_level()


@needs_own_pool
def test_idle_pool_threads_leave_the_cores_alone():
    """After a compute, the default polling level lets the pool's workers sleep within a few ms
    (ggml's own default, 50, keeps them spinning a tenth of a second or more after every graph)."""
    probe = r'''
import os, time, numpy as np, ggmlpy as g
x = g.ag_tensor(np.ones((512, 512), np.float32))
g.ag_matmul(x, x).numpy()
time.sleep(0.05)
t0 = os.times(); time.sleep(0.3); t1 = os.times()
print("IDLE_CPU", (t1.user - t0.user) + (t1.system - t0.system))
'''
    env = dict(os.environ, GGMLPY_N_THREADS="2")
    env.pop(threadpool.ENV_VAR, None)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.split("IDLE_CPU")[-1]) < 0.05


# A probe's 150-node graph `graph` whose output `y` is all ones (y = (y + 1) / 2 from y = 1).
_GRAPH_150 = r'''
ctx = g.ggml_init(64 << 20)
t = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 256, 64)
g.ggml_set_f32(t, np.ones(256 * 64, np.float32))
y = t
for _ in range(150):
    y = g.ggml_scale(ctx, g.ggml_add(ctx, y, t), 0.5)
graph = g.ggml_build_forward_expand(g.ggml_new_graph(ctx), y)
'''


@needs_own_pool
def test_more_threads_than_cores_still_compute_in_good_time():
    """ggml's barrier after every node spins; a thread the scheduler took off its core then kept the
    others spinning for whole time slices (measured: over 20 s a 400-node graph with 8 threads on 2
    busy cores). build_ggml.py's patch makes a waiting thread sleep after 2 000 spins (0.4 s there)."""
    probe = r'''
import os, numpy as np, ggmlpy as g
b = g.ggml_backend_cpu_init()
b.set_n_threads(4 * len(os.sched_getaffinity(0)))
''' + _GRAPH_150 + r'''
for _ in range(3):
    g.ggml_backend_graph_compute(b, graph)
print("VALUE", float(np.asarray(g.ggml_get_f32(y)).ravel()[0]))
'''
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.split("VALUE")[-1]) == 1.0


def test_build_ggml_s_cpu_patches_apply_to_the_pinned_ggml():
    b = _build_ggml()
    for name, backend, _tag, rel, old, new in b.PATCHES:
        path = b.VENDOR / rel
        if backend != "cpu" or not path.exists():
            continue
        text = path.read_text()
        assert old in text or new in text, f"{name}: neither its old nor its new text is in {rel}"


def _placement_probe(body: str) -> str:
    """Run `body` in a fresh interpreter (it changes its own CPU affinity) with helpers in scope:
    `tasks()` (the process's thread ids), `affinity(tid)`, `compute(backend)` (a 150-node graph,
    checked against its known value); returns what it printed."""
    head = r'''
import os, threading, numpy as np, ggmlpy as g
def tasks():
    return {int(t) for t in os.listdir("/proc/self/task")}
def affinity(tid):
    return os.sched_getaffinity(tid)
''' + _GRAPH_150 + r'''
def compute(backend):
    g.ggml_backend_graph_compute(backend, graph)
    assert np.all(np.asarray(g.ggml_get_f32(y)) == 1.0)
g.set_dynamic_threads(False)
'''
    out = subprocess.run([sys.executable, "-c", head + body], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2
                                    or not os.path.isdir("/proc/self/task"),
                                    reason="thread placement: Linux, two CPUs or more")


@needs_own_pool
@needs_two_cpus
def test_a_pool_s_workers_leave_the_caller_s_cpu_to_it_and_the_caller_keeps_its_affinity():
    """A worker woken between graphs is placed by the kernel beside the thread that woke it, which
    then spins in the graph's first barrier: build_ggml.py's patch takes the caller's CPU out of
    the workers' affinity before each graph. The caller's own affinity is never left changed."""
    out = _placement_probe(r'''
mine = affinity(0)
before = tasks()
b = g.ggml_backend_cpu_init()
b.set_n_threads(2)
workers = tasks() - before
assert len(workers) == 1, workers
for _ in range(3):
    compute(b)
    (w,) = workers
    left_out = mine - affinity(w)
    assert len(left_out) == 1 and affinity(w) < mine, (mine, affinity(w))
    assert affinity(0) == mine
print("OK")
''')
    assert "OK" in out


@needs_own_pool
@needs_two_cpus
def test_workers_follow_a_caller_narrowed_to_one_cpu_and_widen_again_with_it():
    """With no CPU to spare beside the caller's, the workers share the caller's CPUs (narrowed to
    one CPU it is not on, the caller moves there, and so do they); widened again, the caller's CPU
    is left out of theirs once more. (The workers' affinity is worked out again only when the
    caller has moved: a syscall per graph would cost more than a small graph.)"""
    out = _placement_probe(r'''
mine = affinity(0)
before = tasks()
b = g.ggml_backend_cpu_init()
b.set_n_threads(2)
(w,) = tasks() - before
compute(b)
assert len(affinity(w)) == len(mine) - 1
one = {min(affinity(w))}  # a CPU the caller is not on: narrowed there, it moves
os.sched_setaffinity(0, one)
compute(b)
assert affinity(w) == one, affinity(w)
os.sched_setaffinity(0, mine)
compute(b)
assert len(affinity(w)) == len(mine) - 1 and affinity(0) == mine
print("OK")
''')
    assert "OK" in out


@needs_own_pool
@needs_two_cpus
def test_a_caller_that_sleeps_in_a_barrier_waits_on_its_own_cpu_and_gets_its_affinity_back():
    """Two processes spinning on the worker's CPU keep the worker off it for whole time slices, so
    the caller sleeps in the graph's barriers; it then narrows itself to the CPU its worker leaves
    out (seen from another thread during the computes) and has its own affinity back after each."""
    out = _placement_probe(r'''
import subprocess, sys, time
mine = sorted(affinity(0))
a, b_cpu = mine[0], mine[1]
os.sched_setaffinity(0, {a})
b = g.ggml_backend_cpu_init()
b.set_n_threads(2)
os.sched_setaffinity(0, {a, b_cpu})
spin = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{b_cpu}}})\nwhile True: pass"])
        for _ in range(2)]
main, seen, done = threading.get_native_id(), set(), threading.Event()
def watch():
    while not done.is_set():
        seen.add(frozenset(affinity(main)))
        time.sleep(0.0002)
try:
    time.sleep(0.3)
    watcher = threading.Thread(target=watch)
    watcher.start()
    for _ in range(20):
        compute(b)
        assert affinity(0) == {a, b_cpu}, affinity(0)
    done.set()
    watcher.join()
finally:
    for p in spin:
        p.kill()
assert frozenset({a}) in seen, seen
print("OK")
''')
    assert "OK" in out
