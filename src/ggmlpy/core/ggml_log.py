"""ggml's log, sent to Python's logging (logger "ggmlpy.ggml"), and ggmlR's switches for it and
for ggml's abort handler.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading

from ..bindings import ffi, lib
from ..errors import check

_NULL = ffi.NULL


# -- ggml's log -> logging.getLogger("ggmlpy.ggml") ---------------------------------------------
log = logging.getLogger("ggmlpy.ggml")
if log.level == logging.NOTSET:  # ggml is chatty at INFO/DEBUG; users opt in
    _lvl = os.environ.get("GGMLPY_GGML_LOG", "WARNING").upper()
    log.setLevel(getattr(logging, "WARNING" if _lvl == "WARN" else _lvl, logging.WARNING))

_LEVELS = {
    lib.GGML_LOG_LEVEL_NONE: logging.INFO,
    lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    lib.GGML_LOG_LEVEL_INFO: logging.INFO,
    lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
    lib.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}
_CONT = lib.GGML_LOG_LEVEL_CONT
_log_state = threading.local()  # a message may arrive in pieces (GGML_LOG_LEVEL_CONT), per thread

# ggml-vulkan says what it decided about each device (fp16, subgroup size, matrix cores, ...) in
# one DEBUG line as the device registers, "ggml_vulkan: <index> = <name> (<driver>) | uma: 0 |
# fp16: 1 | ...", and nowhere else: kept whatever the log level, for ggml_vulkan_device_caps.
VK_DEVICE_REPORTS: dict[int, str] = {}
_VK_REPORT = b"ggml_vulkan: "


def _note_vulkan_report(text: bytes) -> None:
    head, sep, rest = text.partition(b" = ")
    index = head[len(_VK_REPORT):]
    if sep and index.isdigit() and b" | " in rest:
        VK_DEVICE_REPORTS[int(index)] = rest.decode(errors="replace").strip()


def _on_ggml_log(level, text, _user_data) -> None:
    try:
        if text != _NULL and level != _CONT:
            raw = ffi.string(text)
            if raw.startswith(_VK_REPORT):
                _note_vulkan_report(raw)
        st = _log_state
        if level == _CONT:
            lvl = getattr(st, "level", logging.INFO)
        else:
            lvl = st.level = _LEVELS.get(int(level), logging.INFO)
        if not log.isEnabledFor(lvl):
            st.buf = ""
            return
        buf = getattr(st, "buf", "") + (ffi.string(text).decode(errors="replace") if text != _NULL else "")
        if buf.endswith("\n") or len(buf) > 8192:
            st.buf = ""
            for line in buf.rstrip("\n").split("\n"):
                log.log(lvl, "%s", line)
        else:
            st.buf = buf
    except Exception:  # never let an exception cross into C
        pass


# ffi.callback keeps a C trampoline alive only as long as this object: keep it at module level.
try:
    _LOG_CALLBACK = ffi.callback("void(enum ggml_log_level, const char *, void *)", _on_ggml_log)
except (MemoryError, OSError) as _e:  # no write+execute memory for the trampoline (hardened kernels)
    _LOG_CALLBACK = None
    logging.getLogger("ggmlpy").warning("ggml's log stays on stderr: no cffi callback (%s)", _e)
if _LOG_CALLBACK is not None:
    lib.ggml_log_set(_LOG_CALLBACK, _NULL)

    @atexit.register
    def _restore_ggml_log() -> None:
        # C destructors run after the interpreter is gone: they must not call back into Python.
        lib.ggml_log_set(_NULL, _NULL)


# -- ggml's log and abort handlers ----------------------------------------------------------------------------------
def ggml_log_set_default() -> None:
    """Send ggml's log to stderr, ggml's own default (ggmlpy normally routes it into Python's logging,
    logger "ggmlpy.ggml"; ggml_log_set_python() restores that)."""
    lib.ggml_log_set(_NULL, _NULL)
    _LOG["python"] = False


def ggml_log_set_python() -> None:
    """Route ggml's log into Python's logging (logger "ggmlpy.ggml"): ggmlpy's default, ggmlR's
    ggml_log_set_r() in Python."""
    check(_LOG_CALLBACK is not None, "ggml_log_set_python: this system gives cffi no callbacks")
    lib.ggml_log_set(_LOG_CALLBACK, _NULL)
    _LOG["python"] = True


def ggml_log_is_python_enabled() -> bool:
    """Whether ggml's log goes into Python's logging (ggmlR's ggml_log_is_r_enabled())."""
    return _LOG["python"]


def _initial_log_state() -> bool:
    return _LOG_CALLBACK is not None


_LOG = {"python": _initial_log_state()}


def ggml_set_abort_callback_default() -> None:
    """ggml's default abort handler (print and abort). ggmlpy installs no other: it validates every
    call so that ggml never aborts, rather than trying to survive an abort."""
    lib.ggml_set_abort_callback(_NULL)


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
