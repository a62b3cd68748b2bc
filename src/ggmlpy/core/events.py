"""ggmlR's backend events (ggml_backend_event_*): marks in a backend's queue that another backend,
or the host, waits for."""
from __future__ import annotations

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from .device import Backend, backend_arg
from .handles import OwnedPointer
from .registry_api import Device, device_arg

_NULL = ffi.NULL


# -- events ---------------------------------------------------------------------------------------------------------
class Event(OwnedPointer):
    """A ggml backend event (devices with caps_events: not the CPU)."""

    RELEASE = "ggml_backend_event_free"

    def __init__(self, ptr, dev: Device):
        self.ptr, self.dev = ptr, dev


def _event(e, what) -> Event:
    if not isinstance(e, Event) or e.ptr is None:
        raise GGMLError(f"{what}: expected a live Event (ggml_backend_event_new)")
    return e


def ggml_backend_event_new(dev: Device) -> Event | None:
    """A new event on the device, or None when the device has no events (the CPU has none)."""
    dev = device_arg(dev, "ggml_backend_event_new")
    props = ffi.new("struct ggml_backend_dev_props *")
    lib.ggml_backend_dev_get_props(dev.ptr, props)
    if not props.caps.events:
        return None
    p = lib.ggml_backend_event_new(dev.ptr)
    return None if p == _NULL else Event(p, dev)


def ggml_backend_event_free(event: Event) -> None:
    """Free an event."""
    if isinstance(event, Event):
        event.free()


def ggml_backend_event_record(event: Event, backend: Backend) -> None:
    """Record the event on the backend's queue."""
    e, b = _event(event, "ggml_backend_event_record"), backend_arg(backend, "ggml_backend_event_record")
    check(b.dev == e.dev.ptr, "ggml_backend_event_record: the backend is on another device than the event")
    lib.ggml_backend_event_record(e.ptr, b.ptr)


def ggml_backend_event_synchronize(event: Event) -> None:
    """Wait on the host until the event has happened."""
    lib.ggml_backend_event_synchronize(_event(event, "ggml_backend_event_synchronize").ptr)


def ggml_backend_event_wait(backend: Backend, event: Event) -> None:
    """Make the backend's queue wait for the event."""
    lib.ggml_backend_event_wait(backend_arg(backend, "ggml_backend_event_wait").ptr, _event(event, "ggml_backend_event_wait").ptr)
