"""Pure provider codecs, one module per loop host (see ``rma.provider.ProviderCodec``).

Each module knows its host's input and event vocabulary; none of them does I/O. The
matching transports live in ``rma_shell.providers``.
"""
