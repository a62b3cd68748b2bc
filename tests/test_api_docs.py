"""The public API (ggmlpy.__all__) is documented: every public callable, and every public method
and property of a public class, has a docstring. A name added without one fails here."""
import inspect

import ggmlpy


def public_api():
    """(qualified name, object) for every public callable, and the public members of public classes."""
    out = []
    for name in ggmlpy.__all__:
        obj = getattr(ggmlpy, name)
        if not (callable(obj) or isinstance(obj, type)):
            continue  # constants (GGML_TYPE_F32, ...) and data (found, GGML_VERSION)
        out.append((name, obj))
        if isinstance(obj, type):
            for member, raw in vars(obj).items():
                if member.startswith("_"):
                    continue
                if isinstance(raw, property) or callable(raw) or isinstance(raw, (staticmethod, classmethod)):
                    out.append((f"{name}.{member}", getattr(obj, member) if not isinstance(raw, property) else raw))
    return out


def _own_doc(name, obj):
    if isinstance(obj, type):  # a class's own docstring, not one inherited from its base
        return obj.__dict__.get("__doc__")
    return inspect.getdoc(obj)  # methods may inherit the documentation of what they override


def test_all_names_exist_once():
    assert len(ggmlpy.__all__) == len(set(ggmlpy.__all__)), "duplicates in ggmlpy.__all__"
    missing = [n for n in ggmlpy.__all__ if not hasattr(ggmlpy, n)]
    assert not missing, f"in __all__ but not in the package: {missing}"


def test_every_public_callable_has_a_docstring():
    api = public_api()
    assert len(api) > 300  # the API is all there (functions, classes and their members)
    undocumented = [name for name, obj in api if not (_own_doc(name, obj) or "").strip()]
    assert not undocumented, f"{len(undocumented)} public callables without a docstring: {undocumented}"


# Modules whose signatures are still to be annotated: none left (keep the set, empty, for new work).
# tests/test_type_hints.py checks that the hints given resolve to real names.
_UNANNOTATED_MODULES: set = set()


def test_public_functions_have_type_hints():
    missing = []
    for name in ggmlpy.__all__:
        obj = getattr(ggmlpy, name)
        if not inspect.isfunction(obj) or obj.__module__ in _UNANNOTATED_MODULES:
            continue
        sig = inspect.signature(obj)
        bare = [p.name for p in sig.parameters.values()
                if p.annotation is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if bare or sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{name}{'' if not bare else ' ' + str(bare)}")
    assert not missing, f"public functions without type hints: {missing}"


def test_the_package_says_it_is_typed():
    from pathlib import Path
    assert (Path(ggmlpy.__file__).parent / "py.typed").is_file()
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'wheel.packages = ["src/ggmlpy"]' in pyproject           # scikit-build-core ships the package's every file
    assert '\nlicense = "MIT"\n' in pyproject                    # an SPDX expression, not a table


def test_public_callables_are_found_where_they_say_they_are_defined():
    """Each public function and class is `<its __module__>.<its __qualname__>`, as for a def at
    module level: so documentation tools (the API reference), pickle and tracebacks find it under its
    own name (functions made by a factory say their name, not `_binary.<locals>.op`)."""
    import importlib
    wrong = []
    for name in ggmlpy.__all__:
        obj = getattr(ggmlpy, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            home = importlib.import_module(obj.__module__)
            if obj.__qualname__ != name or getattr(home, name, None) is not obj:
                wrong.append(f"{name}: {obj.__module__}.{obj.__qualname__}")
    assert not wrong, f"{len(wrong)} public callables not found at their own name: {wrong[:20]}"
