"""Functions a factory makes, under their public names."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def public_function(fn: F, name: str, doc: str, module: str | None = None) -> F:
    """`fn` as if written `def name(...)` at module level: its __name__ and __qualname__ are `name`,
    not the factory's inner name (`_binary.<locals>.op`), so that tracebacks, pickle and the API
    reference find it where it is exported (tests/test_api_docs.py checks every public one); its
    docstring is `doc`, and its module `module` where the factory lives in another one."""
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    if module is not None:
        fn.__module__ = module
    return fn
