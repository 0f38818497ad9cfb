"""The ``rma`` command's entry point: Ctrl-C answered from the first line, imports included.

The ``rma`` console script and ``python -m rma_cli`` start here, in a package that imports
nothing but ``sys`` — not inside ``rma_shell``, whose ``__init__`` loads the library (anyio,
httpx, the core) before any of its modules could run. The CLI (``rma_shell.cli``) is imported
inside the handling, so a Ctrl-C while it loads ends like one later on: one line on stderr
(``rma demo: interrupted``) and exit code 130, never a ``KeyboardInterrupt`` traceback.
``python -m rma_shell`` imports that package first, so its first moment is Python's own.

Not the CLI itself: parsing, commands and the later Ctrl-C handling are ``rma_shell.cli``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

EXIT_INTERRUPTED = 130
"""128 + SIGINT, as ``rma_shell.cli`` returns for a Ctrl-C during a command."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rma`` command line (``sys.argv[1:]`` by default); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from rma_shell.cli import main as cli_main

        return cli_main(args)
    except KeyboardInterrupt:
        # Before the CLI parsed anything (or in the instants around its own handling): the
        # same line it prints, naming the command as argparse will (its first non-option word;
        # the top-level options take no value).
        command = next((a for a in args if not a.startswith("-")), None)
        print(f"rma {command}: interrupted" if command else "rma: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
