"""The HTML API reference (README: `.venv/bin/python -m pdoc -o docs/api ggmlpy`) builds from the
docstrings without a single warning, and documents the public API."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_builds_without_warnings(tmp_path):
    pytest.importorskip("pdoc", reason="pdoc is in the test extra: pip install -e '.[test]'")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-W", "error", "-m", "pdoc", "-o", str(tmp_path), "ggmlpy"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr        # -W error: any warning fails the build
    assert "warn" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
    page = (tmp_path / "ggmlpy.html").read_text()
    for name in ("ag_tensor", "AGTensor.backward", "ag_fit", "ggml_mul_mat", "ag_checkpoint", "ag_accuracy"):
        assert f'id="{name}"' in page, f"{name} is missing from the API reference"
    assert (tmp_path / "index.html").is_file()
