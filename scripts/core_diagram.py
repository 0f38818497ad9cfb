"""Write the session machine's table into docs/core-protocol.md (or check that it is there).

    python scripts/core_diagram.py           # regenerate the block between the markers
    python scripts/core_diagram.py --check   # exit 1 if the file's block is stale

The text comes from ``rma.session.diagram.document_block()``, a pure function of
``rma.session.machine.TRANSITIONS``; this script only reads and writes the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rma.session.diagram import BEGIN, END, document_block  # noqa: E402

DOC = ROOT / "docs" / "core-protocol.md"


def with_block(text: str, block: str) -> str:
    """``text`` with everything from ``BEGIN`` to ``END`` (inclusive) replaced by ``block``."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    updated = with_block(text, document_block())
    if updated == text:
        return 0
    if args.check:
        print(f"{DOC.relative_to(ROOT)} is stale: run python scripts/core_diagram.py", file=sys.stderr)
        return 1
    DOC.write_text(updated, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
