"""Module paths that moved (issue #22's rooms and one folder per host) still import, warned.

Pins: each old path imports as the *same* module object as its new path (so patching through
either patches one module), with a ``DeprecationWarning`` naming the new path; names below a
moved package follow it; the new host packages export their public classes.
"""

from __future__ import annotations

import importlib
import sys

import pytest

import rma.providers
import rma_shell

MOVED = {
    "rma.providers.claude_managed_agents": "rma.providers.claude.codec",
    "rma.providers.bedrock_agentcore": "rma.providers.agentcore.codec",
    "rma.providers.agentcore_commands": "rma.providers.agentcore.commands",
    "rma.providers.local_conversation": "rma.providers.local.conversation",
    "rma.providers.local_request": "rma.providers.local.request",
    "rma.providers.local_response": "rma.providers.local.response",
    "rma.providers.local_stream": "rma.providers.local.stream",
    "rma_shell.providers.claude_managed_agents": "rma_shell.providers.claude.provider",
    "rma_shell.providers.cma_client": "rma_shell.providers.claude.client",
    "rma_shell.providers.token_file": "rma_shell.providers.claude.token_file",
    "rma_shell.provisioning.claude_managed_agents": "rma_shell.providers.claude.provisioning",
    "rma_shell.providers.bedrock_agentcore": "rma_shell.providers.agentcore.provider",
    "rma_shell.providers.agentcore_client": "rma_shell.providers.agentcore.client",
    "rma_shell.provisioning.agentcore": "rma_shell.providers.agentcore.provisioning",
    "rma_shell.providers.local_pool": "rma_shell.providers.local.pool",
    "rma_shell.provisioning.local": "rma_shell.providers.local.provisioning",
    "rma_shell.testing.cma_emulator": "rma_shell.testing.claude",
    "rma_shell.testing.cma_emulator.faults": "rma_shell.testing.claude.faults",
    "rma_shell.testing.agentcore_emulator": "rma_shell.testing.agentcore",
    "rma_shell.testing.agentcore_emulator.server": "rma_shell.testing.agentcore.server",
    "rma_shell.testing.openai_emulator": "rma_shell.testing.local.emulator",
    "rma_shell.driver": "rma_shell.machinery.driver",
    "rma_shell.lean_http": "rma_shell.transport.lean_http",
    "rma_shell.journal.resuming": "rma_shell.resuming",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_path_imports_the_new_module_with_a_deprecation_warning(old: str, new: str) -> None:
    assert rma.providers and rma_shell  # both install their finders on import
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"import {new}$"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_a_name_never_moved_is_not_answered_by_the_finder() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rma_shell.providers.no_such_host")


def test_each_host_package_exports_its_public_class() -> None:
    from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.providers.local import Local
    from rma_shell.testing import agentcore, claude, cma, local

    assert (Local.__module__, ClaudeManagedAgents.__module__, BedrockAgentCore.__module__) == (
        "rma_shell.providers.local.provider",
        "rma_shell.providers.claude.provider",
        "rma_shell.providers.agentcore.provider",
    )
    assert new_runtime_session_id().startswith("rma-")
    assert cma is claude and claude.CMAEmulator and agentcore.AgentCoreEmulator and local.OpenAIEmulator


def test_the_old_local_codec_names_still_import_from_its_package() -> None:
    from rma.providers.local import CODEC, Conversation, LocalCodec, apply_response, prepare_request

    assert isinstance(CODEC, LocalCodec) and Conversation and apply_response and prepare_request
