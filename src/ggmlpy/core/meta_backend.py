"""ggmlR's ggml_backend_meta_device: ggml's meta backend, one device made of several "simple" devices
with every weight split across them (tensor parallelism) or mirrored on each.

ggml asks a split-state callback, per weight, how to split it. The callback is a Python function
called from C through cffi (it returns `struct ggml_backend_meta_split_state` by value, which
cffi's ABI mode handles through libffi). Whatever it answers is checked against the tensor first
(meta_split.py: ggml's meta backend aborts the process on any inconsistent split, and on graphs
and data accesses it has no rule for).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

from ..bindings import ffi, lib
from ..errors import GGMLError
from .registry_api import Device, device_arg
from .meta_split import (_DEVICES, _MIRRORED, GGML_BACKEND_SPLIT_AXIS_0, GGML_BACKEND_SPLIT_AXIS_1,  # noqa: F401
                         GGML_BACKEND_SPLIT_AXIS_2, GGML_BACKEND_SPLIT_AXIS_3, GGML_BACKEND_SPLIT_AXIS_MIRRORED,
                         GGML_BACKEND_SPLIT_AXIS_NONE, GGML_BACKEND_SPLIT_AXIS_PARTIAL,
                         GGML_BACKEND_SPLIT_AXIS_UNKNOWN, MAX_DEVICES, META_BUFTS, MIRRORED, PARTIAL, SplitState,
                         _addr, _parse_axis, _state_struct, _tensor_info, split_state)

_NULL = ffi.NULL


def _mirrored_struct(*_exc):
    """The last line of defence (cffi's onerror): an exception escaping the callback itself."""
    return _state_struct(_MIRRORED)


class MetaDevice(Device):
    """A meta device (ggml_backend_meta_device): `devices` are the simple devices, `split_fn`
    answers how each weight is split. `split_error` holds the first failure of split_fn (after
    which every tensor is mirrored, as in ggmlR), `states` what was decided per tensor."""

    __slots__ = ("devices", "split_fn", "split_error", "states", "_idents", "_callback", "_buft")

    def __init__(self, devices, split_fn):
        self.devices, self.split_fn, self.split_error, self.states = list(devices), split_fn, None, {}
        self._idents = {}  # tensor address -> (name, type, ne, buffer) when its state was decided
        self._callback = ffi.callback("ggml_backend_meta_get_split_state_t", self._answer, onerror=_mirrored_struct)
        arr = ffi.new("ggml_backend_dev_t[]", [d.ptr for d in self.devices])
        ptr = lib.ggml_backend_meta_device(arr, len(self.devices), self._callback, _NULL)
        if ptr == _NULL:
            raise GGMLError("ggml_backend_meta_device() returned NULL")
        super().__init__(ptr)
        self._buft = lib.ggml_backend_dev_buffer_type(ptr)
        META_BUFTS.add(_addr(self._buft))
        _DEVICES[_addr(ptr)] = self

    @property
    def n_devs(self) -> int:
        """How many simple devices the meta device spans."""
        return len(self.devices)

    @property
    def name(self) -> str:
        """"Meta(CPU,CPU)" and so on (ggml 0.25.3 itself reports "Meta()": it names the
        devices from a vector it has just moved away)."""
        return "Meta(" + ",".join(d.name for d in self.devices) + ")"

    def decide(self, t) -> SplitState:
        """The split state of weight `t` (a ggml_tensor pointer): split_fn's answer, checked.

        ggml asks again for the same tensor (when it is allocated, and when it is written or
        read): the first answer is kept, so a later failure cannot turn a tensor that is already
        split into a mirrored one (ggml would then write past its slices)."""
        info = _tensor_info(t)
        a, ident = _addr(t), (info["name"], info["type"], info["ne"], int(ffi.cast("uintptr_t", t.buffer)))
        if a in self.states and self._idents.get(a) == ident:
            return self.states[a]
        st = self._decide(info)
        self.states[a], self._idents[a] = st, ident
        return st

    def _decide(self, info: dict) -> SplitState:
        if self.split_error is not None:
            return _MIRRORED
        try:
            if isinstance(self.split_fn, Mapping):
                spec = self.split_fn.get(info["name"])
            else:
                spec = self.split_fn(info, self.n_devs)
            st = split_state(spec, info, self.n_devs)
        except Exception as e:  # ggmlR: the first failure mirrors this and every later tensor
            self.split_error = e
            warnings.warn(f"ggml_backend_meta_device: split_fn failed for tensor '{info['name']}' ({e}); "
                          "this and every later tensor is mirrored on all devices", RuntimeWarning, stacklevel=2)
            return _MIRRORED
        return st

    def _answer(self, t, _ud):
        return _state_struct(self.decide(t))

    def __repr__(self):
        return f"<ggml MetaDevice {self.name}>"


def ggml_backend_meta_device(devs: "list[Device]", split_fn: "Callable[[dict, int], object] | Mapping",
                             env: object = None) -> MetaDevice:
    """A meta device over the simple devices `devs` (a list of Devices, 1 to 16), for tensor
    parallelism: every weight allocated on it is split across the devices or mirrored on each.

    `split_fn(tensor_info, n_devs)` is ggmlR's callback: `tensor_info` is a dict with name, type,
    ne (4 ints), op and flags; it answers ggmlR's dict {"axis": 0..2 | 10 (MIRRORED) | 11
    (PARTIAL), "ne": per segment and device slice sizes, "n_segments": 1}, or more simply an axis
    (0..2, split evenly), "mirrored", "partial", a tuple (axis, ne), or None (mirrored).
    `split_fn` may also be a dict {tensor name: one of those}; unnamed tensors are mirrored.
    Each answer is checked against the tensor; a failure or an invalid answer mirrors that tensor
    and every later one (ggmlR's sticky fallback), with a RuntimeWarning and
    `device.split_error` set. `env` is ggmlR's evaluation environment and is not used.
    The device lives as long as the process (ggml keeps it)."""
    del env
    if not isinstance(devs, (list, tuple)):
        raise GGMLError(f"ggml_backend_meta_device: devs must be a list of devices, got {type(devs).__name__}")
    if not 1 <= len(devs) <= MAX_DEVICES:
        raise GGMLError(f"ggml_backend_meta_device: n_devs must be in [1, {MAX_DEVICES}], got {len(devs)}")
    devs = [device_arg(d, "ggml_backend_meta_device") for d in devs]
    for d in devs:
        if isinstance(d, MetaDevice) or int(lib.ggml_backend_dev_type(d.ptr)) == lib.GGML_BACKEND_DEVICE_TYPE_META:
            raise GGMLError("ggml_backend_meta_device: a meta device cannot contain another meta device")
    if not (callable(split_fn) or isinstance(split_fn, Mapping)):
        raise GGMLError("ggml_backend_meta_device: split_fn must be a function(tensor_info, n_devs) "
                        f"or a dict by tensor name, got {type(split_fn).__name__}")
    return MetaDevice(devs, split_fn)


def ggml_backend_meta_split_axis_name(axis: "int | str") -> str:
    """ggml's name of a split axis: "0".."3", "MIRRORED", "PARTIAL", "NONE", "UNKNOWN"."""
    a = _parse_axis(axis)
    if a not in (0, 1, 2, 3, MIRRORED, PARTIAL, GGML_BACKEND_SPLIT_AXIS_NONE, GGML_BACKEND_SPLIT_AXIS_UNKNOWN):
        raise GGMLError(f"ggml_backend_meta_split_axis_name: unknown split axis {axis}")
    return ffi.string(lib.ggml_backend_meta_split_axis_name(a)).decode()


__all__ = ["ggml_backend_meta_device", "ggml_backend_meta_split_axis_name", "MetaDevice", "SplitState",
           "GGML_BACKEND_SPLIT_AXIS_0", "GGML_BACKEND_SPLIT_AXIS_1", "GGML_BACKEND_SPLIT_AXIS_2",
           "GGML_BACKEND_SPLIT_AXIS_3", "GGML_BACKEND_SPLIT_AXIS_MIRRORED", "GGML_BACKEND_SPLIT_AXIS_PARTIAL",
           "GGML_BACKEND_SPLIT_AXIS_NONE", "GGML_BACKEND_SPLIT_AXIS_UNKNOWN"]
