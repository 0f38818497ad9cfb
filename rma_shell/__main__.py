"""``python -m rma_shell``: the ``rma`` command (``rma_cli``), once this package is imported."""

from rma_cli import main

raise SystemExit(main())
