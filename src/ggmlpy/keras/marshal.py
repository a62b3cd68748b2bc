"""ggmlR's ggml_marshal_model / ggml_unmarshal_model: a Sequential or Functional model as an
in-memory container (for sending to another process or worker), and pickling built on it.

The payload is exactly what ggml_save_model writes (architecture, weights, compile settings), so
a container holds what a saved file holds; a SHA-256 of the payload catches corruption. ggmlR's
payload is an R .rds and its tag "ggmlR.marshal": the two kinds of container are not
interchangeable, so this one says "ggmlpy.marshal".
"""
from __future__ import annotations

import datetime
import hashlib
import platform

from .._version import __version__
from ..errors import GGMLError
from .functional import Functional
from .io import model_bytes, model_from_bytes
from .model import _Model
from .sequential import Sequential

MARSHAL_FORMAT = "ggmlpy.marshal"
MARSHAL_VERSION = 1

__all__ = ["ggml_marshal_model", "ggml_unmarshal_model", "MarshaledModel"]


class MarshaledModel(dict):
    """ggmlR's "ggmlR_marshaled" list: format, version, api ("sequential" / "functional"),
    backend (the compile device, None when not compiled), ggmlpy_version, python_version,
    created (UTC), sha256 (hex) and payload (bytes). A plain dict otherwise: it pickles."""

    def __repr__(self):
        return (f"<ggmlpy marshaled model> api={self.get('api')} backend={self.get('backend')} "
                f"format={self.get('format')} v{self.get('version')} payload={len(self.get('payload') or b'')} bytes")


def ggml_marshal_model(model: Sequential | Functional) -> MarshaledModel:
    """A Sequential or Functional model (compiled or not, trained or not) as a MarshaledModel;
    ggml_unmarshal_model() rebuilds it, with the same weights and compile settings."""
    if isinstance(model, Sequential):
        api = "sequential"
    elif isinstance(model, Functional):
        api = "functional"
    else:
        raise GGMLError(f"ggml_marshal_model(): unsupported model class {type(model).__name__!r}: only "
                        "Sequential and Functional models can be marshaled (autograd modules: ag_save_model)")
    payload = model_bytes(model)
    return MarshaledModel(format=MARSHAL_FORMAT, version=MARSHAL_VERSION, api=api,
                          backend=model.device if model.compiled else None,
                          ggmlpy_version=__version__, python_version=platform.python_version(),
                          created=datetime.datetime.now(datetime.timezone.utc),
                          sha256=hashlib.sha256(payload).hexdigest(), payload=payload)


def ggml_unmarshal_model(x: MarshaledModel, backend: str | None = None) -> Sequential | Functional:
    """The model in a container made by ggml_marshal_model, compiled again if it was: on `backend`
    when given, else on the device it was compiled for. Raises GGMLError for something that is
    not such a container, another version, an empty payload or a checksum mismatch."""
    if not isinstance(x, dict) or x.get("format") != MARSHAL_FORMAT:
        raise GGMLError("ggml_unmarshal_model(): input is not a ggmlpy marshaled container "
                        "(one made by ggml_marshal_model)")
    if x.get("version") != MARSHAL_VERSION:
        raise GGMLError(f"ggml_unmarshal_model(): unsupported container version {x.get('version')!r} "
                        f"(this ggmlpy reads version {MARSHAL_VERSION})")
    payload = x.get("payload")
    if not isinstance(payload, (bytes, bytearray)) or not payload:
        raise GGMLError("ggml_unmarshal_model(): container payload is empty or not bytes")
    if x.get("sha256") is not None and hashlib.sha256(payload).hexdigest() != x["sha256"]:
        raise GGMLError("ggml_unmarshal_model(): SHA-256 checksum mismatch - container payload is corrupted")
    target = backend if backend is not None else x.get("backend")
    if target == "gpu":      # ggmlR's label for its GPU backend
        target = "vulkan"
    return model_from_bytes(payload, target)


def _unpickle(container):
    """pickle's constructor for models (see install_pickling)."""
    return ggml_unmarshal_model(container)


def _reduce(model: _Model):
    """Pickling goes through ggml_marshal_model (architecture, weights, compile settings);
    the training history travels beside it."""
    return _unpickle, (ggml_marshal_model(model),), {"history": model.history}


def install_pickling() -> None:
    """Make every Keras-like model pickle through its marshaled form. The model base (model.py)
    sits below the serializers this needs, so the layer that defines them sets its __reduce__:
    once, when the keras package loads (subclasses inherit it)."""
    _Model.__reduce__ = _reduce
