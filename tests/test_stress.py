"""CI's short version of scripts/stress.py: threads, fuzzing, files, a long run and the front ends'
scenarios, each in a child process; no silent wrong value, hang, crash or lost file or interrupt."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_stress_quick():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "stress.py"), "--quick"],
                         capture_output=True, text=True, timeout=1200, cwd=ROOT)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and lines[-1] == f"{len(lines) - 3} passed, 0 failed", out.stdout + out.stderr[-2000:]
