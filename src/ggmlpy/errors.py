"""Exceptions. ggml aborts the process on a failed assertion, so ggmlpy checks first and raises these."""
import os


class GGMLError(ValueError):
    """A call ggml would reject (or abort on): wrong shapes, types, freed or full contexts."""


class StaleTensorError(RuntimeError):
    """A handle from an older generation of a memory pool: its memory has been reused."""


class DeviceError(RuntimeError):
    """A device that is not available, or tensors from different devices mixed in one op."""


class DeviceLostError(DeviceError):
    """A device that worked and is gone: an RPC server that died or stopped answering. The device
    stays unusable for the rest of the process; `device` is its ggml name, `endpoint` "host:port"."""

    def __init__(self, message: str, device: str, endpoint: str):
        super().__init__(message)
        self.device, self.endpoint = device, endpoint


def check(cond: bool, message: str) -> None:
    if not cond:
        raise GGMLError(message)


def checked_path(path, what: str) -> str:
    """A file name argument as a str: a GGMLError naming `what` for anything else (None, a number),
    where os.fspath would raise its TypeError."""
    try:
        return os.fspath(path)
    except TypeError:
        raise GGMLError(f"{what}: path must be a file name (str or os.PathLike), got {type(path).__name__}") from None
