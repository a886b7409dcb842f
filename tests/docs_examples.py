"""A docs page's examples, run as a reader would: every ```python block of docs/<page>, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
_RUNNABLE = re.compile(r"(?<!-->\n)```python\n(.*?)```", re.S)


def python_blocks(page: str) -> list[str]:
    """The runnable python blocks of docs/<page>, in order: not the source a ``<!-- code: ... -->`` marker pins above
    a block (tests/test_docs_code.py compares that with the code)."""
    return _RUNNABLE.findall((DOCS / page).read_text())


def run_examples(page: str, expected: int) -> dict:
    """Execute docs/<page>'s runnable python blocks in order in one namespace (they build on each other) and return
    the namespace. ``expected``: how many the page has, so that a page gaining or losing one updates its test."""
    blocks = python_blocks(page)
    assert len(blocks) == expected, f"docs/{page} has {len(blocks)} runnable python blocks, its test expects {expected}"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), namespace)
    return namespace
