from rma_shell.cli import main

raise SystemExit(main())
