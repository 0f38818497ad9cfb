"""Moved: resumption lives beside the session entry points, in ``rma_shell.resuming``
(``resume``, ``resume_session``, ``approve``, ``pending_approvals``; all exported by
``rma_shell``). This name keeps old imports working; ``rma_shell.journal`` is the storage.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # Loaded on use, not imported: the journal's storage sits below the session machinery.
    return getattr(importlib.import_module("rma_shell.resuming"), name)
