"""The parity run against ggmlR's recorded outputs (tests/parity), one test per case."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import parity  # noqa: E402

FIXTURES = ROOT / "tests" / "parity"
CASES = list(parity.load_cases([FIXTURES], ["ggml", "ag", "train", "keras"]))


@pytest.mark.parametrize("suite,case", CASES, ids=[f"{s}/{c['name']}" for s, c in CASES])
def test_parity_case(suite, case):
    why = parity.run_case(suite, case)
    assert why is None, why


def test_parity_script_summary():
    import subprocess
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "parity.py"), str(FIXTURES)],
                         capture_output=True, text=True, timeout=300)
    last = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 0 and last == f"{len(CASES)} passed, 0 failed", out.stdout[-2000:]
