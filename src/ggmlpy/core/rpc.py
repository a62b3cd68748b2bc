"""ggml's RPC devices (``ag_device("rpc://host:port")``): the server checks ggmlpy makes itself.

ggmlpy checks an endpoint itself before
ggml connects (a TCP connect plus ggml's HELLO handshake, with a timeout), never
asks an RPC device for its memory in `devices()`, and checks the server again
before opening a new backend on it. A server that dies or stops answering later
costs its device, not the process: build_ggml.py patches ggml's RPC client
(rpc-fail-soft) so that a failed send or receive, or one that waits longer than
the RPC timeout (`set_rpc_timeout`, ``GGMLPY_RPC_TIMEOUT``, in seconds, default 5), marks
the connection lost instead of aborting; every ggmlpy call on that device then
raises `DeviceLostError` (a DeviceError), at once from the first loss on, and the
other devices go on. Without the patch (an older build) ggml's client aborts as
before. ggml's rpc-server has no authentication: bind it to loopback or a private
network only.
"""
from __future__ import annotations

import os
import socket
import struct

from ..bindings import c_str, ffi, found, lib
from ..errors import DeviceError, DeviceLostError

_NULL = ffi.NULL


def is_rpc_device(dev) -> bool:
    reg = lib.ggml_backend_dev_backend_reg(dev)  # NULL for meta devices, which belong to no registry
    return reg != _NULL and c_str(lib.ggml_backend_reg_name(reg)).startswith("RPC")


# -- RPC ----------------------------------------------------------------------------------------
RPC_PROTO_MAJOR, RPC_PROTO_MINOR = 7, 0  # ggml 0.25.3's ggml-rpc.h
_RPC_CMD_HELLO, _RPC_CONN_CAPS_SIZE = 14, 24
rpc_endpoints: dict[str, list[str]] = {}  # "host:port" -> its device names, once registered


_rpc_timeout_setting: list = [None]  # set_rpc_timeout's value; None: GGMLPY_RPC_TIMEOUT, else five seconds
_rpc_lost: dict[str, str] = {}  # "host:port" -> why it was lost, for good


def rpc_timeout() -> float:
    """Seconds an RPC server may take to answer before its device is given up: set_rpc_timeout(),
    else $GGMLPY_RPC_TIMEOUT, else 5."""
    if _rpc_timeout_setting[0] is not None:
        return _rpc_timeout_setting[0]
    text = os.environ.get("GGMLPY_RPC_TIMEOUT", "5")
    try:
        value = float(text)
    except ValueError:
        raise DeviceError(f"GGMLPY_RPC_TIMEOUT={text!r}: expected a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise DeviceError(f"GGMLPY_RPC_TIMEOUT={text!r}: expected a positive, finite number of seconds")
    return value


def set_rpc_timeout(seconds: float | None) -> float:
    """How long an RPC server may take to answer (each send or receive, and the connection
    check) before its device is given up and DeviceLostError raised; None: back to
    $GGMLPY_RPC_TIMEOUT, else five seconds. It applies to connections made from now on (ggml sets it on
    the socket as it connects), so set it before the first ag_device("rpc://..."). It must
    exceed the longest graph a server computes in one go: ggml waits for the result in one
    receive. Returns the previous value."""
    previous = rpc_timeout()
    if seconds is not None:
        try:
            value = float(seconds)
        except (TypeError, ValueError):
            raise DeviceError(f"set_rpc_timeout: seconds must be a number, got {seconds!r}") from None
        if not value > 0 or value == float("inf"):
            raise DeviceError(f"set_rpc_timeout: seconds must be positive and finite, got {seconds!r}")
        seconds = value
    _rpc_timeout_setting[0] = seconds
    return previous


def _rpc_proc(name: str, ctype: str):
    """A function of the patched RPC client (build_ggml.py's rpc-fail-soft), or None."""
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg != _NULL else _NULL
    return ffi.cast(ctype, addr) if addr != _NULL else None


_rpc_fns: dict = {}


def _rpc_fn(name: str, ctype: str):
    if name not in _rpc_fns:
        _rpc_fns[name] = _rpc_proc(name, ctype)
    return _rpc_fns[name]


def rpc_fail_soft() -> bool:
    """Whether this libggml's RPC client survives a lost server (build_ggml.py's rpc-fail-soft)."""
    return _rpc_fn("ggml_backend_rpc_lost", "int (*)(const char *)") is not None


def rpc_lost(endpoint: str) -> str | None:
    """Why the RPC connection to "host:port" was lost, or None while it works."""
    why = _rpc_lost.get(endpoint)
    if why is None:
        fn = _rpc_fn("ggml_backend_rpc_lost", "int (*)(const char *)")
        code = int(fn(endpoint.encode())) if fn is not None else 0
        if code:
            why = _rpc_lost.setdefault(endpoint, (
                f"did not answer within {rpc_timeout():g} s (set_rpc_timeout, GGMLPY_RPC_TIMEOUT): frozen?"
                if code == 2 else "closed the connection or could not be reached: it died?"))
    return why


def rpc_check(endpoint: str, device: str | None = None) -> None:
    """DeviceLostError if the RPC connection to endpoint is lost."""
    why = rpc_lost(endpoint)
    if why is not None:
        name = device or f"rpc://{endpoint}"
        raise DeviceLostError(f"RPC device {name}: the server at {endpoint} {why} The device is lost for the "
                              "rest of this process (its tensors and gradients there are gone); the other "
                              "devices go on.", name, endpoint)


def check_tensor_device(t) -> None:
    """DeviceLostError if ggml tensor `t` (a cdata pointer) has its memory on a lost RPC device: call
    after reading or writing device memory outside ggmlpy's executor. Free before any RPC device."""
    if not rpc_endpoints or t.buffer == _NULL:
        return
    dev = lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(t.buffer))
    if dev != _NULL and is_rpc_device(dev):
        rpc_check(c_str(lib.ggml_backend_dev_description(dev)), c_str(lib.ggml_backend_dev_name(dev)))


def set_ggml_rpc_timeout() -> None:
    fn = _rpc_fn("ggml_backend_rpc_set_timeout_ms", "void (*)(int)")
    if fn is not None:
        fn(max(1, int(round(rpc_timeout() * 1000))))


def split_endpoint(text: str) -> tuple[str, int, int]:
    """ "host:port" or "host:port/device" -> (host, port, device index)."""
    ep, _, dev = text.strip().partition("/")
    host, sep, port = ep.rpartition(":")
    if not sep or not host or ":" in host or not port.isdigit() or not 0 < int(port) < 65536 \
            or (dev and not dev.isdigit()):
        raise DeviceError(f"rpc endpoint {text!r}: expected rpc://host:port (ggml's RPC takes IPv4 "
                          "addresses or host names, not IPv6), optionally /<device index>")
    return host, int(port), int(dev or 0)


def _recv_exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    return buf


def rpc_probe(host: str, port: int, timeout: float | None = None) -> tuple[int, int, int]:
    """Connect and do ggml's HELLO handshake, as ggml's client would, but with a timeout and a
    Python exception instead of abort(). Returns the server's protocol version."""
    timeout = rpc_timeout() if timeout is None else timeout
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(bytes([_RPC_CMD_HELLO]) + struct.pack("=Q", _RPC_CONN_CAPS_SIZE)
                         + bytes(_RPC_CONN_CAPS_SIZE))
            (size,) = struct.unpack("=Q", _recv_exact(sock, 8))
            if size != 4 + _RPC_CONN_CAPS_SIZE:
                raise DeviceError(f"{where} answered ggml's RPC HELLO with {size} bytes: not a ggml "
                                  f"{RPC_PROTO_MAJOR}.x RPC server")
            major, minor, patch = _recv_exact(sock, size)[:3]
    except socket.timeout:
        raise DeviceError(f"the ggml RPC server at {where} did not answer within {timeout:g} s "
                          "(GGMLPY_RPC_TIMEOUT). ggml's rpc-server serves one client at a time: is another "
                          "process connected to it? Or it is not a ggml RPC server.") from None
    except (OSError, ConnectionError) as e:
        raise DeviceError(f"could not reach a ggml RPC server at {where}: {e}. Start one with: "
                          f"python -m ggmlpy rpc-server --host {host} --port {port}") from None
    if major != RPC_PROTO_MAJOR or minor > RPC_PROTO_MINOR:
        raise DeviceError(f"the RPC server at {where} speaks protocol {major}.{minor}.{patch}; this libggml "
                          f"(ggml 0.25.3) needs {RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}.x. Start the rpc-server of "
                          "the same build: python -m ggmlpy rpc-server")
    return major, minor, patch


def rpc_server_binary():
    """ggml's rpc-server from the same build as the loaded libggml (install/bin next to install/lib)."""
    for d in ([found.bin_dir] if found.bin_dir else []) + [found.lib_dir.parent / "bin"]:
        p = d / "rpc-server"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None
