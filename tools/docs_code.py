"""Refresh the code the docs show: every block after a marker ``<!-- code: rapidrl.module.Class.method -->`` in
docs/*.md is rewritten with that object's current source (dedented). ``tests/test_docs_code.py`` fails while a block
differs from the code; this writes them.

    python -m tools.docs_code           # rewrite the stale blocks, list them
    python -m tools.docs_code --check   # list them only (exit code 1 when any is stale)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARKER = re.compile(r"(<!-- code: ([\w.]+) -->\n```python\n)(.*?)(```)", re.S)


def resolve(qualified: str):
    """The object named ``rapidrl.pkg.module.Class.attr``: the longest importable module prefix, then attributes."""
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise LookupError(qualified)


def source(qualified: str) -> str:
    """The dedented source of the object named ``qualified``."""
    return textwrap.dedent(inspect.getsource(resolve(qualified)))


def shown_blocks(docs: Path = DOCS) -> list[tuple[str, str, str]]:
    """(page, qualified name, the block's text) of every marked block in ``docs``/*.md."""
    return [(page.name, m.group(2), m.group(3)) for page in sorted(docs.glob("*.md"))
            for m in MARKER.finditer(page.read_text())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.docs_code", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="only list the stale blocks")
    args = p.parse_args(argv)
    stale = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()

        def fresh(m: re.Match, name: str = page.name) -> str:
            code = source(m.group(2))
            if code != m.group(3):
                stale.append(f"docs/{name}: {m.group(2)}")
            return m.group(1) + code + m.group(4)

        new = MARKER.sub(fresh, text)
        if new != text and not args.check:
            page.write_text(new)
    for line in stale:
        print(("stale: " if args.check else "rewrote: ") + line)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
