"""ParamList: ggmlR's named list of parameters, as a Python list that also answers by name."""
from __future__ import annotations

from collections.abc import Iterable


class ParamList(list):
    """A list of tensors (iteration, len(), positions, `+` all as a list) that also answers by
    name, as R's named list does: `params["W"]`, `"W" in params`, `keys()`, `items()`.

    Layers' parameters() and optimizers' `params` are ParamLists, so R's `model$parameters()$W_q`
    and `opt$params$W` port as `model.parameters()["W_q"]` and `opt.params["W"]`."""

    def __init__(self, items: Iterable = (), names: Iterable[str] | None = None):
        if isinstance(items, dict):
            names, items = list(items.keys()), list(items.values())
        elif isinstance(items, ParamList) and names is None:
            names = items._names
        super().__init__(items)
        self._names = [str(n) for n in names] if names is not None else None
        if self._names is not None and len(self._names) != len(self):
            raise ValueError(f"ParamList: {len(self._names)} names for {len(self)} tensors")

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, object]]) -> "ParamList":
        """A ParamList from (name, tensor) pairs, e.g. a model's named_parameters()."""
        pairs = list(pairs)
        return cls([t for _, t in pairs], [n for n, _ in pairs])

    def names(self) -> list[str] | None:
        """The names, in order (None when the list was made without names, as R's names())."""
        return None if self._names is None else list(self._names)

    def keys(self) -> list[str]:
        """The names, in order (empty when unnamed)."""
        return list(self._names or [])

    def values(self) -> list:
        """The tensors, in order."""
        return list(self)

    def items(self) -> list[tuple[str, object]]:
        """(name, tensor) pairs, in order."""
        return list(zip(self.keys(), self))

    def get(self, name: str, default=None):
        """The tensor called `name`, or `default`."""
        return self[name] if name in self else default

    def __getitem__(self, key):
        if isinstance(key, str):
            if not self._names or key not in self._names:
                raise KeyError(f"no parameter named {key!r}; names: {self.keys()}")
            return list.__getitem__(self, self._names.index(key))
        return list.__getitem__(self, key)

    def __contains__(self, key) -> bool:
        if isinstance(key, str):
            return bool(self._names) and key in self._names
        return any(v is key for v in self)  # identity: tensors compare element-wise

    def __repr__(self) -> str:
        if self._names is None:
            return f"ParamList({list.__repr__(self)})"
        return "ParamList({" + ", ".join(f"{n!r}: {v!r}" for n, v in self.items()) + "})"


class NamedList(dict):
    """R's named list(...) as a dict that also answers by attribute: `res["model"]` and
    `res.model` are the same, so R's `res$model$forward(x)` ports either way."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no entry {name!r}; entries: {list(self)}") from None

    def __dir__(self):
        return list(super().__dir__()) + [k for k in self if isinstance(k, str)]
