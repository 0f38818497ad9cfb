"""Local, the pure half: ``codec`` (the rules, and the names to import from this package), with
the conversation it keeps (``conversation``), what goes out (``request``), what comes back
(``response``) and a streamed reply (``stream``).

The transport and its connection pool are in ``rma_shell.providers.local``; the loopback
OpenAI-compatible emulator is ``rma_shell.testing.local``.
"""

from rma.providers.local.codec import *  # noqa: F403 (the codec's __all__ is this package's)
from rma.providers.local.codec import __all__ as __all__
