"""``python -m rma_cli``: the ``rma`` command, as the console script runs it."""

from rma_cli import main

raise SystemExit(main())
