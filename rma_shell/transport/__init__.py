"""Transports: the lean HTTP/1.1 lanes on h11, the httpx clients rma builds (its User-Agent),
and the sliding silence deadline of a stream.

What this is not: any host's API (``rma_shell.providers``), nor the wire codecs (``rma.wire``).
"""
