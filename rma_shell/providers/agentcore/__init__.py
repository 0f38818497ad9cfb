"""Bedrock AgentCore Harness, the shell half: the provider (``provider``: a SigV4-signed
streaming invoke per turn), its HTTP client (``client``) and provisioning of harnesses
(``provisioning``).

The pure codec is ``rma.providers.agentcore``; the loopback emulator is
``rma_shell.testing.agentcore``.
"""

from rma_shell.providers.agentcore.provider import BedrockAgentCore, new_runtime_session_id

__all__ = ["BedrockAgentCore", "new_runtime_session_id"]
