"""A model built from ggmlpy's own layers, described as JSON and built again from it: what
ag_save_model stores so that ag_load_model(path) needs no model_fn.

A built-in layer is described by the arguments it was constructed with (every layer records
them), an ag_sequential by its layers as they are now. A model that holds anything else (a
user's own Module, an argument JSON cannot hold) has no description: loading it needs
model_fn, as before. A setting changed after construction (`layer.activation = ...`) is not
in the arguments, so the description also keeps the model's repr, which shows the settings:
`build` refuses a description whose rebuilt model does not print the same.
"""
from __future__ import annotations

import json
import math

import numpy as np

from ..errors import GGMLError
from . import gpt2, layers, llama, transformer
from .layers import ag_sequential
from .module import Module

# the layers a description may name: ggmlpy's own, by their ggmlR names
BUILT_IN = {cls.__name__: cls for cls in (
    layers.ag_linear, layers.ag_dropout, layers.ag_batch_norm, layers.ag_embedding, layers.ag_multihead_attention,
    layers.ag_sequential, layers.ag_layer_norm_layer, layers.ag_activation, layers.ag_conv2d_layer,
    layers.ag_max_pool2d_layer, layers.ag_flatten_layer,
    transformer.ag_transformer_block, transformer.ag_gpt, llama.ag_rms_norm_layer, llama.ag_llama_block,
    llama.ag_llama, gpt2.ag_gpt2_block, gpt2.ag_gpt2)}


def _as_json(value):
    """`value` as JSON would give it back: numpy scalars as Python ones, tuples as lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return value


def _plain(value) -> bool:
    """Whether JSON holds `value` and gives it back equal (numbers, strings, None, lists of them)."""
    if value is None or isinstance(value, (bool, str, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return False


def _spec(model) -> dict | None:
    cls = type(model)
    if BUILT_IN.get(cls.__name__) is not cls:
        return None
    if cls is ag_sequential:
        specs = [_spec(layer) for layer in model.layers]
        return None if any(s is None for s in specs) else {"layer": cls.__name__, "layers": specs}
    recorded = getattr(model, "_init_args", None)
    if recorded is None:
        return None
    args = {k: _as_json(v) for k, v in recorded.arguments.items()}
    return {"layer": cls.__name__, "args": args} if all(_plain(v) for v in args.values()) else None


def describe(model: Module) -> str | None:
    """The model's description as a JSON string, or None when it holds anything but ggmlpy's
    own layers (or arguments JSON cannot hold)."""
    spec = _spec(model)
    if spec is None:
        return None
    return json.dumps({"model": spec, "repr": repr(model)})


def _from_spec(spec, where: str) -> Module:
    if not isinstance(spec, dict) or not isinstance(spec.get("layer"), str):
        raise GGMLError(f"{where}: a layer's description must be an object with a 'layer' name, got {spec!r}")
    cls = BUILT_IN.get(spec["layer"])
    if cls is None:
        raise GGMLError(f"{where}: unknown layer {spec['layer']!r}; the built-in layers are {sorted(BUILT_IN)}")
    if cls is ag_sequential:
        inner = spec.get("layers")
        if not isinstance(inner, list):
            raise GGMLError(f"{where}: ag_sequential's description needs a list of layers")
        return ag_sequential(*[_from_spec(s, where) for s in inner])
    args = spec.get("args")
    if not isinstance(args, dict):
        raise GGMLError(f"{where}: {spec['layer']}'s description needs its arguments")
    try:
        return cls(**args)
    except TypeError as e:
        raise GGMLError(f"{where}: {spec['layer']} cannot be built from {args}: {e}") from None


def build(description: str, where: str = "architecture") -> Module:
    """The model a `describe` string describes, freshly initialised (load its weights next).
    GGMLError naming `where` for a description that is not one, or that rebuilds another model."""
    try:
        saved = json.loads(description)
    except (TypeError, ValueError) as e:
        raise GGMLError(f"{where}: the architecture is not valid JSON: {e}") from None
    if not isinstance(saved, dict) or "model" not in saved:
        raise GGMLError(f"{where}: the architecture has no model description")
    model = _from_spec(saved["model"], where)
    if "repr" in saved and repr(model) != saved["repr"]:
        raise GGMLError(f"{where}: the saved architecture builds\n{model!r}\nbut the model saved was\n{saved['repr']}\n"
                        "(a setting changed after it was built?); pass model_fn= to build it")
    return model
