"""The code blocks of the README and of every page under docs/, as the documentation tests read them.

Every fenced block names its language. ```python blocks run; blocks in the other languages below are
shell commands, files or output, and are shown, never run. A ```python block that needs something
optional has a marker on the line before it (a blank line may stand between), which the rendered
page hides and the prose beside it says in words:

    <!-- needs: torch -->

The needs a marker may name are the keys of NEEDS. A page's blocks run in order in one interpreter,
as a reader pasting them one by one would; a block whose need is missing is left out, so the blocks
after it must not depend on it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = "python"
SHOWN = {"sh", "console", "text", "toml", "yaml", "json"}  # commands, files and output: never run

# need -> (what it is, how to get it), for the skip reasons
NEEDS = {
    "torch": "PyTorch (pip install torch==2.13.0)",
    "vulkan": "a Vulkan device (GGMLPY_SOFTWARE_VULKAN=1 lists Mesa's lavapipe)",
    "cuda": "a CUDA device and a build with --backend cuda",
    "rpc-server": "a ggml rpc-server listening on 127.0.0.1:50052 (python -m ggmlpy rpc-server)",
    "sklearn": "scikit-learn (pip install 'ggmlpy[sklearn]')",
    "anndata": "anndata (pip install 'ggmlpy[anndata]')",
    "llama-cpp": "llama-cpp-python built from the pinned sdist (python scripts/llama_cpp_env.py)",
}

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"^<!--\s*needs:\s*([\w, -]+?)\s*-->$")


class DocBlockError(ValueError):
    """A page's code blocks do not follow the rules above."""


@dataclass
class Block:
    line: int                 # 1-based line of the block's first source line
    lang: str
    src: str
    needs: list = field(default_factory=list)


def page_blocks(text: str, page: str = "<page>") -> list[Block]:
    """Every fenced block of a Markdown page, in order, with the needs of its marker."""
    blocks = []
    lines = text.splitlines()
    for k, ln in enumerate(lines):
        if re.match(r"^\s+```", ln):
            raise DocBlockError(f"{page}:{k + 1}: an indented code fence (the tests read fences at the margin only)")
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start(2)) + 1
        lang = m.group(1).strip().split(" ")[0] if m.group(1).strip() else ""
        if lang != RUN and lang not in SHOWN:
            raise DocBlockError(f"{page}:{line - 1}: a code block must say its language: ```python (run) or "
                                f"one of {sorted(SHOWN)} (shown only), not {m.group(1).strip()!r}")
        needs = []
        k = line - 3                      # the line before the fence, 0-based
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = _MARKER.match(lines[k].strip()) if k >= 0 else None
        if marker:
            needs = [n.strip() for n in marker.group(1).split(",") if n.strip()]
            unknown = [n for n in needs if n not in NEEDS]
            if unknown:
                raise DocBlockError(f"{page}:{k + 1}: unknown need {unknown}; known: {sorted(NEEDS)}")
            if lang != RUN:
                raise DocBlockError(f"{page}:{k + 1}: a needs marker stands before a block that never runs")
        blocks.append(Block(line, lang, m.group(2), needs))
    return blocks


def pages() -> list[Path]:
    """The README first, then every Markdown page under docs/, in path order."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
