"""Old module paths that still import, as the module at its new place, with a DeprecationWarning.

Issue #22 gave each host one folder per layer (``rma.providers.claude_managed_agents`` became
``rma.providers.claude.codec``); code written against the old paths keeps working, warned. An
old name maps to the *same* module object, so ``monkeypatch.setattr`` through either path patches
the one module. A mapping's key also covers the names below it (``old.sub`` → ``new.sub``).

What it is not: a general import hook; it answers only the names it was given and changes no
module's behaviour (no I/O, no clock: importing and warning only).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Mapping


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(f"rma module {spec.name} moved: import {self.new}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Moved(importlib.abc.MetaPathFinder):
    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    def new_name(self, name: str) -> str | None:
        head, dot, rest = name, "", ""
        while True:
            new = self.moved.get(head)
            if new is not None:
                return new + dot + rest
            cut = head.rfind(".")
            if cut < 0:
                return None
            head, dot, rest = head[:cut], ".", head[cut + 1 :] + dot + rest

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.new_name(name)
        return None if new is None else importlib.machinery.ModuleSpec(name, _Alias(new))


def install(moved: Mapping[str, str]) -> None:
    """Answer each old module name in ``moved`` with the module at its new name."""
    sys.meta_path.insert(0, _Moved(moved))
