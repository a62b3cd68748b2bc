"""Every ```python block of README.md (and of each page under docs/) runs as written: in order, in
one interpreter (a child process, started in an empty temporary folder), as a reader pasting them
one by one would."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

# The child runs each block with compile(..., "<file>:<line>"), so a failure names the block.
_RUNNER = r"""
import json, sys
ns = {"__name__": "__main__"}
name = sys.argv[1]
for line, src in json.load(sys.stdin):
    code = compile("\n" * (line - 1) + src, name, "exec")
    print(f"--- {name}:{line}", flush=True)
    exec(code, ns)
print("--- all blocks ran", flush=True)
"""


def readme_blocks(text: str):
    """(first line number, source) of every ```python block, in order."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _FENCE.finditer(text)]


def test_extracts_every_python_block():
    blocks = readme_blocks("x\n```python\na = 1\n```\n```sh\nls\n```\n```python\nb = a\n```\n")
    assert blocks == [(3, "a = 1\n"), (9, "b = a\n")]


def _needs_torch(src: str) -> bool:
    return re.search(r"^import .*\btorch\b|^from torch\b", src, re.M) is not None


def _run_blocks(name: str, blocks, cwd) -> None:
    import importlib.util
    import json
    if importlib.util.find_spec("torch") is None:  # the PyTorch export example runs where torch is (CI has it)
        blocks = [b for b in blocks if not _needs_torch(b[1])]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GGMLPY_TEST_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["MPLBACKEND"] = "Agg"
    proc = subprocess.run([sys.executable, "-c", _RUNNER, name], input=json.dumps(blocks), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "--- all blocks ran" in proc.stdout, out[-6000:]


def test_readme_python_blocks_run_in_order(tmp_path):
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 7, "the README's examples went missing"
    _run_blocks("README.md", blocks, tmp_path)


DOC_PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if readme_blocks(p.read_text()))


@pytest.mark.parametrize("page", DOC_PAGES, ids=[p.name for p in DOC_PAGES])
def test_docs_pages_python_blocks_run_in_order(page, tmp_path):
    _run_blocks(f"docs/{page.name}", readme_blocks(page.read_text()), tmp_path)


def test_the_custom_layers_page_is_there():
    assert ROOT / "docs" / "custom_layers.md" in DOC_PAGES


def test_ci_runs_exactly_the_quick_start_commands():
    """The README's quick start is the whole set-up, and CI (.ci/run) runs it as written."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quick start"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert len(commands) == 2, commands
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for cmd in commands:
        assert cmd in ci, f".ci/run does not run the README's `{cmd}`"
    assert ci.index(commands[0]) < ci.index(commands[1])
