"""Every fenced Python block in README.md and docs/ runs, against the loopback emulators.

Each page runs in its own subprocess (``tests/docs_harness.py``: directives, fixtures and the
stand-ins for "your code" are described there); a block fails the page's test with its
traceback, or when it never reached the emulator its directive started, or when its output
lacks the directive's ``expect=`` text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_harness import ROOT, blocks, pages, parse_directive

PAGES = pages()


def _child_env() -> dict[str, str]:
    # No real credential or endpoint from the developer's shell may reach a block.
    drop = ("ANTHROPIC_", "AWS_", "OPENAI_", "OTEL_", "RMA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # Nor may botocore's credential chain look beyond loopback (instance metadata) or at files.
    env |= {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    return env


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_python_block_of_the_page_runs(page: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs_harness", str(page)],
        capture_output=True,
        text=True,
        timeout=110,
        env=_child_env(),
        cwd=ROOT,
    )
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    where = page.relative_to(ROOT)
    assert done.returncode == 0, f"{where}: the harness died:\n{done.stderr[-4000:]}"
    assert [r["line"] for r in reports] == [b.line for b in blocks(page)], "a block was not run"
    failures = [
        f"{where}:{r['line']}: {r['detail']}\n{r['output']}" for r in reports if r["status"] == "fail"
    ]
    assert not failures, "\n\n".join(failures)


def test_the_extractor_finds_blocks_and_their_directives(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n"
        '<!-- docs-test: setup=openai,otlp expect="a b" -->\n\n```python\nprint(x)\n```\n\n'
        "- a list item:\n\n  <!-- docs-test: skip reason=outline -->\n  ```python\n  def f(): ...\n  ```\n\n"
        "```bash\necho no\n```\n"
    )
    found = blocks(page)
    assert [(b.line, b.code) for b in found] == [(4, "x = 1\n"), (10, "print(x)\n"), (17, "def f(): ...\n")]
    assert found[0].directive == {}
    assert found[1].setups == ["openai", "otlp"] and found[1].directive["expect"] == "a b"
    assert found[2].directive == {"skip": "", "reason": "outline"}
    assert parse_directive(' setup=cma expect="x y" ') == {"setup": "cma", "expect": "x y"}


def test_readme_and_the_guides_are_covered() -> None:
    covered = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "docs/getting-started.md", "docs/testing.md", "docs/core-protocol.md"} <= covered


def test_the_harness_fails_broken_quietly_failing_and_idle_examples(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nraise ValueError('broken example')\n```\n\n"
        "<!-- docs-test: setup=openai -->\n"
        "```python\n# Fragment: a provider of yours\nfrom rma_shell import run\n\n"
        "outcome = await run(provider, handler=h, prompt=p, max_turns=1)\n```\n\n"
        "<!-- docs-test: setup=cma -->\n```python\n# Fragment: a key\nx = 1\n```\n\n"
        '<!-- docs-test: expect="42" -->\n```python\nprint(41)\n```\n\n'
        "<!-- docs-test: skip -->\n```python\npass\n```\n\n"
        "<!-- docs-test: setup=nope -->\n```python\npass\n```\n\n"
        '<!-- docs-test: setup=openai expect="Pro plan" -->\n'
        "```python\n# Fragment: a provider of yours\nfrom rma_shell import run\n\n"
        "outcome = await run(provider, handler=h, prompt=p)\nprint(outcome.unwrap().text)\n```\n\n"
        "```python\nfrom returns.result import Failure\n\noutcome = Failure('shown on purpose')\n```\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs_harness", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_child_env(),
        cwd=ROOT,
    )
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    statuses = [r["status"] for r in reports]
    assert statuses == ["fail", "fail", "fail", "fail", "fail", "fail", "ok", "ok"], reports
    assert "broken example" in reports[0]["detail"]
    assert "the block's `outcome` is <Failure" in reports[1]["detail"]  # MaxTurnsExceeded
    assert "never reached" in reports[2]["detail"]
    assert "expected '42'" in reports[3]["detail"]
    assert "reason" in reports[4]["detail"]
    assert "nope" in reports[5]["detail"]


def test_a_block_runs_as_a_reader_would_unless_visibly_marked_as_a_fragment(tmp_path: Path) -> None:
    """Hidden help (fixtures, placeholder rewriting, "your code" stand-ins) only for a block whose
    first line says ``# Fragment:``; an unmarked block sees only what the page's blocks defined."""
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-test: setup=openai -->\n```python\nx = 1\n```\n\n"  # hidden set-up, unmarked
        "```python\nprint(MyTools)\n```\n\n"  # a stand-in, unmarked: NameError
        "```python\nimport os\nprint(os.environ.get('ANTHROPIC_BASE_URL'))\n```\n\n"
        "<!-- docs-test: setup=cma -->\n"
        "```python\n# Fragment: needs a key\n"
        "client_seen = (await client.list_agents()).unwrap() is not None\n"
        "import os\nbase = os.environ['ANTHROPIC_BASE_URL']\n```\n\n"
        "```python\nimport os\nprint(client_seen, os.environ.get('ANTHROPIC_BASE_URL'))\n```\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs_harness", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_child_env(),
        cwd=ROOT,
    )
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["status"] for r in reports] == ["fail", "fail", "ok", "ok", "ok"], reports
    assert "# Fragment" in reports[0]["detail"]
    assert "NameError" in reports[1]["detail"]
    # The fragment's environment is set while it runs and undone after: the next block is clean.
    assert reports[2]["output"] == "None\n" and reports[4]["output"] == "True None\n"


def test_every_fragment_in_the_docs_says_what_it_needs() -> None:
    for page in PAGES:
        for block in blocks(page):
            if block.fragment:
                first = block.code.lstrip().split("\n", 1)[0]
                assert len(first) > len("# Fragment: ") + 10, f"{page.name}:{block.line}: say what it needs"
