"""Local, the shell half: the provider (``provider``: the loop in this process over any
OpenAI-compatible chat endpoint), its connection pool (``pool``) and provisioning, which
creates nothing (``provisioning``).

The pure codec is ``rma.providers.local``; the loopback OpenAI-compatible emulator is
``rma_shell.testing.local``.
"""

from rma_shell.providers.local.provider import Local

__all__ = ["Local"]
