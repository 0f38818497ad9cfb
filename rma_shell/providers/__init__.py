"""Provider transports: each pairs a pure codec from ``rma`` with the I/O it needs."""

from rma_shell.providers.base import OpenRequest, PollOutcome, Provider

__all__ = ["OpenRequest", "PollOutcome", "Provider"]
