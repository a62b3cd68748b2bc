"""The package's layers hold: the import-linter contracts in pyproject.toml are kept (the layers,
no import cycle inside any package, the flat namespace used by the command line only), and the
hooks by which a layer equips what a lower one defines are in place whatever is imported first."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ("ggmlpy's layers", "no import cycles between the modules of any package",
             "only the command line uses the package's flat namespace")


def test_the_import_contracts_are_kept():
    """lint-imports over this checkout (its own ggmlpy first on the path): every contract KEPT.
    A broken one prints the offending import chains, e.g. `ggmlpy.tensor is not allowed to import
    ggmlpy.autograd: ggmlpy.tensor -> ggmlpy.autograd.ops (l.226)`."""
    pytest.importorskip("importlinter", reason="import-linter is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                           "pyproject.toml", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    for name in CONTRACTS:
        assert any(line.startswith(name) and "KEPT" in line for line in report.splitlines()), report
    assert "0 broken" in report, report


def _fresh(code: str) -> str:
    """Run `code` in a fresh interpreter on this checkout; its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_tensor_has_its_operators_whatever_module_is_imported_first():
    """tensor.py sits below autograd; autograd.tensor_methods sets the ag_* methods on AGTensor when the
    autograd package loads, which importing any part of ggmlpy does."""
    out = _fresh("import ggmlpy.tensor as t\n"
                 "print(all(hasattr(t.AGTensor, n) for n in ('__add__', '__matmul__', '__getitem__', 'T', 'backward')))\n"
                 "x = t.ag_tensor([[1.0, 2.0]])\n"
                 "print((x + 1).numpy().tolist(), (2 * x).T.shape, x[0, 1].item())")
    assert out.split() == ["True", "[[2.0,", "3.0]]", "(2,", "1)", "2.0"]


def test_ggml_contexts_are_made_only_in_graph_and_core():
    """Sizing a ggml context (ggml aborts when one runs out) is graph/'s and core/'s business; the
    loader's probe and ggmlpy's kernels (below core) make their own small ones."""
    allowed = {"graph", "core"}
    allowed_files = {Path("bindings/loader.py"), Path("kernels/rewrite.py")}
    pkg = ROOT / "src" / "ggmlpy"
    makers = [p.relative_to(pkg) for p in pkg.rglob("*.py") if "ggml_init_params" in p.read_text()]
    assert [p for p in makers if p.parts[0] not in allowed and p not in allowed_files] == []
