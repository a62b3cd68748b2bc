"""Every ```python block of the README and of the pages under docs/ runs as written: in order per page,
in one interpreter per page, started in an empty folder, as a reader pasting them one by one would.
The rules for blocks (languages, the `<!-- needs: ... -->` marker) are in tests/doc_blocks.py.

A block that needs something absent is skipped with the reason (test_optional_block). To check that
a page also runs without an optional part that is installed here, name it in GGMLPY_DOCS_WITHOUT
(for example GGMLPY_DOCS_WITHOUT=torch).
"""
import json
import os
import subprocess
import sys

import pytest

from doc_blocks import NEEDS, ROOT, DocBlockError, page_blocks, pages

PAGE_TIMEOUT_S = 300


def _rel(path):
    return path.relative_to(ROOT).as_posix()


def _runnable(path):
    return [b for b in page_blocks(path.read_text(), _rel(path)) if b.lang == "python"]


PAGES = [p for p in pages() if _runnable(p)]
OPTIONAL = [(_rel(p), b.line, b.needs) for p in PAGES for b in _runnable(p) if b.needs]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Runs every page once (tests/doc_runner.py); page name -> its result."""
    job = {"workdir": str(tmp_path_factory.mktemp("doc_pages")), "timeout": PAGE_TIMEOUT_S,
           "pages": [{"page": _rel(p), "blocks": [[b.line, b.src, b.needs] for b in _runnable(p)]} for p in PAGES]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GGMLPY_TEST_", "PYTEST_"))}
    env["MPLBACKEND"] = "Agg"
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "doc_runner.py")], input=json.dumps(job),
                          env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT_S * len(PAGES) + 120)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            found[r["page"]] = r
    assert proc.returncode == 0 and len(found) == len(PAGES), (proc.stdout + proc.stderr)[-6000:]
    return found


@pytest.mark.parametrize("page", [_rel(p) for p in PAGES])
def test_page_blocks_run_in_order(page, results):
    r = results[page]
    assert r["ok"], f"{page}: {r['error']}\n--- output ---\n{r['output']}"


@pytest.mark.parametrize("page,line,needs", OPTIONAL, ids=[f"{p}:{ln}" for p, ln, _ in OPTIONAL])
def test_optional_block(page, line, needs, results):
    r = results[page]
    skipped = dict((ln, need) for ln, need in r["skipped"])
    if line in skipped:
        pytest.skip(f"{page}:{line} needs {NEEDS[skipped[line]]}")
    assert line in r["ran"], f"{page}:{line} neither ran nor was skipped: {r['error']}"


def test_the_docs_have_examples():
    names = [_rel(p) for p in PAGES]
    assert "README.md" in names and len(names) >= 10, names
    assert sum(len(_runnable(p)) for p in PAGES) >= 30, "examples went missing"


def test_every_block_says_its_language():
    for path in pages():
        page_blocks(path.read_text(), _rel(path))   # raises DocBlockError naming the page and line


def test_block_rules():
    text = ("x\n```python\na = 1\n```\n```sh\nls\n```\n<!-- needs: torch -->\n\n```python\nimport torch\n```\n"
            "```text\nout\n```\n")
    blocks = page_blocks(text)
    assert [(b.line, b.lang, b.src, b.needs) for b in blocks] == [
        (3, "python", "a = 1\n", []), (6, "sh", "ls\n", []), (11, "python", "import torch\n", ["torch"]),
        (14, "text", "out\n", [])]
    for bad, why in [("```\nx\n```\n", "must say its language"), ("```py\nx\n```\n", "must say its language"),
                     ("<!-- needs: gpu2 -->\n```python\nx\n```\n", "unknown need"),
                     ("<!-- needs: torch -->\n```sh\nx\n```\n", "never runs"),
                     ("- item\n\n    ```python\n    x\n    ```\n", "indented")]:
        with pytest.raises(DocBlockError, match=why):
            page_blocks(bad)
