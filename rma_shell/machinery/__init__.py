"""The session machinery: the driver that feeds the core's ``step`` and executes its commands,
its mailbox and task group, live-update fan-out, stopping the host's loop, Ctrl-C.

What this is not: the public entry points (``rma_shell.session``, ``rma_shell.agent``), nor the
hosts (``rma_shell.providers``) or the wire (``rma_shell.transport``).
"""
