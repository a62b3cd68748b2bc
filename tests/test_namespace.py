"""The flat ggmlpy namespace: every public name of before the lazy families is still there and means
the same; the heavy families load on first use, not at `import ggmlpy`."""
import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ggmlpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PINNED = Path(__file__).with_name("public_names.txt")


def _pinned():
    rows = [line.split() for line in PINNED.read_text().splitlines() if line and not line.startswith("#")]
    return {name: (kind, where) for name, kind, where in rows}


def _fresh(code: str) -> str:
    """Run `code` in a new interpreter (this checkout first on its path); its stdout."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_every_pinned_name_is_there_with_its_kind():
    pinned = _pinned()
    assert len(pinned) > 800
    missing = sorted(n for n in pinned if not hasattr(ggmlpy, n))
    assert not missing, f"public names gone: {missing}"
    wrong = sorted((n, kind, type(getattr(ggmlpy, n)).__name__) for n, (kind, _) in pinned.items()
                   if type(getattr(ggmlpy, n)).__name__ != kind)
    assert not wrong, f"names that now name another kind of object: {wrong}"


def test_all_keeps_every_pinned_name_once():
    in_all = {n for n, (_, where) in _pinned().items() if where == "all"}
    assert not in_all - set(ggmlpy.__all__), "names left out of __all__"
    assert len(ggmlpy.__all__) == len(set(ggmlpy.__all__)), "a name twice in __all__"
    assert all(hasattr(ggmlpy, n) for n in ggmlpy.__all__)


def test_a_fresh_dir_lists_every_pinned_name_before_any_is_loaded():
    listed = json.loads(_fresh("import json, ggmlpy; print(json.dumps(dir(ggmlpy)))"))
    assert not set(_pinned()) - set(listed)
    assert listed == sorted(listed)


def test_star_import_gives_every_name_of_all():
    names = json.loads(_fresh("import json\nfrom ggmlpy import *\n"
                              "print(json.dumps(sorted(n for n in dir() if not n.startswith('__'))))"))
    assert set(ggmlpy.__all__) <= set(names)


def test_each_lazy_family_lists_its_modules_names():
    """A family with __all__ gives all of it, in its order (add a new name there and here);
    the others give the names picked from them."""
    for module, names in ggmlpy._LAZY_FAMILIES:
        mod = importlib.import_module(module, "ggmlpy")
        if hasattr(mod, "__all__"):
            assert tuple(names) == tuple(mod.__all__), f"ggmlpy._LAZY_FAMILIES[{module!r}] is not its __all__"
        else:
            assert all(hasattr(mod, n) for n in names), module


def test_a_lazy_name_means_its_last_familys_object():
    for name, module in ggmlpy._LAZY.items():
        assert getattr(ggmlpy, name) is getattr(importlib.import_module(module, "ggmlpy"), name), name
    for name, module in ggmlpy._LAZY_MODULES.items():
        assert getattr(ggmlpy, name) is importlib.import_module(module, "ggmlpy"), name


def test_eager_imports_bind_lazy_names_only_to_the_same_objects():
    """Loading a family later must not change what one of its names meant at import: any name an eager
    import already bound is the family's own object."""
    both = json.loads(_fresh("import json, ggmlpy; "
                             "print(json.dumps(sorted(set(vars(ggmlpy)) & set(ggmlpy._LAZY))))"))
    for name in both:
        module = importlib.import_module(ggmlpy._LAZY[name], "ggmlpy")
        assert vars(ggmlpy)[name] is getattr(module, name), name


def test_the_type_queries_are_defined_once_and_take_names():
    """ggml_type_size and company live in core.types alone (core.api, quant and the flat namespace give
    that one object), and take a type's name as well as its id."""
    import pkgutil
    import ggmlpy.core
    from ggmlpy.core import api, types
    core = [importlib.import_module(f"ggmlpy.core.{m.name}") for m in pkgutil.iter_modules(ggmlpy.core.__path__)]
    for name in ("ggml_blck_size", "ggml_ftype_to_ggml_type", "ggml_is_quantized", "ggml_type_size", "ggml_type_sizef"):
        assert getattr(ggmlpy, name) is getattr(types, name) is getattr(ggmlpy.quant, name) is getattr(api, name)
        assert all(getattr(m, name, None) in (None, getattr(types, name)) for m in core), name
    assert api.ggml_type_size("f32") == api.ggml_type_size(api.GGML_TYPE_F32) == 4
    assert api.ggml_blck_size("q4_0") == 32 and api.ggml_type_sizef("Q4_0") == 18 / 32
    assert api.ggml_is_quantized("GGML_TYPE_Q4_K") and not api.ggml_is_quantized("f16")
    with pytest.raises(ggmlpy.GGMLError, match="unknown ggml type"):
        api.ggml_type_size("no_such_type")


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'ag_no_such_op'"):
        ggmlpy.ag_no_such_op  # noqa: B018
    assert not hasattr(ggmlpy, "onnx_no_such")


HEAVY = ("onnx", "gguf", "scipy", "torch", "tqdm", "ggmlpy.onnx", "ggmlpy.keras", "ggmlpy.quant", "ggmlpy.extras",
         "ggmlpy.cli", "ggmlpy.train")


def test_a_fresh_import_leaves_the_heavy_families_unloaded():
    loaded = json.loads(_fresh(f"import json, sys, ggmlpy; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"))
    assert loaded == []


def test_touching_an_onnx_name_loads_onnx():
    code = ("import json, sys, ggmlpy; before = 'onnx' in sys.modules; f = ggmlpy.onnx_load; "
            "print(json.dumps([before, 'onnx' in sys.modules, f is sys.modules['ggmlpy.onnx'].onnx_load, "
            "'onnx_load' in vars(ggmlpy)]))")
    assert json.loads(_fresh(code)) == [False, True, True, True]


def test_the_import_benchmark_prints_its_summary():
    """scripts/bench_import.py, the smallest run, against a cheap peer (torch's import is the real one)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_import.py"), "--runs", "1",
                          "--peer", "json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("summary: import ggmlpy ") and " x import json (ggmlpy " in last, out.stdout
    assert "loadavg before:" in out.stdout


def test_no_internal_name_of_autograd_leaks():
    """The autograd package states its public names (__all__): the modules it imports (np, math, ...) and its
    own internals (engine, prims, ...) stay out of the flat namespace (docs/changelog.md)."""
    leaked = ("np", "math", "numbers", "warnings", "annotations", "apply", "engine", "rules", "prims", "tape", "ops",
              "checkpoint", "forward_ad", "gradcheck", "graph_mode")
    assert not [n for n in leaked if hasattr(ggmlpy, n)]
    foreign = sorted(n for n in dir(ggmlpy) if not n.startswith("_") and isinstance(getattr(ggmlpy, n), type(ggmlpy))
                     and not getattr(ggmlpy, n).__name__.startswith("ggmlpy."))
    assert not foreign, f"modules not of ggmlpy in its namespace: {foreign}"
    assert set(ggmlpy.autograd.__all__) <= set(dir(ggmlpy))


def _class_definitions(root: Path) -> dict:
    """{class name: ["path:line", ...]} for every class statement under `root`, nested ones included."""
    found: dict = {}
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(f"{p.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice_in_the_package():
    """One name, one concept: two classes of one name (three `Builder`s, two `GraphPlan`s) make a
    traceback, a type check or an isinstance mean whichever the reader happened to find first."""
    twice = {name: places for name, places in _class_definitions(Path(ROOT) / "src" / "ggmlpy").items() if len(places) > 1}
    assert not twice, f"class names defined more than once: {twice}"


def test_the_class_name_check_sees_a_repeated_name(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("class Plan:\n    class Node: pass\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    class Node: pass\n")
    found = _class_definitions(pkg)
    assert found["Node"] == ["pkg/a.py:2", "pkg/sub/b.py:2"] and found["Plan"] == ["pkg/a.py:1"]
