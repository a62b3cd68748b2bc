"""The package's comments and docstrings state invariants and reasons: no issue numbers or
development history, no pointers into README sections (the guides are under docs/), no measured
timings or speed-ups in docstrings or comments (those live, dated, in docs/benchmarks.md), and
every `path.py` they name exists."""
import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for p in sorted((ROOT / "src" / "ggmlpy").rglob("*")) if p.suffix in (".py", ".c", ".h") and p.name != "cdef.h"]

HISTORY = re.compile(r"\bissue\s*#?\d+|\bsuite2\b|\bsession\s*\d+|\bREADME\b", re.I)
# the tests and scripts may name the README (they check it) but carry no history either
TOOLS = [p for d in ("tests", "scripts") for p in sorted((ROOT / d).rglob("*.py")) if p != Path(__file__).resolve()]
TOOL_HISTORY = re.compile(r"\bissue\s*#?\d+|\bsuite2\b|\bsession\s*\d+", re.I)
# A measured duration ("51 us", "1.2 ms", "0.8 s"; "1s" is ones); a duration the code itself uses
# ("every 20 ms") is allowed.
TIMING = re.compile(r"(?<!every )\b(?:\d+(?:\.\d+)?\s?(?:ms|us|µs|ns)|\d+(?:\.\d+)? s)\b")
# A measured speed-up ("2.3x slower", "10-20 % faster", "measured fastest").
SPEED = re.compile(r"\b\d+(?:\.\d+)?\s?(?:x|×)\s+(?:faster|slower|as fast)\b|\b\d+(?:\s?-\s?\d+)?\s?%\s+(?:faster|slower)\b"
                   r"|\bmeasured (?:fastest|slowest|faster|slower)\b", re.I)
C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
PY_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b")


def _comments(p: Path):
    """(line, text) of each comment of a Python or C source."""
    text = p.read_text()
    if p.suffix == ".py":
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    else:
        for m in C_COMMENT.finditer(text):
            yield text.count("\n", 0, m.start()) + 1, m.group(0)


def _docstrings(p: Path):
    """(line, text) of each docstring of a Python source."""
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def test_no_issue_numbers_history_or_readme_pointers():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in SOURCES
             for i, line in enumerate(p.read_text().splitlines(), 1) if HISTORY.search(line)]
    assert not found, "\n".join(found)


def test_tests_and_scripts_carry_no_issue_numbers_or_history():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in TOOLS
             for i, line in enumerate(p.read_text().splitlines(), 1) if TOOL_HISTORY.search(line)]
    assert not found, "\n".join(found)


def test_docstrings_carry_no_timings():
    found = []
    for p in SOURCES:
        if p.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                found += [f"{p.relative_to(ROOT)}:{node.body[0].lineno}: {m.group(0)!r}" for m in TIMING.finditer(doc)]
    assert not found, "timings belong in docs/benchmarks.md:\n" + "\n".join(found)


def test_comments_carry_no_timings_or_speedups():
    found = [f"{p.relative_to(ROOT)}:{line}: {m.group(0)!r}" for p in SOURCES for line, text in _comments(p)
             for pattern in (TIMING, SPEED) for m in pattern.finditer(text)]
    found += [f"{p.relative_to(ROOT)}:{line}: {m.group(0)!r}" for p in SOURCES if p.suffix == ".py"
              for line, text in _docstrings(p) for m in SPEED.finditer(text)]
    assert not found, "measurements belong in docs/benchmarks.md:\n" + "\n".join(found)


def test_every_path_a_comment_or_docstring_names_exists():
    """`runtime/pool.py`, `kernels.c`, `conv.c`: a file the package's comments and docstrings point at is
    there (a bare name anywhere in the repository, a path at its end)."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    files += [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if ".git" not in p.parts]
    names = {Path(f).name for f in files}
    missing = []
    for p in SOURCES:
        texts = list(_comments(p)) + (list(_docstrings(p)) if p.suffix == ".py" else [])
        for line, text in texts:
            for ref in PY_PATH.findall(text):
                ok = any(f == ref or f.endswith("/" + ref) for f in files) if "/" in ref else ref in names
                if not ok:
                    missing.append(f"{p.relative_to(ROOT)}:{line}: {ref}")
    assert not missing, "comments that name files that are not there:\n" + "\n".join(missing)


def test_the_checks_catch_what_they_are_for():
    assert HISTORY.search("as in issue 16") and HISTORY.search("see README") and HISTORY.search("suite2 branch")
    assert TIMING.search("51 us each") and TIMING.search("took 1.2 ms") and TIMING.search("0.8 s on a busy one")
    assert not TIMING.search("every 20 ms") and not TIMING.search("no trailing 1s beyond the first two")
    assert SPEED.search("is 2.3x slower than") and SPEED.search("ran 10-20 % faster") and SPEED.search("3 measured fastest")
    assert not SPEED.search("blocks of 3x3 filters") and not SPEED.search("faster on ResNet-18 (docs/benchmarks.md)")
    assert PY_PATH.findall("see backend/pool.py and kernels.c, or prims.py.") == ["backend/pool.py", "prims.py"]
    assert list(_comments(Path(__file__))) and list(_docstrings(Path(__file__)))


def test_docs_testing_maps_every_module_to_existing_tests():
    text = (ROOT / "docs" / "testing.md").read_text()
    table = dict(re.findall(r"^\| `([\w/]+\.py)` \| (.+) \|$", text, re.M))
    modules = {str(p.relative_to(ROOT / "src" / "ggmlpy")) for p in (ROOT / "src" / "ggmlpy").rglob("*.py") if p.name != "__main__.py"}
    assert not modules - set(table), f"modules docs/testing.md does not map: {sorted(modules - set(table))}"
    assert not set(table) - modules, f"docs/testing.md maps modules that are gone: {sorted(set(table) - modules)}"
    named = {t for tests in table.values() for t in re.findall(r"`([\w/]+\.py)`", tests)}
    assert named and not {t for t in named if not (ROOT / "tests" / t).is_file()}
