"""One thread setting for every CPU computation: ag_* (eager and compiled), the Keras-like
models, ONNX models and ggml_graph_compute.

The count starts as $GGMLPY_N_THREADS, or every core this process may use. ggmlpy's CPU
backends (and the BLAS helper backends beside them) *follow* the setting: set_num_threads()
reaches the ones already made, so a model loaded earlier computes with the new count. A
backend whose count is set explicitly (Backend.set_n_threads, onnx_load(n_threads=...), the
one-thread backends kept for small ops) stops following: what is asked of one backend wins
over the process-wide setting.

Invariant: every live follower has been told the current count (a change reaches each one
under the lock, and a new follower is told when it joins). A backend computing in another
thread while the count changes finishes with the count it planned with: ggml reads it once
per graph compute.
"""
from __future__ import annotations

import os
import threading
import time
import weakref

from ..bindings import ffi, lib
from ..errors import GGMLError, check

ENV_VAR = "GGMLPY_N_THREADS"
MAX_THREADS = 512  # ggml.h's GGML_MAX_N_THREADS: its thread pool holds no more

_lock = threading.Lock()
_count: int | None = None  # None: not set yet (the environment variable or the core count decides)
_followers: "weakref.WeakSet" = weakref.WeakSet()


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _from_environment() -> int:
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return _cores()
    try:
        n = int(text)
    except ValueError:
        raise GGMLError(f"{ENV_VAR}={text!r} is not a whole number of threads") from None
    return checked_count(n, f"{ENV_VAR}={text!r}")


def checked_count(n, what: str = "set_num_threads") -> int:
    """`n` as a thread count, or GGMLError naming `what` (bools and fractions are refused)."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise GGMLError(f"{what}: the number of threads must be a whole number, got {n!r}")
    n = int(n)
    if n < 1:
        raise GGMLError(f"{what}: Number of threads must be at least 1, got {n}")
    if n > MAX_THREADS:
        raise GGMLError(f"{what}: ggml runs at most {MAX_THREADS} threads, got {n}")
    return n


_others: list = [float("-inf"), None]  # when /proc/loadavg was last read, and what others_runnable() said
_loadavg: list = [None]  # /proc/loadavg's descriptor, kept open
_loadavg_lock = threading.Lock()


def _runnable_now() -> int | None:
    """/proc/loadavg's count of runnable threads (the caller's included), None without /proc.
    The file stays open and is read with pread: a call after an idle moment reads it first, when
    everything runs cold, and one system call costs a third of open, read and close through
    Python's io (docs/benchmarks.md, "Threads"). A descriptor closed under us, or a number reused
    for another file, fails to parse: the file is opened again once (the stale number is not
    ours to close)."""
    for _ in range(2):
        fd = _loadavg[0]
        try:
            if fd is None:
                with _loadavg_lock:
                    if _loadavg[0] is None:
                        _loadavg[0] = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
                    fd = _loadavg[0]
            fields = os.pread(fd, 128, 0).split()
            running, total = (int(v) for v in fields[3].split(b"/"))
            if len(fields) == 5 and 0 <= running <= total:
                return running
        except (OSError, ValueError, IndexError):
            pass
        if _loadavg[0] == fd:
            _loadavg[0] = None
    return None


def others_runnable() -> int | None:
    """How many threads besides the caller were runnable a moment ago, machine-wide, and compete
    for a core (/proc/loadavg's instantaneous count, read at most every 20 ms, less the runnable
    threads that barely compete: idle_runnable): on a machine with as many cores as ggml has
    threads, each of them takes a core away from ggml. None when unknown (no /proc). The caller's
    own pool threads count only while they run: between graphs they sleep."""
    now = time.monotonic()
    if now - _others[0] > 0.02:
        running = _runnable_now()
        others = None if running is None else max(0, running - 1)
        _others[0], _others[1] = now, others and max(0, others - idle_runnable())
    return _others[1]


NICE_GAP = 10  # nice levels below ours from which a thread barely competes: CFS gives it under a tenth of ours
SCHED_IDLE = 5  # Linux's scheduling policy for work that runs only on an otherwise idle core
_idle: list = [float("-inf"), 0]  # when /proc was last scanned for idle_runnable, and its count


def idle_threads() -> list:
    """(pid, tid) of the runnable threads, machine-wide, that barely compete with this process's:
    NICE_GAP nice levels or more below its own (`nice -n 19` beside a process at 0 gets about 1.5 %
    of a core it shares with one) or SCHED_IDLE. Read from /proc/<pid>/stat, and for a process of
    several threads from its tasks' (a thread's own state); [] without /proc."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        ours = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return []
    found = []
    for pid in pids:
        fields = _stat_fields(f"/proc/{pid}/stat")
        if fields is None or not (int(fields[16]) - ours >= NICE_GAP or int(fields[38]) == SCHED_IDLE):
            continue
        if fields[17] == b"1":
            if fields[0] == b"R":
                found.append((int(pid), int(pid)))
            continue
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            task = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
            if task is not None and task[0] == b"R":
                found.append((int(pid), int(tid)))
    return found


def _stat_fields(path: str) -> list | None:
    """A /proc stat file's fields from the state on (after the command name, which may hold spaces
    and parentheses): [0] state, [16] nice, [17] threads, [38] policy. None when gone or unreadable."""
    try:
        with open(path, "rb") as f:
            text = f.read()
        fields = text[text.rindex(b")") + 2:].split()
        return fields if len(fields) > 38 else None
    except (OSError, ValueError):
        return None


def idle_runnable() -> int:
    """len(idle_threads()), scanned at most once a second and only while other threads are
    runnable at all (a scan reads every process's stat file: about a millisecond): a quiet
    machine never pays for it."""
    now = time.monotonic()
    if now - _idle[0] > 1.0:
        _idle[0], _idle[1] = now, len(idle_threads())
    return _idle[1]


def threads_for_load(n: int) -> int:
    """The threads a graph planned for `n` should compute with now: `n` while the other runnable
    threads leave it that many cores (or while dynamic threads are off), else the cores they
    leave, rounded down to a power of two (so that a backend keeps a pool for few counts), at
    least 1. ggml splits every node between its threads up front and waits for the last one: a
    thread that shares its core with another process makes every node wait for it (a small
    ONNX model took three times as long on two threads as on one: docs/benchmarks.md, "Threads")."""
    if n <= 1 or not get_dynamic_threads():
        return n
    others = others_runnable()
    if not others:
        return n
    left = _cores() - others
    if left >= n:
        return n
    return 1 << (max(1, left).bit_length() - 1)


def count_decides_result(node) -> bool:
    """Whether ggml's CPU kernel for `node` cuts a sum by its thread count, so that the count
    decides the result's last bits: CROSS_ENTROPY_LOSS (each thread sums its rows, then the partial
    sums are added) and FLASH_ATTN_EXT with one query row against 512 keys or more of f32 or f16
    (the keys are split between the threads, and the parts merged). A graph holding one computes
    on its planned count whatever the load (Backend.fit_threads_to_load's `planned`). Every other
    op ggmlpy computes on the CPU cuts by the shape: a ggml product's tiles each sum whole dot
    products, and ggmlpy's kernels cut into fixed pieces (kernels/pieces.h)."""
    op = node.op
    if op == lib.GGML_OP_CROSS_ENTROPY_LOSS:
        return True
    if op != lib.GGML_OP_FLASH_ATTN_EXT:
        return False
    q, k = node.src[0], node.src[1]
    return (q.ne[1] == 1 and q.ne[3] == 1 and k.ne[1] >= 512 and q.type == lib.GGML_TYPE_F32
            and k.type in (lib.GGML_TYPE_F32, lib.GGML_TYPE_F16))


def count_decides_results(nodes) -> bool:
    """Whether any of `nodes` is one whose result its thread count decides (count_decides_result)."""
    return any(count_decides_result(p) for p in nodes)


def count_decides_results_below(tensor) -> bool:
    """count_decides_results over `tensor` and every node it is computed from (a loss and its
    forward graph, when the graph itself is ggml's own, as in ggml_opt)."""
    seen, todo = set(), [tensor]
    while todo:
        t = todo.pop()
        key = int(ffi.cast("uintptr_t", t))
        if key in seen:
            continue
        seen.add(key)
        if count_decides_result(t):
            return True
        todo.extend(s for s in t.src if s != ffi.NULL)
    return False


DYNAMIC_ENV_VAR = "GGMLPY_DYNAMIC_THREADS"
_dynamic: bool | None = None  # None: not set yet ($GGMLPY_DYNAMIC_THREADS decides)


def get_dynamic_threads() -> bool:
    """Whether CPU graphs may compute on fewer threads than get_num_threads() while other
    processes' runnable threads hold cores (like OpenMP's omp_get_dynamic). On unless
    $GGMLPY_DYNAMIC_THREADS is 0 or set_dynamic_threads(False) was called."""
    global _dynamic
    if _dynamic is None:
        text = os.environ.get(DYNAMIC_ENV_VAR, "").strip()
        if text not in ("", "0", "1"):
            raise GGMLError(f"{DYNAMIC_ENV_VAR}={text!r}: expected 0 or 1")
        _dynamic = text != "0"
    return _dynamic


def set_dynamic_threads(on: bool) -> bool:
    """Let CPU graphs compute on fewer threads than get_num_threads() while other processes'
    runnable threads hold the cores (True, the default), or always on exactly get_num_threads()
    (False; $GGMLPY_DYNAMIC_THREADS=0). Returns `on`.

    What it changes: how many of the set threads compute a graph, so how long a call takes on a
    busy machine (a thread sharing its core with another process would make every node wait for
    it), and which thread computes which piece of the work. Processes that barely compete (ten
    nice levels or more below this one, SCHED_IDLE) are not counted.

    What it cannot change: a result. Every product, convolution, reduction and kernel is cut into
    pieces fixed by the shape and the cores this process may use, and the few ggml ops whose sums
    follow their thread count (count_decides_results) compute on the planned count: the same
    inputs and set_num_threads give the same bits at any load, either way (docs/reproducibility.md).
    Turn it off for timings that must not move with the load."""
    global _dynamic
    if not isinstance(on, bool):
        raise GGMLError(f"set_dynamic_threads: expected True or False, got {on!r}")
    _dynamic = on
    return on


def get_num_threads() -> int:
    """The number of threads ggmlpy computes with on the CPU ($GGMLPY_N_THREADS, or every core
    this process may use, until set_num_threads() changes it)."""
    global _count
    with _lock:
        if _count is None:
            _count = _from_environment()
        return _count


def set_num_threads(n: int) -> int:
    """Compute with `n` CPU threads from now on, in every front end (ag_* eager and compiled,
    the Keras-like models, ONNX models, ggml_graph_compute), including models and backends
    made before the call; like torch.set_num_threads. Returns `n`."""
    global _count
    n = checked_count(n)
    with _lock:
        _count = n
        for backend in list(_followers):
            backend._use_threads(n)
    return n


def follow(backend) -> None:
    """Make `backend` (an object with `_use_threads(n)`) compute with the setting, now and after
    every change."""
    n = get_num_threads()
    with _lock:
        _followers.add(backend)
        backend._use_threads(_count if _count is not None else n)


def unfollow(backend) -> None:
    """`backend` keeps the count it is given from now on."""
    with _lock:
        _followers.discard(backend)


def follows(backend) -> bool:
    with _lock:
        return backend in _followers


# -- threads and time ---------------------------------------------------------------------------------------------
def ggml_set_n_threads(n_threads: int) -> int:
    """ggmlR's name for set_num_threads(): the threads every CPU computation uses from now on
    (ggml_graph_compute, ag_*, the Keras-like models, ONNX models); returns it."""
    return set_num_threads(checked_count(n_threads, "ggml_set_n_threads"))


def ggml_get_n_threads() -> int:
    """ggmlR's name for get_num_threads()."""
    return get_num_threads()


def ggml_set_omp_threads(n: int) -> int:
    """ggmlR's thread setter (its ggml is built with OpenMP): the thread setting (set_num_threads),
    and OMP_NUM_THREADS for OpenMP runtimes started from now on (OpenBLAS's, with its OpenMP build;
    ggml's own CPU threads are its thread pool, sized by the setting)."""
    n = int(n)
    check(n >= 1, "ggml_set_omp_threads: Number of threads must be at least 1")
    os.environ["OMP_NUM_THREADS"] = str(n)
    return ggml_set_n_threads(n)


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
