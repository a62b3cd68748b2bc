"""The ag_* API fuzzed in a child process (scripts/fuzz_ag.py): random and hostile arguments,
every dtype including i32, devices released and switched, tapes reset. The child must survive
(an abort is a failed test, not a dead run) and every refusal must be a checked one."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_ag_api_survives_hostile_calls(seed):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz_ag.py"), "--calls", "1500",
                          "--seed", str(seed)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, f"the process died ({out.returncode}): {out.stderr[-2000:]}"
    assert ", crashes 0, unchecked inputs 0" in out.stdout, out.stdout
