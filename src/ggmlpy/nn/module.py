"""The base of every layer, Module: its parameters, sub-layers, training mode, state dict and
repr, and the arguments it was built with; ag_train and ag_eval, which switch the mode of
whatever holds layers."""
from __future__ import annotations

import functools
import inspect
import numbers
import types
from collections.abc import Iterator

import numpy as np

from ..errors import GGMLError
from ..params import ParamList
from ..tensor import AGTensor


class InitArgs:
    """The arguments a layer was constructed with, by parameter name (what nn.architecture
    describes a built-in layer by). Not a list or a Module, so children() passes over it."""

    __slots__ = ("arguments",)

    def __init__(self, arguments: dict):
        self.arguments = arguments


def _recording(init):
    """`init`, recording its arguments in `self._init_args` (the outermost constructor's: a
    subclass calling super().__init__ keeps its own)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def recording_init(self, *args, **kwargs):
        if "_init_args" not in self.__dict__:
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:
                bound = None   # the call fails as init's own; nothing to record
            if bound is not None:
                bound.apply_defaults()
                self.__dict__["_init_args"] = InitArgs(dict(list(bound.arguments.items())[1:]))
        init(self, *args, **kwargs)

    return recording_init


class Module:
    """Base layer: `forward`, `__call__`, parameters, training mode and state dicts.

    The base for one's own layers (docs/custom_layers.md): call `super().__init__()`, keep
    parameters (ag_param) and sub-layers as attributes (or in lists and dicts), define
    `forward`. parameters(), ag_train/ag_eval, state_dict, ag_save_model and optimizers
    then find everything by walking the attributes."""

    def __init__(self):
        self.training = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _recording(cls.__dict__["__init__"])

    def __call__(self, *args, **kwargs) -> AGTensor:
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs) -> AGTensor:
        """The layer's computation: a subclass defines it."""
        raise NotImplementedError(f"{type(self).__name__} defines no forward(): a Module subclass computes "
                                  "its output in forward()")

    def children(self) -> list:
        """Sub-layers: by default the Module-valued attributes (and lists, tuples and dict values
        that are Modules), in order."""
        out = []
        for value in self.__dict__.values():
            if isinstance(value, Module):
                out.append(value)
            elif isinstance(value, (list, tuple)):
                out.extend(v for v in value if isinstance(v, Module))
            elif isinstance(value, dict):
                out.extend(v for v in value.values() if isinstance(v, Module))
        return out

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, AGTensor]]:
        """(name, tensor) for every trainable tensor, this layer's first, then its sub-layers' as layer{i}_{name}."""
        for name, value in self.__dict__.items():
            if isinstance(value, AGTensor) and value.requires_grad:
                yield prefix + name, value
        for i, child in enumerate(self.children(), 1):
            yield from child.named_parameters(f"{prefix}layer{i}_")

    def parameters(self) -> ParamList:
        """The trainable tensors, in named_parameters() order: a list that also answers by name,
        as ggmlR's named list (`parameters()["W"]`; names as named_parameters())."""
        return ParamList.from_pairs(self.named_parameters())

    def params(self) -> ParamList:
        """ggmlR's `$params()`: the same as parameters()."""
        return self.parameters()

    def buffers(self, prefix: str = "") -> list[tuple[str, AGTensor]]:
        """This layer's own state that is not trained (e.g. running statistics): (name, tensor) pairs."""
        return []

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, AGTensor]]:
        """Buffers of this layer and, recursively, its sub-layers, named like named_parameters()."""
        yield from self.buffers(prefix)
        for i, child in enumerate(self.children(), 1):
            yield from child.named_buffers(f"{prefix}layer{i}_")

    def state_dict(self) -> dict:
        """Parameters and buffers as {name: numpy array} (a copy)."""
        out = {n: p.numpy() for n, p in self.named_parameters()}
        out.update({n: b.numpy() for n, b in self.named_buffers()})
        return out

    def load_state_dict(self, state: dict) -> None:
        """Write the values of a state_dict() into the model's tensors, in place."""
        own = dict(self.named_parameters())
        own.update(dict(self.named_buffers()))
        missing = set(own) - set(state)
        if missing:
            raise GGMLError(f"load_state_dict: missing entries {sorted(missing)}")
        for name, t in own.items():
            t.data = state[name]

    def set_training(self, mode: bool) -> None:
        """Switch training mode for this layer and, recursively, all layers inside it."""
        self.training = mode
        for child in self.children():
            child.set_training(mode)

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout drops, batch norm uses batch statistics), recursively, as
        ag_train(); `train(False)` is eval(). Returns the model."""
        self.set_training(bool(mode))
        return self

    def eval(self) -> "Module":
        """Eval mode (dropout is the identity, batch norm uses running statistics), recursively,
        as ag_eval(). Returns the model."""
        self.set_training(False)
        return self

    def num_parameters(self) -> int:
        """How many trainable numbers the model holds (all its parameters' elements)."""
        return sum(p.size for p in self.parameters())  # every axis: a convolution's kernel has four

    def extra_repr(self) -> str:
        """The layer's settings, shown inside its repr's parentheses."""
        return ""

    def __repr__(self) -> str:
        lines = self._repr_lines()
        n = self.num_parameters()
        if self.children():
            lines.append(f"total: {self._repr_total()}{n:,} trainable parameters in {len(self.parameters())} tensors")
        return "\n".join(lines)

    def _repr_total(self) -> str:
        """What the repr's total line says before the parameter count."""
        return ""

    def _repr_lines(self) -> list:
        head = f"{type(self).__name__}({self.extra_repr()}"
        own = [(name, v) for name, v in self.__dict__.items() if isinstance(v, AGTensor) and v.requires_grad]
        note = ""
        if own:
            shapes = ", ".join(f"{name} {'x'.join(map(str, v.shape))}" for name, v in own)
            note = f"  [{shapes}: {sum(v.size for _, v in own):,} parameters]"
        children = self.children()
        if not children:
            return [head + ")" + note]
        lines = [head + ("" if head.endswith("(") else ",") + note]
        for i, child in enumerate(children, 1):  # named as in named_parameters(): layer{i}_...
            sub = child._repr_lines()
            lines.append(f"  (layer{i}): {sub[0]}")
            lines.extend("  " + line for line in sub[1:])
        lines.append(")")
        return lines


_NOT_MODELS = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
               functools.partial, AGTensor, np.ndarray)


def _set_mode(obj, mode: bool, seen: set) -> None:
    """Switch every Module reachable from `obj`: the object itself, its attributes, dict values and
    list, tuple or set items, recursively (each object once). Any other object of a user's own
    class gets `training = mode` too, as ggmlR's default method sets it on an environment;
    what has no attributes (a function, a number, a tensor) is left alone, quietly."""
    if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, numbers.Number, *_NOT_MODELS)):
        return
    seen.add(id(obj))
    if isinstance(obj, Module):
        obj.set_training(mode)  # its children, by its own rule
        return
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
        try:
            obj.training = mode
        except AttributeError:  # a read-only property or __slots__: nothing to switch here
            pass
    else:
        return
    for item in items:
        _set_mode(item, mode, seen)


def ag_train(model: object) -> object:
    """Training mode for every layer reachable from `model` (an ag_* layer or ag_sequential, a
    Module of one's own, a dict or list of them, or any object holding layers in its attributes;
    ggmlR reaches only one level down). Returns the model."""
    _set_mode(model, True, set())
    return model


def ag_eval(model: object) -> object:
    """Eval mode for every layer reachable from `model` (see ag_train). Returns the model."""
    _set_mode(model, False, set())
    return model
