"""The package's comments and docstrings state invariants and reasons: no issue numbers or
development history, no pointers into README sections (the guides are under docs/), and no
measured timings in docstrings (those live, dated, in docs/benchmarks.md)."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for p in sorted((ROOT / "ggmlpy").rglob("*")) if p.suffix in (".py", ".c", ".h") and p.name != "cdef.h"]

HISTORY = re.compile(r"\bissue\s*#?\d+|\bsuite2\b|\bsession\s*\d+|\bREADME\b", re.I)
# the tests and scripts may name the README (they check it) but carry no history either
TOOLS = [p for d in ("tests", "scripts") for p in sorted((ROOT / d).rglob("*.py")) if p != Path(__file__).resolve()]
TOOL_HISTORY = re.compile(r"\bissue\s*#?\d+|\bsuite2\b|\bsession\s*\d+", re.I)
# A measured duration ("51 us", "1.2 ms", "0.8 s"; "1s" is ones); a duration the code itself uses
# ("every 20 ms") is allowed.
TIMING = re.compile(r"(?<!every )\b(?:\d+(?:\.\d+)?\s?(?:ms|us|µs|ns)|\d+(?:\.\d+)? s)\b")


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


def test_the_checks_catch_what_they_are_for():
    assert HISTORY.search("as in issue 16") and HISTORY.search("see README") and HISTORY.search("suite2 branch")
    assert TIMING.search("51 us each") and TIMING.search("took 1.2 ms") and TIMING.search("0.8 s on a busy one")
    assert not TIMING.search("every 20 ms") and not TIMING.search("no trailing 1s beyond the first two")
