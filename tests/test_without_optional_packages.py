"""The suite on a newcomer's machine: every test module imports without the optional packages
(the references the tests compare with, the front ends' extras), so that only the tests that
need one skip, with the reason, and collection never errors."""
import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.abspath(__file__))

# Not installed by ggmlpy itself: the references and extras a test may compare with or drive.
OPTIONAL = ("torch", "torchvision", "onnxruntime", "onnxscript", "keras", "tensorflow", "jax", "sklearn",
            "scanpy", "anndata", "umap", "pandas", "scipy", "threadpoolctl", "matplotlib", "mkdocs",
            "importlinter")

# Run in the child before pytest: importing any of OPTIONAL (or a submodule) fails as a missing
# package does.
_BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    blocked = set(sys.argv[1].split(","))

    class Missing(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
            return None

    sys.meta_path.insert(0, Missing())
    import pytest
    sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[2]]))
""")


def test_the_suite_collects_without_any_optional_package():
    run = subprocess.run([sys.executable, "-c", _BLOCKER, ",".join(OPTIONAL), TESTS], capture_output=True,
                         text=True, timeout=600, cwd=os.path.dirname(TESTS))
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0 and "error" not in summary, (
        f"collection without {', '.join(OPTIONAL)} failed (exit {run.returncode}): {summary}\n"
        + run.stdout[-4000:] + run.stderr[-2000:])
    assert "collected" in summary or "tests" in summary, summary


def test_the_blocker_hides_what_it_names(tmp_path):
    """The child's finder really makes the optional packages missing (a guard that cannot fail
    guards nothing): a module importing one of them errors at collection there."""
    (tmp_path / "test_probe.py").write_text("import torch  # noqa: F401\n\n\ndef test_x():\n    pass\n")
    run = subprocess.run([sys.executable, "-c", _BLOCKER, "torch", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, cwd=str(tmp_path))
    assert run.returncode != 0 and "error" in run.stdout.strip().splitlines()[-1], run.stdout[-2000:]
    assert "hidden by the test" in run.stdout
