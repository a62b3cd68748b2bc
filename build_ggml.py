#!/usr/bin/env python3
"""Build the shared libraries of ggml 0.25.3 for ggmlpy, cached outside the git tree.

The source is the ggml subtree of the llama-cpp-python 0.3.36 sdist (sha256-pinned),
unpacked into vendor/ggml/. Builds go to <cache>/builds/<key>/ and the last one used
is recorded in <cache>/active.json for the runtime loader, and, when this script runs in a
virtual environment, in <venv>/share/ggmlpy/active.json too (so a shell without the build's
cache variables still finds it).

Usage:
    python build_ggml.py                      # CPU backend, tuned for this CPU
    python build_ggml.py --backend auto       # what CI and the tests use: CPU + RPC (+ BLAS when
                                              #   OpenBLAS is installed, + Vulkan when glslc,
                                              #   libvulkan-dev and spirv-headers are installed)
    python build_ggml.py --backend blas       # CPU + ggml's BLAS backend on OpenBLAS
    python build_ggml.py --backend vulkan --backend rpc   # the same, explicitly (fails without the tools)
    python build_ggml.py --backend vulkan     # CPU + Vulkan (fetches new Vulkan headers if needed)
    python build_ggml.py --backend cuda --cuda-arch "80;90"
    python build_ggml.py --backend rpc        # CPU + RPC client backend + bin/rpc-server
    python build_ggml.py --portable           # CPU variants chosen at run time (libggml-cpu-*.so)
    LIB=$(python build_ggml.py --print-lib-dir)   # logs go to stderr, stdout is the lib dir
    python build_ggml.py --force --jobs 2     # rebuild even if cached
    python build_ggml.py --list               # cached builds, and which one is active

The wheel's build (pyproject.toml, CMakeLists.txt: `pip install .`) calls this script for the steps
it shares with it, so each is written once:
    python build_ggml.py --prepare-source     # unpack vendor/ggml and apply every patch (prints the dir)
    python build_ggml.py --vulkan-include     # the Vulkan headers ggml-vulkan needs (fetched if too old)
    python build_ggml.py --kernel-plan        # the kernel libraries to prebuild: level|source|file name
    python build_ggml.py --compile-kernel CC SOURCE LEVEL OUT   # one of them, as the runtime compiles it
    python build_ggml.py --backend cuda --cmake-arg=-DGGML_CUDA_FA=OFF   # extra CMake options (own key)

Which build the runtime loads: several builds can sit in the cache (one per backend set and
CPU mode); the loader takes the one recorded in active.json, and every run of this script
records its build there, cache hit or not. So the last command wins, and switching is rerunning
it with the wanted options (a cache hit: 0.1 s). $GGMLPY_LIB_DIR overrides active.json.
One build with several backends (e.g. cpu+rpc+vulkan) serves CPU, Vulkan and RPC devices from
one process; there is no merging of separate builds.

`--backend auto` tries cpu+rpc+vulkan (+blas with OpenBLAS) when the Vulkan toolchain is present
(see preflight), and falls back to cpu+rpc(+blas) if that is missing or the Vulkan build fails (e.g. no network for the
newer Vulkan headers). CUDA is never automatic: its build takes long and needs nvcc.

The key-related helpers cache_dir(), cpu_tag() and build_key() are pure and importable.
"""
from __future__ import annotations

import argparse, collections, copy, glob, hashlib, json, os, re, shutil
import subprocess, sys, tarfile, time
from pathlib import Path

GGML_PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/"
# rpc-server is a llama.cpp tool, not part of the ggml subtree: we take this one file.
RPC_SERVER_SRC = "llama_cpp_python-0.3.36/vendor/llama.cpp/tools/rpc/rpc-server.cpp"
REPO = Path(__file__).resolve().parent
VENDOR = REPO / "vendor" / "ggml"
BACKENDS = ("blas", "cpu", "cuda", "rpc", "vulkan")
AUTO = "auto"  # --backend auto: rpc, plus blas and vulkan when their toolchains are here
MIN_VK_HEADER = 287  # ggml-vulkan needs vk::LayerSettingEXT (not in 1.3.239); extras gated at 287
PC_IN = """\
prefix=@CMAKE_INSTALL_PREFIX@
exec_prefix=${prefix}
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@

Name: ggml
Description: The GGML Tensor Library for Machine Learning
Version: @GGML_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} -lggml -lggml-base
"""
LOG = sys.stdout  # switched to stderr by --print-lib-dir so stdout stays parseable

# Source patches, applied to vendor/ggml before building (each once: its new text is its marker).
# Builds they change get "-<tag>" in their cache key, so no build from before a patch is reused.
#
# vk-descriptors (tag vkp1): ggml-vulkan gives every descriptor set one layout of
# MAX_PARAMETER_COUNT (12) storage-buffer bindings but writes only the pipeline's own (2-4), so
# the rest keep whatever buffers earlier dispatches put there, destroyed or not. Mesa 22.x's
# lavapipe (Debian 12) dereferences every binding of a bound set: once ggmlpy frees a buffer
# (pools free and reuse device memory all the time) the process corrupts its heap and aborts
# ("corrupted double-linked list") within a few training steps. The patch writes all bindings,
# the unused ones aliasing the first buffer. Drivers that ignore unused bindings do not care.
_VK_OLD = """    // skip the write if this set already holds these bindings from the last graph
    std::vector<vk::DescriptorBufferInfo> & bindings = ctx->descriptor_set_bindings[descriptor_set_idx];
    bool same = !ctx->device->disable_descriptor_reuse && bindings.size() == descriptor_buffer_infos.size();
    if (same) {
        size_t i = 0;
        for (const vk::DescriptorBufferInfo & info : descriptor_buffer_infos) {
            const vk::DescriptorBufferInfo & prev = bindings[i++];
            if (prev.buffer != info.buffer || prev.offset != info.offset || prev.range != info.range) {
                same = false;
                break;
            }
        }
    }
    if (!same) {
        vk::WriteDescriptorSet write_descriptor_set{ descriptor_set, 0, 0, pipeline->parameter_count, vk::DescriptorType::eStorageBuffer, nullptr, descriptor_buffer_infos.begin() };
        ctx->device->device.updateDescriptorSets({ write_descriptor_set }, {});
        bindings.assign(descriptor_buffer_infos.begin(), descriptor_buffer_infos.end());
    }"""
_VK_NEW = """    // ggmlpy patch (vk-descriptors): write all MAX_PARAMETER_COUNT bindings of the set, the unused
    // ones aliasing the first buffer, so that no binding keeps a destroyed buffer: Mesa 22.x lavapipe
    // dereferences every binding of a bound set, and a stale one corrupts the heap.
    vk::DescriptorBufferInfo all_infos[MAX_PARAMETER_COUNT];
    size_t n_infos = 0;
    for (const vk::DescriptorBufferInfo & info : descriptor_buffer_infos) {
        all_infos[n_infos++] = info;
    }
    for (size_t i = n_infos; i < MAX_PARAMETER_COUNT; i++) {
        all_infos[i] = all_infos[0];
    }
    // skip the write if this set already holds these bindings from the last graph
    std::vector<vk::DescriptorBufferInfo> & bindings = ctx->descriptor_set_bindings[descriptor_set_idx];
    bool same = !ctx->device->disable_descriptor_reuse && bindings.size() == MAX_PARAMETER_COUNT;
    if (same) {
        for (size_t i = 0; i < MAX_PARAMETER_COUNT; i++) {
            const vk::DescriptorBufferInfo & prev = bindings[i];
            if (prev.buffer != all_infos[i].buffer || prev.offset != all_infos[i].offset || prev.range != all_infos[i].range) {
                same = false;
                break;
            }
        }
    }
    if (!same) {
        vk::WriteDescriptorSet write_descriptor_set{ descriptor_set, 0, 0, MAX_PARAMETER_COUNT, vk::DescriptorType::eStorageBuffer, nullptr, all_infos };
        ctx->device->device.updateDescriptorSets({ write_descriptor_set }, {});
        bindings.assign(all_infos, all_infos + MAX_PARAMETER_COUNT);
    }"""

# rpc-fail-soft (tag rpcp1): ggml-rpc's client calls GGML_ABORT on any failed send or receive
# (a server killed mid-training aborts the client process) and sets no socket timeout (a frozen
# server blocks it in recv() forever). The patch gives client sockets send/receive timeouts,
# marks a connection whose send or receive fails as lost instead of aborting (later commands
# are skipped, replies read as zeros, the few values ggml asserts on are made harmless), and
# exports ggml_backend_rpc_lost(endpoint) and ggml_backend_rpc_set_timeout_ms(ms) through the
# RPC registry's get_proc_address: ggmlpy sets the timeout before connecting and asks after
# its calls on an RPC device, raising DeviceError. Several replacements, one tag.
_RPC_DISPATCH_OLD = """// macro for nicer error messages on server crash
#define RPC_STATUS_ASSERT(x) if (!(x)) GGML_ABORT("Remote RPC server crashed or returned malformed response")
"""
_RPC_DISPATCH_NEW = _RPC_DISPATCH_OLD + """
#include <chrono>

// ggmlpy patch (rpc-fail-soft): a connection whose send or receive fails (the server died) or
// times out (it froze: see rpc_transport_set_timeout_ms) is marked lost for good instead of
// aborting the process. From then on every command to it is skipped and its reply reads as
// zeros, so each ggml call returns harmlessly; the caller asks ggml_backend_rpc_lost(endpoint)
// after its calls (both reached through the RPC registry's get_proc_address).
static std::mutex g_rpc_lost_mutex;
static std::unordered_map<std::string, int> g_rpc_lost;  // endpoint -> 1 failed or closed, 2 timed out

static void rpc_mark_lost(const std::string & endpoint, int why) {
    {
        std::lock_guard<std::mutex> lock(g_rpc_lost_mutex);
        if (!g_rpc_lost.emplace(endpoint, why).second) {
            return;  // marked already
        }
    }
    // outside the lock: the log callback may be the application's, and may ask ggml_backend_rpc_lost
    GGML_LOG_ERROR("RPC connection to %s lost (%s)\\n", endpoint.c_str(), why == 2 ? "timed out" : "failed");
}

// 0: the connection to endpoint works (or was never made); 1: it failed or the server closed
// it; 2: the server did not answer within the timeout. A lost endpoint stays lost.
static int ggml_backend_rpc_lost(const char * endpoint) {
    std::lock_guard<std::mutex> lock(g_rpc_lost_mutex);
    auto it = g_rpc_lost.find(endpoint);
    return it == g_rpc_lost.end() ? 0 : it->second;
}

// Send and receive timeout of the connections made from now on, in ms (0: wait forever).
static void ggml_backend_rpc_set_timeout_ms(int ms) {
    rpc_transport_set_timeout_ms(ms);
}
"""

_RPC_HELLO_OLD = """    bool status = send_rpc_cmd(sock, RPC_CMD_HELLO, &request, sizeof(request), &response, sizeof(response));
    RPC_STATUS_ASSERT(status);
"""
_RPC_HELLO_NEW = """    bool status = send_rpc_cmd(sock, RPC_CMD_HELLO, &request, sizeof(request), &response, sizeof(response));
    if (!status) {  // ggmlpy patch (rpc-fail-soft): the caller marks the connection lost
        return false;
    }
"""

_RPC_MEMBERS_OLD = """    rpc_msg_queue    queue;
    socket_ptr       sock;
    std::atomic_bool running;
    std::thread      thread;
};
"""
_RPC_MEMBERS_NEW = """    rpc_msg_queue    queue;
    socket_ptr       sock;
    std::atomic_bool running;
    std::thread      thread;
    std::string      endpoint;     // ggmlpy patch (rpc-fail-soft)
    std::atomic_bool lost{false};  // set once a send/receive failed: nothing is sent any more
    int              timeout_ms = 0;
};
"""

_RPC_START_OLD = """void rpc_dispatcher::start(const std::string & endpoint) {
    std::string host;
    int port;
    if (!parse_endpoint(endpoint, host, port)) {
        GGML_ABORT("Failed to parse endpoint: %s\\n", endpoint.c_str());
    }
    if (!rpc_transport_init()) {
        GGML_ABORT("RPC transport initialization failed\\n");
    }

    sock = socket_t::connect(host.c_str(), port);
    if (sock == nullptr) {
        GGML_ABORT("Failed to connect to %s\\n", endpoint.c_str());
    }
    if (!negotiate_hello(sock)) {
        GGML_ABORT("RPC handshake failed for %s\\n", endpoint.c_str());
    }
    LOG_DBG("[%s] connected to %s\\n", __func__, endpoint.c_str());
    running = true;
    thread = std::thread(rpc_dispatcher_trampoline, this);
}

void rpc_dispatcher::work() {
    while (running) {
        rpc_msg_ptr msg_ptr;
        if (!queue.pop(&msg_ptr)) {
            break;
        }
        if (msg_ptr->cmd != RPC_CMD_NONE) {
            if (msg_ptr->output) {
                bool status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size, msg_ptr->output, msg_ptr->output_size);
                RPC_STATUS_ASSERT(status);
            } else {
                bool status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size);
                RPC_STATUS_ASSERT(status);
            }
        }
        msg_ptr->completion.set_value();
    }
}
"""
_RPC_START_NEW = """// ggmlpy patch (rpc-fail-soft): a server that cannot be reached marks the connection lost; the
// worker thread starts anyway, so that every command completes (skipped) instead of waiting.
void rpc_dispatcher::start(const std::string & endpoint) {
    this->endpoint = endpoint;
    timeout_ms = rpc_transport_get_timeout_ms();
    std::string host;
    int port;
    if (!parse_endpoint(endpoint, host, port)) {
        GGML_LOG_ERROR("Failed to parse endpoint: %s\\n", endpoint.c_str());
        lost = true;
    } else if (!rpc_transport_init()) {
        GGML_LOG_ERROR("RPC transport initialization failed\\n");
        lost = true;
    } else {
        const auto t0 = std::chrono::steady_clock::now();
        sock = socket_t::connect(host.c_str(), port);
        if (sock == nullptr) {
            GGML_LOG_ERROR("Failed to connect to %s\\n", endpoint.c_str());
            lost = true;
        } else if (!negotiate_hello(sock)) {
            GGML_LOG_ERROR("RPC handshake failed for %s\\n", endpoint.c_str());
            lost = true;
        }
        if (lost) {
            const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
            rpc_mark_lost(endpoint, timeout_ms > 0 && ms >= timeout_ms * 9 / 10 ? 2 : 1);
            sock = nullptr;
        }
    }
    if (lost) {
        rpc_mark_lost(endpoint, 1);  // the endpoint or transport failures above; a no-op after a connect failure
    } else {
        LOG_DBG("[%s] connected to %s\\n", __func__, endpoint.c_str());
    }
    running = true;
    thread = std::thread(rpc_dispatcher_trampoline, this);
}

void rpc_dispatcher::work() {
    while (running) {
        rpc_msg_ptr msg_ptr;
        if (!queue.pop(&msg_ptr)) {
            break;
        }
        if (msg_ptr->cmd != RPC_CMD_NONE) {
            bool status = false;
            const auto t0 = std::chrono::steady_clock::now();
            if (!lost) {
                if (msg_ptr->output) {
                    status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size, msg_ptr->output, msg_ptr->output_size);
                } else {
                    status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size);
                }
            }
            if (!status) {
                if (!lost) {
                    // a receive that waited the whole timeout is a frozen server, anything else a dead one
                    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
                    lost = true;
                    rpc_mark_lost(endpoint, timeout_ms > 0 && ms >= timeout_ms * 9 / 10 ? 2 : 1);
                }
                if (msg_ptr->output) {  // the caller reads zeros, never a half-received reply
                    memset(msg_ptr->output, 0, msg_ptr->output_size);
                }
            }
        }
        msg_ptr->completion.set_value();
    }
}
"""

_RPC_BASE_OLD = """    ctx->dispatcher->send(RPC_CMD_BUFFER_GET_BASE, request, sizeof(*request), &response, sizeof(response));
    ctx->base_ptr = reinterpret_cast<void *>(response.base_ptr);
"""
_RPC_BASE_NEW = """    ctx->dispatcher->send(RPC_CMD_BUFFER_GET_BASE, request, sizeof(*request), &response, sizeof(response));
    if (response.base_ptr == 0) {
        // ggmlpy patch (rpc-fail-soft): the connection is lost; ggml asserts on a NULL base, and
        // the client never dereferences a remote address: any aligned non-NULL value will do
        return reinterpret_cast<void *>(uintptr_t(4096));
    }
    ctx->base_ptr = reinterpret_cast<void *>(response.base_ptr);
"""

_RPC_ALIGN_OLD = """    dispatcher->send(RPC_CMD_GET_ALIGNMENT, request, sizeof(*request), &response, sizeof(response));
    return response.alignment;
"""
_RPC_ALIGN_NEW = """    dispatcher->send(RPC_CMD_GET_ALIGNMENT, request, sizeof(*request), &response, sizeof(response));
    // ggmlpy patch (rpc-fail-soft): 0 from a lost connection would divide by zero in ggml-alloc
    return response.alignment != 0 ? response.alignment : 32;
"""

_RPC_MAXSIZE_OLD = """    dispatcher->send(RPC_CMD_GET_MAX_SIZE, request, sizeof(*request), &response, sizeof(response));
    return response.max_size;
"""
_RPC_MAXSIZE_NEW = """    dispatcher->send(RPC_CMD_GET_MAX_SIZE, request, sizeof(*request), &response, sizeof(response));
    // ggmlpy patch (rpc-fail-soft): 0 from a lost connection: no limit (allocations fail anyway)
    return response.max_size != 0 ? response.max_size : SIZE_MAX;
"""

_RPC_PROC_OLD = """    if (std::strcmp(name, "ggml_backend_rpc_start_server") == 0) {
        return (void *)ggml_backend_rpc_start_server;
    }
"""
_RPC_PROC_NEW = _RPC_PROC_OLD + """    if (std::strcmp(name, "ggml_backend_rpc_lost") == 0) {  // ggmlpy patch (rpc-fail-soft)
        return (void *)ggml_backend_rpc_lost;
    }
    if (std::strcmp(name, "ggml_backend_rpc_set_timeout_ms") == 0) {
        return (void *)ggml_backend_rpc_set_timeout_ms;
    }
"""

_RPC_TRANSPORT_H_OLD = """bool rpc_transport_init();
void rpc_transport_shutdown();
"""
_RPC_TRANSPORT_H_NEW = _RPC_TRANSPORT_H_OLD + """// ggmlpy patch (rpc-fail-soft): SO_RCVTIMEO/SO_SNDTIMEO (and the connect timeout) of the
// client connections made from now on, in ms; 0 (the default) waits forever
void rpc_transport_set_timeout_ms(int ms);
int rpc_transport_get_timeout_ms();
"""

_RPC_TRANSPORT_OLD = """static bool set_no_delay(sockfd_t sockfd) {
"""
_RPC_TRANSPORT_NEW = """// ggmlpy patch (rpc-fail-soft): a frozen server makes send/recv fail after the timeout instead
// of blocking forever (on Linux SO_SNDTIMEO bounds connect() too)
static std::atomic<int> g_rpc_timeout_ms{0};

void rpc_transport_set_timeout_ms(int ms) {
    g_rpc_timeout_ms = ms > 0 ? ms : 0;
}

int rpc_transport_get_timeout_ms() {
    return g_rpc_timeout_ms;
}

static bool set_io_timeout(sockfd_t sockfd) {
    const int ms = g_rpc_timeout_ms;
    if (ms <= 0) {
        return true;
    }
#ifdef _WIN32
    DWORD tv = (DWORD)ms;
#else
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
#endif
    return setsockopt(sockfd, SOL_SOCKET, SO_RCVTIMEO, (const char *)&tv, sizeof(tv)) == 0
        && setsockopt(sockfd, SOL_SOCKET, SO_SNDTIMEO, (const char *)&tv, sizeof(tv)) == 0;
}

static bool set_no_delay(sockfd_t sockfd) {
"""

_RPC_CONNECT_OLD = """    if (!set_no_delay(sockfd)) {
        GGML_LOG_ERROR("Failed to set TCP_NODELAY\\n");
        return nullptr;
    }
    struct sockaddr_in addr;
"""
_RPC_CONNECT_NEW = """    if (!set_no_delay(sockfd)) {
        GGML_LOG_ERROR("Failed to set TCP_NODELAY\\n");
        return nullptr;
    }
    if (!set_io_timeout(sockfd)) {  // ggmlpy patch (rpc-fail-soft)
        GGML_LOG_ERROR("Failed to set the socket timeouts\\n");
        return nullptr;
    }
    struct sockaddr_in addr;
"""

_RPC_INCLUDE_OLD = """#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
"""
_RPC_INCLUDE_NEW = """#include <atomic>  // ggmlpy patch (rpc-fail-soft)
""" + _RPC_INCLUDE_OLD
# ggml's thread pool waits at the barrier after every node by spinning, for ever: with more
# runnable threads than cores (another busy process, or a loaded shared machine) a thread the
# scheduler took off its core keeps the others spinning for whole time slices. Measured on 2
# cores at load 10, a ResNet-style ONNX call took 116-220 ms against OpenMP's 3-7 ms (libgomp
# spins GOMP_SPINCOUNT times, then sleeps on a futex). The patch does the same: 2 000 spins,
# then a futex wait on the barrier's counter, woken by the last thread only when one sleeps.
_BARRIER_OLD = """        // exit barrier (full seq-cst fence)
        atomic_fetch_add_explicit(&tp->n_barrier_passed, 1, memory_order_seq_cst);
        return;
    }

    // wait for other threads
    while (atomic_load_explicit(&tp->n_barrier_passed, memory_order_relaxed) == n_passed) {
        ggml_thread_cpu_relax();
    }
"""
_BARRIER_NEW = """        // exit barrier (full seq-cst fence)
        atomic_fetch_add_explicit(&tp->n_barrier_passed, 1, memory_order_seq_cst);
#if defined(__gnu_linux__)
        // wake the threads that stopped spinning (seq-cst: a waiter counted after this load
        // sees the new n_barrier_passed in its futex wait, and returns at once)
        if (atomic_load_explicit(&ggml_barrier_sleepers, memory_order_seq_cst) > 0) {
            syscall(SYS_futex, &tp->n_barrier_passed, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        }
#endif
        return;
    }

    // wait for other threads: spin, then sleep until the last one arrives
    for (int spins = 0; atomic_load_explicit(&tp->n_barrier_passed, memory_order_relaxed) == n_passed; spins++) {
#if defined(__gnu_linux__)
        if (spins >= GGML_BARRIER_SPINS) {
            ggml_caller_pin(tp);  // the caller waits on the CPU its workers leave out (cpu-workers-off-caller)
            atomic_fetch_add_explicit(&ggml_barrier_sleepers, 1, memory_order_seq_cst);
            syscall(SYS_futex, &tp->n_barrier_passed, FUTEX_WAIT_PRIVATE, n_passed, NULL, NULL, 0);
            atomic_fetch_sub_explicit(&ggml_barrier_sleepers, 1, memory_order_seq_cst);
            continue;
        }
#endif
        ggml_thread_cpu_relax();
    }
"""
_BARRIER_DECL_OLD = """void ggml_barrier(struct ggml_threadpool * tp) {
    int n_threads"""
_BARRIER_DECL_NEW = """#if defined(__gnu_linux__) && !defined(GGML_USE_OPENMP)
#include <linux/futex.h>
#define GGML_BARRIER_SPINS 2000
static atomic_int ggml_barrier_sleepers; // threads of any pool asleep in ggml_barrier
#endif

void ggml_barrier(struct ggml_threadpool * tp) {
    int n_threads"""
# cpu-workers-off-caller (tag wo2): before each graph, a pool's workers may run anywhere the
# caller may, except on the CPU the caller is on now. A worker woken from its sleep between graphs
# is otherwise placed by the kernel on the waking thread's CPU (wake-affine; measured on these KVM
# vCPUs: 20 wakes in 20), where it waits while the caller spins in the graph's first barrier, so a
# graph after an idle moment ran on one core: a ResNet-style ONNX call after a 0.1 s pause took
# 2.0 ms on 2 threads against 0.5 ms back to back and 1.0 ms on one thread. Kept off for a pool
# with a cpumask of its own, and when the caller's CPUs leave fewer than one CPU per worker.
_POOL_FIELD_OLD = """    uint32_t     poll;        // Polling level (0 - no polling)
"""
_POOL_FIELD_NEW = _POOL_FIELD_OLD + """    int          off_cpu;     // ggmlpy patch (cpu-workers-off-caller): the CPU the workers' affinity leaves out, or -1
"""
_POOL_INIT_OLD = """        threadpool->prio             = tpp->prio;
        threadpool->ec               = GGML_STATUS_SUCCESS;
"""
_POOL_INIT_NEW = _POOL_INIT_OLD + """        threadpool->off_cpu          = -1;  // ggmlpy patch (cpu-workers-off-caller)
"""
_CALLER_DECL_OLD = """#if defined(__gnu_linux__) && !defined(GGML_USE_OPENMP)
#include <linux/futex.h>
"""
_CALLER_DECL_NEW = """#if defined(__linux__) && !defined(GGML_USE_OPENMP)
// ggmlpy patch (cpu-workers-off-caller): the thread that started a graph, about to sleep in one of
// its barriers, first narrows its own affinity to the CPU its workers leave out, so that woken it
// is placed there rather than beside the worker that woke it; the end of the graph gives its
// affinity back. Only on that slow path: a narrowing and its undo cost more than a small graph.
static __thread struct ggml_threadpool * ggml_caller_pool;  // the pool whose graph this thread runs as worker 0
static __thread bool ggml_caller_pinned;
static __thread cpu_set_t ggml_caller_mask;                  // its affinity before the narrowing

static void ggml_caller_pin(struct ggml_threadpool * tp);
static void ggml_caller_unpin(void) {
    if (ggml_caller_pinned) {
        pthread_setaffinity_np(pthread_self(), sizeof(ggml_caller_mask), &ggml_caller_mask);
        ggml_caller_pinned = false;
    }
    ggml_caller_pool = NULL;
}
#else
static void ggml_caller_pin(struct ggml_threadpool * tp) { (void) tp; }
static void ggml_caller_unpin(void) {}
#endif

""" + _CALLER_DECL_OLD
_CALLER_END_OLD = """    // This is a work thread too
    ggml_graph_compute_thread(&threadpool->workers[0]);
#endif
"""
_CALLER_END_NEW = _CALLER_END_OLD + """    ggml_caller_unpin();  // ggmlpy patch (cpu-workers-off-caller)
"""
_KICKOFF_OLD = """static void ggml_graph_compute_kickoff(struct ggml_threadpool * threadpool, int n_threads)
{
"""
_KICKOFF_NEW = """#if defined(__linux__)
// ggmlpy patch (cpu-workers-off-caller): the workers' affinity is the caller's, less the CPU the
// caller is on; the syscalls run only when the caller has moved since the last graph.
static void ggml_workers_off_caller(struct ggml_threadpool * tp, int n_threads) {
    ggml_caller_pool = tp;
    if (n_threads < 2 || ggml_thread_cpumask_is_valid(tp->workers[0].cpumask)) {
        return;
    }
    const int cpu = sched_getcpu();
    if (cpu < 0 || cpu == tp->off_cpu) {
        return;
    }
    cpu_set_t allowed;
    if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) {
        return;
    }
    CPU_CLR(cpu, &allowed);
    const bool room = CPU_COUNT(&allowed) >= tp->n_threads - 1;
    if (!room) {
        if (tp->off_cpu < 0) {
            return;  // never narrowed: the workers keep the affinity they started with
        }
        CPU_SET(cpu, &allowed);  // undo the narrowing: every CPU the caller may use
    }
    for (int j = 1; j < tp->n_threads; j++) {
        pthread_setaffinity_np(tp->workers[j].thrd, sizeof(allowed), &allowed);
    }
    tp->off_cpu = room ? cpu : -1;
}

static void ggml_caller_pin(struct ggml_threadpool * tp) {
    if (tp != ggml_caller_pool || ggml_caller_pinned || tp->off_cpu < 0) {
        return;
    }
    if (pthread_getaffinity_np(pthread_self(), sizeof(ggml_caller_mask), &ggml_caller_mask) != 0) {
        return;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(tp->off_cpu, &one);
    ggml_caller_pinned = pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
}
#else
static void ggml_workers_off_caller(struct ggml_threadpool * tp, int n_threads) {
    UNUSED(tp);
    UNUSED(n_threads);
}
#endif

static void ggml_graph_compute_kickoff(struct ggml_threadpool * threadpool, int n_threads)
{
    ggml_workers_off_caller(threadpool, n_threads);  // ggmlpy patch (cpu-workers-off-caller)

"""
PATCHES = [
    # (name, backend it concerns, key tag, file under vendor/ggml, old text, new text)
    ("vk-descriptors", "vulkan", "vkp1", "src/ggml-vulkan/ggml-vulkan-common.h", _VK_OLD, _VK_NEW),
    ("cpu-barrier-sleep", "cpu", "bs2", "src/ggml-cpu/ggml-cpu.c", _BARRIER_DECL_OLD, _BARRIER_DECL_NEW),
    ("cpu-barrier-sleep", "cpu", "bs2", "src/ggml-cpu/ggml-cpu.c", _BARRIER_OLD, _BARRIER_NEW),
    *(("cpu-workers-off-caller", "cpu", "wo2", "src/ggml-cpu/ggml-cpu.c", old, new) for old, new in (
        (_POOL_FIELD_OLD, _POOL_FIELD_NEW), (_POOL_INIT_OLD, _POOL_INIT_NEW), (_CALLER_DECL_OLD, _CALLER_DECL_NEW), (_KICKOFF_OLD, _KICKOFF_NEW),
        (_CALLER_END_OLD, _CALLER_END_NEW))),
    *(("rpc-fail-soft", "rpc", "rpcp1", f"src/ggml-rpc/{rel}", old, new) for rel, old, new in (
        ("transport.h", _RPC_TRANSPORT_H_OLD, _RPC_TRANSPORT_H_NEW),
        ("transport.cpp", _RPC_INCLUDE_OLD, _RPC_INCLUDE_NEW),
        ("transport.cpp", _RPC_TRANSPORT_OLD, _RPC_TRANSPORT_NEW),
        ("transport.cpp", _RPC_CONNECT_OLD, _RPC_CONNECT_NEW),
        ("ggml-rpc.cpp", _RPC_DISPATCH_OLD, _RPC_DISPATCH_NEW),
        ("ggml-rpc.cpp", _RPC_HELLO_OLD, _RPC_HELLO_NEW),
        ("ggml-rpc.cpp", _RPC_MEMBERS_OLD, _RPC_MEMBERS_NEW),
        ("ggml-rpc.cpp", _RPC_START_OLD, _RPC_START_NEW),
        ("ggml-rpc.cpp", _RPC_BASE_OLD, _RPC_BASE_NEW),
        ("ggml-rpc.cpp", _RPC_ALIGN_OLD, _RPC_ALIGN_NEW),
        ("ggml-rpc.cpp", _RPC_MAXSIZE_OLD, _RPC_MAXSIZE_NEW),
        ("ggml-rpc.cpp", _RPC_PROC_OLD, _RPC_PROC_NEW))),
]


class BuildError(Exception):
    """Fatal, user-facing failure; exit code attached."""
    def __init__(self, msg: str, code: int = 1):
        super().__init__(msg)
        self.code = code


def log(msg: str) -> None:
    print(f"[build_ggml] {msg}", file=LOG, flush=True)


# ---- pure helpers (importable, no side effects) ---------------------------------

def _load_buildinfo():
    """src/ggmlpy/_buildinfo.py by path: the pin, cache_dir() and cpu_tag() are shared with the runtime
    loader, and importing the ggmlpy package itself would try to load a libggml."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("ggmlpy_buildinfo", REPO / "src" / "ggmlpy" / "_buildinfo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_info = _load_buildinfo()
cache_dir, cpu_tag = _info.cache_dir, _info.cpu_tag
GGML_VERSION, SDIST_NAME, SDIST_SHA256 = _info.GGML_VERSION, _info.SDIST_NAME, _info.SDIST_SHA256
SDIST_PIN = f"llama-cpp-python=={_info.LLAMA_CPP_PYTHON_VERSION}"


# Compiler flags every build gets, and their tag in the build key (a build made without them
# is never reused). -fno-math-errno: no kernel reads errno, and without it GCC cannot vectorize
# a loop that calls sqrtf; ggml's AdamW step went from 61 to 9 us per 256x256 parameter.
CODEGEN_FLAGS = ("-fno-math-errno",)
CODEGEN_TAG = "nme"

# ggml's CPU threads are its own pool (ggml_threadpool), not OpenMP: which libgomp served
# OpenMP, and with which spin policy, depended on what the process imported first (torch ships
# its own libgomp.so.1, which then took ggml's place and its spin setting), up to 4x on a busy
# machine. The pool's polling is ggmlpy's to set whatever else is loaded. Its tag keeps an
# OpenMP build from being reused.
THREADING_FLAGS = ("-DGGML_OPENMP=OFF",)
THREADING_TAG = "tp"


def build_key(backends, native: bool, extra_cmake=()) -> str:
    names = "+".join(sorted(set(backends) | {"cpu"}))
    key = (f"ggml-{GGML_VERSION}-{names}-{'native' if native else 'portable'}-{cpu_tag(native)}-{CODEGEN_TAG}"
           f"-{THREADING_TAG}")
    for tag in dict.fromkeys(tag for _name, backend, tag, *_ in PATCHES if backend in backends):
        key += f"-{tag}"  # a patched build never reuses an unpatched one; a patch of several parts: one tag
    if extra_cmake:  # extra CMake options make another build: give it its own key
        key += "-x" + hashlib.sha1("\0".join(extra_cmake).encode()).hexdigest()[:8]
    return key


# ---- source ----------------------------------------------------------------------

def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_sdist(cache: Path) -> Path:
    sdist = cache / "sdist" / SDIST_NAME
    if not sdist.exists():
        log(f"downloading {SDIST_PIN} sdist (76 MB) ...")
        run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             SDIST_PIN, "-d", str(sdist.parent)])
    got = sha256(sdist)
    if got != SDIST_SHA256:
        raise BuildError(f"sha256 mismatch for {sdist}:\n  expected {SDIST_SHA256}\n  got      {got}\n"
                         "delete the file and rerun to download it again")
    return sdist


def unpack(sdist: Path) -> None:
    stamp = VENDOR / f".unpacked-{SDIST_SHA256[:12]}"
    if stamp.exists():
        return
    log(f"unpacking ggml source into {VENDOR}")
    VENDOR.mkdir(parents=True, exist_ok=True)
    for p in VENDOR.iterdir():  # README.md is tracked by git; everything else is ours
        if p.name != "README.md":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()

    def members(tar):
        """The ggml subtree's files and folders, renamed to their place under vendor/ggml: nothing else
        (a link, an absolute path, a `..`) is taken, whatever tarfile's own checks (its "data" filter,
        which Debian 12's Python 3.11.2 lacks) would say."""
        for m in tar:
            if m.name.startswith(GGML_PREFIX) and m.name != GGML_PREFIX:
                name = m.name[len(GGML_PREFIX):]
            elif m.name == RPC_SERVER_SRC:
                name = "tools/rpc-server.cpp"
            else:
                continue
            if not (m.isfile() or m.isdir()) or name.startswith("/") or ".." in Path(name).parts:
                raise BuildError(f"{sdist.name}: {m.name} is not a plain file or folder of the ggml subtree")
            m = copy.copy(m)
            m.name = name
            yield m

    with tarfile.open(sdist) as tar:
        data_filter = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.11.4 and later
        tar.extractall(VENDOR, members=members(tar), **data_filter)
    if not (VENDOR / "CMakeLists.txt").exists():
        raise BuildError(f"{GGML_PREFIX} not found in {sdist}")
    # The subtree's CMakeLists configures ggml.pc.in, which the sdist does not ship.
    (VENDOR / "ggml.pc.in").write_text(PC_IN)
    stamp.touch()


def apply_patches(backends: set[str]) -> list[str]:
    """Apply PATCHES for these backends to vendor/ggml (idempotent); return their names."""
    done = []
    for name, backend, _tag, rel, old, new in PATCHES:
        if backend not in backends:
            continue
        path = VENDOR / rel
        text = path.read_text()
        if new not in text:
            if old not in text:
                raise BuildError(f"source patch {name}: the text to replace is not in {path}; "
                                 "delete vendor/ggml/.unpacked-* and rerun to unpack a fresh copy")
            path.write_text(text.replace(old, new, 1))
            log(f"patched {rel} ({name})")
        if name not in done:
            done.append(name)
    return done


# ---- preflight and Vulkan headers ------------------------------------------------

def vk_header_version(include_dir: Path) -> int:
    try:
        m = re.search(r"#define VK_HEADER_VERSION (\d+)", (include_dir / "vulkan/vulkan_core.h").read_text())
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def missing_tools(backends: set[str]) -> list[str]:
    missing = []
    if not shutil.which("cmake"):
        missing.append("cmake (apt-get install cmake)")
    if not (shutil.which("cc") or shutil.which("gcc")) or not (shutil.which("c++") or shutil.which("g++")):
        missing.append("a C/C++ compiler (apt-get install build-essential)")
    if "vulkan" in backends:
        if not shutil.which("glslc"):
            missing.append("glslc (apt-get install glslc)")
        if not glob.glob("/usr/lib/*/libvulkan.so") + glob.glob("/usr/lib/libvulkan.so"):
            missing.append("the Vulkan loader library and headers (apt-get install libvulkan-dev)")
        if not glob.glob("/usr/share/cmake*/SPIRV-Headers") + glob.glob("/usr/lib/*/cmake/SPIRV-Headers"):
            missing.append("SPIRV-Headers (apt-get install spirv-headers)")
        if vk_header_version(Path("/usr/include")) < MIN_VK_HEADER and not (shutil.which("apt-get") and shutil.which("dpkg")):
            missing.append(f"Vulkan headers >= 1.3.{MIN_VK_HEADER} (apt-get/dpkg to fetch them)")
    if "blas" in backends and not openblas_headers():
        missing.append("OpenBLAS (apt-get install libopenblas-openmp-dev)")
    if "cuda" in backends:
        if not shutil.which("nvcc"):
            missing.append("nvcc (install the CUDA toolkit, e.g. apt-get install nvidia-cuda-toolkit)")
        elif not cuda_has_cublas():
            missing.append("cuBLAS headers (cublas_v2.h), which ggml-cuda links: install the toolkit's cuBLAS "
                           "development files (e.g. apt-get install libcublas-dev-<version>), or set CUDA_HOME")
    return missing


def openblas_headers() -> list[str]:
    """OpenBLAS's cblas.h (Debian puts each threading variant's under its own folder)."""
    return glob.glob("/usr/include/*/openblas*/cblas.h") + glob.glob("/usr/include/openblas/cblas.h")


def cuda_has_cublas() -> bool:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/usr"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
        try:  # a wrapper script (exec /usr/local/cuda-X/bin/nvcc "$@"): follow it
            m = re.search(r"(/\S+)/bin/nvcc", Path(nvcc).read_text(errors="replace")[:4096])
            if m:
                roots.append(m.group(1))
        except OSError:
            pass
    dirs = []
    for r in filter(None, roots):
        dirs += [Path(r) / "include", *Path(r).glob("targets/*/include")]
    dirs.append(Path("/usr/include/x86_64-linux-gnu"))
    return any((d / "cublas_v2.h").exists() for d in dirs)


def preflight(backends: set[str]) -> None:
    missing = missing_tools(backends)
    if missing:
        raise BuildError("missing build tools: " + "; ".join(missing), code=2)


def auto_candidates(cache: Path, native: bool, extra_cmake=()) -> list[set[str]]:
    """--backend auto: the backend sets to try, best first (a cached Vulkan build counts as present)."""
    # OpenBLAS serves the CPU device's transposed matrix products (ggml's BLAS backend)
    base = {"cpu", "rpc"} | ({"blas"} if openblas_headers() else set())
    full = base | {"vulkan"}
    if (cache / "builds" / build_key(full, native, extra_cmake) / "build.json").exists():
        return [full, base]
    vk_missing = [m for m in missing_tools(full) if m not in missing_tools(base)]
    if vk_missing:
        log("--backend auto: no Vulkan (missing " + "; ".join(vk_missing) + "); building " + "+".join(sorted(base)))
        return [base]
    return [full, base]


def vulkan_include_dir(cache: Path) -> Path | None:
    """Debian 12's headers are too old for ggml-vulkan: unpack trixie's libvulkan-dev privately."""
    if vk_header_version(Path("/usr/include")) >= MIN_VK_HEADER:
        return None
    dest = cache / "vulkan-headers"
    if vk_header_version(dest / "usr/include") >= MIN_VK_HEADER:
        return dest / "usr/include"
    log("system Vulkan headers too old; fetching libvulkan-dev from Debian trixie (nothing is installed)")
    apt = cache / "apt"
    for d in ("lists/partial", "cache/archives/partial", "debs"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text("deb http://deb.debian.org/debian trixie main\n")
    opts = [f"-oDir::Etc::SourceList={apt}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
            "-oDir::Etc::Preferences=/dev/null", "-oDir::Etc::PreferencesParts=/dev/null",
            f"-oDir::State::Lists={apt}/lists", f"-oDir::Cache={apt}/cache",
            "-oAcquire::Languages=none", "-oAPT::Sandbox::User=root"]
    run(["apt-get", *opts, "update"])
    run(["apt-get", *opts, "download", "libvulkan-dev/trixie"], cwd=apt / "debs")
    debs = sorted((apt / "debs").glob("libvulkan-dev_*.deb"))
    shutil.rmtree(dest, ignore_errors=True)
    run(["dpkg", "-x", str(debs[-1]), str(dest)])
    log(f"Vulkan headers {vk_header_version(dest / 'usr/include')} in {dest / 'usr/include'}")
    return dest / "usr/include"


# ---- configure / build -----------------------------------------------------------

# The full output of every command a build runs goes to <cache>/builds/<key>/build.log (ggml's own
# sources give ~14 600 lines and some 800 compiler warnings); the terminal gets one line per stage,
# a percentage while compiling, and the log's tail when a command fails.
BUILD_LOG: Path | None = None  # set per build by build_or_hit; None: <cache>/build.log
TAIL_LINES = 40
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]|^\[\s*(\d+)%\]")  # ninja "[12/345]", make "[ 40%]"


def _open_log(cmd: list[str], cwd: Path | None):
    path = BUILD_LOG or cache_dir() / "build.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a", errors="replace")
    f.write(f"\n$ {' '.join(map(str, cmd))}" + (f"   (in {cwd})" if cwd else "") + "\n")
    return path, f


def run(cmd: list[str], cwd: Path | None = None, progress: bool = False) -> None:
    """Run a command with its output appended to the build log; on failure raise with its tail.

    progress: print a line at every tenth of the way through a ninja or make build. A build
    runs nested builds (the Vulkan backend's shader generator: "[1/2]", "[2/2]" in the middle
    of "[37/365]"): only the build with the most steps counts."""
    tail = collections.deque(maxlen=TAIL_LINES)
    path, f = _open_log(cmd, cwd)
    shown = total = 0
    with f:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        for line in proc.stdout:
            f.write(line)
            tail.append(line)
            m = _PROGRESS.match(line) if progress else None
            if m and m.group(2):
                steps = int(m.group(2))
                if steps < total:
                    m = None   # a nested build's step
                elif steps > total:
                    shown, total = 0, steps   # the outer build (or a nested one seen first, now outgrown)
            if m:
                pct = (100 * int(m.group(1)) // max(int(m.group(2)), 1)) if m.group(2) else int(m.group(3))
                if pct >= shown + 10:
                    shown = pct - pct % 10
                    done = f" ({m.group(1)}/{m.group(2)})" if m.group(2) else ""
                    log(f"  {shown:3d}%{done}")
        code = proc.wait()
    if code != 0:
        raise BuildError(f"command failed ({code}): {' '.join(map(str, cmd))}\n"
                         f"--- last {len(tail)} lines of the build log ---\n" + "".join(tail)
                         + f"--- full log: {path}")


def default_cuda_arch() -> str:
    has_gpu = bool(glob.glob("/dev/nvidia[0-9]*"))
    return "native" if has_gpu else "80;90"


def ggml_options() -> list[str]:
    """The ggml options every build gets, this script's and the wheel's (CMakeLists.txt reads them
    with --ggml-options), as -DNAME=VALUE."""
    return ["-DBUILD_SHARED_LIBS=ON", "-DGGML_LLAMAFILE=ON",  # OFF halves f32 mul_mat speed
            "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF", *THREADING_FLAGS,
            "-DGIT_EXE=OFF",  # else ggml reports ggmlpy's git commit as its own
            f"-DCMAKE_C_FLAGS={' '.join(CODEGEN_FLAGS)}", f"-DCMAKE_CXX_FLAGS={' '.join(CODEGEN_FLAGS)}"]


def cmake_flags(args, backends: set[str], install: Path, cache: Path) -> list[str]:
    flags = ["-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_INSTALL_PREFIX={install}",
             "-DCMAKE_INSTALL_LIBDIR=lib",  # never lib64: the loader expects install/lib
             "-DCMAKE_INSTALL_RPATH=$ORIGIN", "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON", *ggml_options()]
    if args.native:
        flags.append("-DGGML_NATIVE=ON")
    else:  # backends become loadable modules; bake install/lib into ggml's search path
        flags += ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
                  f"-DGGML_BACKEND_DIR={install / 'lib'}"]
    if "vulkan" in backends:
        flags.append("-DGGML_VULKAN=ON")
        inc = vulkan_include_dir(cache)
        if inc:
            flags.append(f"-DVulkan_INCLUDE_DIR={inc}")
    if "cuda" in backends:
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={shutil.which('nvcc')}",
                  f"-DCMAKE_CUDA_ARCHITECTURES={args.cuda_arch or default_cuda_arch()}"]
    if "rpc" in backends:
        flags.append("-DGGML_RPC=ON")
    if "blas" in backends:
        flags += ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"]
    if shutil.which("ninja"):
        flags.append("-GNinja")
    return flags + list(args.cmake_arg)


def build_rpc_server(install: Path) -> None:
    """llama.cpp's tools/rpc/CMakeLists builds it; ggml's subtree does not, so compile it here."""
    log("compiling rpc-server")
    (install / "bin").mkdir(exist_ok=True)
    cxx = shutil.which("c++") or shutil.which("g++")
    run([cxx, "-O2", "-std=c++17", "-pthread", str(VENDOR / "tools/rpc-server.cpp"),
         f"-I{install / 'include'}", f"-L{install / 'lib'}", "-lggml", "-lggml-base",
         "-Wl,-rpath,$ORIGIN/../lib", "-o", str(install / "bin/rpc-server")])


def build(args, backends: set[str], root: Path, cache: Path) -> dict:
    build_dir, install = root / "build", root / "install"
    flags = cmake_flags(args, backends, install, cache)
    for d in (build_dir, install):
        shutil.rmtree(d, ignore_errors=True)  # stale trees from failed or forced builds
    t0 = time.monotonic()
    log(f"configuring ({'+'.join(sorted(backends))}; log: {BUILD_LOG})")
    run(["cmake", "-S", str(VENDOR), "-B", str(build_dir), *flags])
    log(f"compiling with {args.jobs} jobs")
    run(["cmake", "--build", str(build_dir), "--parallel", str(args.jobs)], progress=True)
    log("installing")
    run(["cmake", "--install", str(build_dir)])
    if "rpc" in backends:
        build_rpc_server(install)
    (install / "bin").mkdir(exist_ok=True)
    return {"key": root.name, "ggml_version": GGML_VERSION, "backends": sorted(backends),
            "native": args.native, "cpu": cpu_tag(args.native),
            "lib_dir": str(install / "lib"), "bin_dir": str(install / "bin"),
            "include_dir": str(install / "include"), "cmake_flags": flags,
            "cuda_arch": args.cuda_arch or default_cuda_arch() if "cuda" in backends else None,
            "build_seconds": round(time.monotonic() - t0, 1),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_json(path: Path, info: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    tmp.replace(path)  # atomic: readers never see half a file


def build_or_hit(args, backends: set[str], cache: Path) -> dict:
    root = cache / "builds" / build_key(backends, args.native, args.cmake_arg)
    marker = root / "build.json"
    info = json.loads(marker.read_text()) if marker.exists() and not args.force else None
    if info and args.cuda_arch and info.get("cuda_arch") != args.cuda_arch:
        info = None  # the arch list is not part of the key, so check it here
    if info:
        log(f"cache hit: {root.name}")
        return info
    preflight(backends)
    global BUILD_LOG
    root.mkdir(parents=True, exist_ok=True)
    BUILD_LOG = root / "build.log"
    BUILD_LOG.write_text(f"build_ggml.py: {root.name}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
    if not (VENDOR / f".unpacked-{SDIST_SHA256[:12]}").exists():  # offline machines: carry vendor/ggml
        unpack(ensure_sdist(cache))
    patches = apply_patches(backends)
    marker.unlink(missing_ok=True)
    info = build(args, backends, root, cache)
    info["patches"] = patches
    write_json(marker, info)  # written last: its presence means the build is complete
    return info


def list_builds(cache: Path) -> int:
    try:
        active = json.loads((cache / "active.json").read_text()).get("key")
    except (OSError, ValueError):
        active = None
    markers = sorted((cache / "builds").glob("*/build.json"))
    if not markers:
        print(f"no builds in {cache / 'builds'}")
    for m in markers:
        try:
            b = json.loads(m.read_text())
        except ValueError:
            continue
        mode = "native" if b.get("native") else "portable"
        print(f"{'*' if b.get('key') == active else ' '} {'+'.join(b.get('backends', [])):<20} {mode:<8} "
              f"{b.get('build_seconds', '?'):>6}s  {b.get('lib_dir')}")
    print("(* = active: the last build_ggml.py run; rerun with its options to switch, "
          "or set GGMLPY_LIB_DIR)")
    return 0


# ---- the steps the wheel's CMake build (CMakeLists.txt) runs through this script --------------

def prepare_source(cache: Path) -> Path:
    """vendor/ggml unpacked from the pinned sdist with every patch applied, whatever the backends:
    a patch touches only its backend's files."""
    if not (VENDOR / f".unpacked-{SDIST_SHA256[:12]}").exists():
        unpack(ensure_sdist(cache))
    apply_patches(set(BACKENDS))
    return VENDOR


def kernel_plan(blas: bool) -> list[str]:
    """The kernel libraries the wheel prebuilds, one "level|source path|file name" each: every source
    at every x86-64 level (gemm.c and conv.c, which link OpenBLAS, only when it is there to link)."""
    kernels = REPO / "src" / "ggmlpy" / "kernels"
    return [f"{level}|{kernels / name}|{_info.prebuilt_kernel(kernels / name, level, Path()).name}"
            for level in _info.ISA_LEVELS for name, links in _info.KERNEL_LINKS.items()
            if blas or _info.BLAS_LIBS[0] not in links]


def compile_kernel(cc: str, source: Path, level: str, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = _info.kernel_command(cc, source, level, str(out), _info.KERNEL_LINKS[source.name])
    return subprocess.run(cmd).returncode


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Build ggml 0.25.3 shared libraries for ggmlpy (cached; a second run is a cache hit).",
        epilog="Environment: GGMLPY_CACHE_DIR sets the cache folder (default $XDG_CACHE_HOME/ggmlpy, else "
               "~/.cache/ggmlpy); the runtime loader reads the same variable, so set it for both. "
               "GGMLPY_LIB_DIR makes the runtime load the libggml in that folder instead. Each build keeps "
               "its full log in <cache>/builds/<key>/build.log; the terminal shows one line per stage.")
    p.add_argument("--backend", action="append", choices=BACKENDS + (AUTO,), default=[],
                   help="extra backend (repeatable); cpu is always built. 'auto': rpc, plus blas when "
                        "OpenBLAS is installed (libopenblas-openmp-dev), plus vulkan when glslc, libvulkan-dev "
                        "and spirv-headers are installed (falls back to cpu+rpc(+blas) if Vulkan fails)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compile jobs")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--native", dest="native", action="store_true", default=True,
                      help="tune kernels for this CPU (default)")
    mode.add_argument("--portable", dest="native", action="store_false",
                      help="all CPU variants as loadable modules, picked at run time")
    p.add_argument("--cuda-arch", help='CMAKE_CUDA_ARCHITECTURES (default: "native" with a GPU, else "80;90")')
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="build cache (default: $GGMLPY_CACHE_DIR, else $XDG_CACHE_HOME/ggmlpy, else "
                        "~/.cache/ggmlpy); ggmlpy finds a build there only with GGMLPY_CACHE_DIR=DIR")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("--print-lib-dir", action="store_true", help="print only the lib dir on stdout")
    p.add_argument("--list", action="store_true", help="list cached builds and the active one, then exit")
    p.add_argument("--prepare-source", action="store_true",
                   help="unpack vendor/ggml and apply every patch, print its path and exit (the wheel's build)")
    p.add_argument("--ggml-options", action="store_true",
                   help="print the ggml options every build gets (NAME=VALUE;...) and exit")
    p.add_argument("--vulkan-include", action="store_true",
                   help="print the Vulkan include dir ggml-vulkan needs (empty: the system's), fetching newer "
                        "headers if the system's are too old, and exit")
    p.add_argument("--kernel-plan", choices=("blas", "noblas"), metavar="blas|noblas",
                   help="print the kernel libraries to prebuild (level|source|file name; noblas: without the "
                        "sources that link OpenBLAS) and exit")
    p.add_argument("--compile-kernel", nargs=4, metavar=("CC", "SOURCE", "LEVEL", "OUT"),
                   help="compile one kernel library as the runtime would (without -mtune=native) and exit")
    p.add_argument("--cmake-arg", action="append", default=[], metavar="-DOPTION=VALUE",
                   help="extra CMake option (repeatable), e.g. -DGGML_CUDA_FA=OFF; part of the cache key")
    return p.parse_args(argv)


def main(argv=None) -> int:
    global LOG
    args = parse_args(argv)
    if args.print_lib_dir:
        LOG = sys.stderr
    if args.prepare_source or args.vulkan_include:
        LOG = sys.stderr  # stdout is the answer CMakeLists.txt reads
    t0 = time.monotonic()
    cache = (args.cache_dir or cache_dir()).expanduser().resolve()
    if args.ggml_options:
        print(";".join(o.removeprefix("-D") for o in ggml_options()))
        return 0
    if args.list:
        return list_builds(cache)
    try:
        if args.prepare_source:
            print(prepare_source(cache))
            return 0
        if args.vulkan_include:
            print(vulkan_include_dir(cache) or "")
            return 0
    except BuildError as e:
        print(f"build_ggml.py: {e}", file=sys.stderr)
        return e.code
    if args.kernel_plan:
        print(";".join(kernel_plan(args.kernel_plan == "blas")))
        return 0
    if args.compile_kernel:
        cc, source, level, out = args.compile_kernel
        return compile_kernel(cc, Path(source), level, Path(out))
    explicit = set(args.backend) - {AUTO}
    candidates = ([explicit | c for c in auto_candidates(cache, args.native, args.cmake_arg)] if AUTO in args.backend
                  else [explicit | {"cpu"}])
    info = None
    for i, backends in enumerate(candidates):
        try:
            info = build_or_hit(args, backends, cache)
            break
        except BuildError as e:
            if i + 1 < len(candidates):  # --backend auto: fall back to fewer backends
                log(f"building {'+'.join(sorted(backends))} failed; falling back to "
                    f"{'+'.join(sorted(candidates[i + 1]))}\n{e}")
                continue
            print(f"build_ggml.py: {e}", file=sys.stderr)
            return e.code
    write_json(cache / "active.json", info)
    if _info.in_virtual_environment():  # found from this environment whatever a later shell's cache variables
        record = _info.environment_record()
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            write_json(record, info)
        except OSError as e:
            log(f"could not record the build in {record} ({e}); ggmlpy finds it through {cache / 'active.json'}")
    log(f"done in {time.monotonic() - t0:.1f}s; lib dir:")
    print(info["lib_dir"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
