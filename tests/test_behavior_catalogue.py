"""The behaviour ids the code cites (``S-33``, ``B-10``, ``X-2``) are defined in docs/behaviours.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"\b([A-Z]{1,2}-[0-9]{1,3})\b")
DEFINED = re.compile(r"^\s*(?:- \*\*([A-Z]{1,2}-[0-9]+)\*\*|\| ([A-Z]{1,2}-[0-9]+) \|)", re.M)


def defined() -> set[str]:
    text = (ROOT / "docs" / "behaviours.md").read_text(encoding="utf-8")
    return {a or b for a, b in DEFINED.findall(text)}


def cited() -> dict[str, str]:
    where: dict[str, str] = {}
    for folder in ("rma", "rma_shell", "tests", "properties", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for found in CITED.findall(line):
                    where.setdefault(found, f"{path.relative_to(ROOT)}:{number}")
    return where


def test_every_behaviour_id_the_code_cites_is_defined_in_the_catalogue() -> None:
    known = defined()
    missing = {k: v for k, v in cited().items() if k not in known}
    assert not missing, f"cited but not in docs/behaviours.md: {missing}"


def test_the_catalogue_defines_each_id_once() -> None:
    text = (ROOT / "docs" / "behaviours.md").read_text(encoding="utf-8")
    ids = [a or b for a, b in DEFINED.findall(text)]
    assert len(ids) > 400
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
