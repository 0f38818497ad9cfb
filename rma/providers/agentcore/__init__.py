"""Bedrock AgentCore Harness, the pure half: ``codec`` (invoke inputs, stream frames,
normalization) and ``commands`` (runtime command streams and storage scripts).

The transport, client and provisioning are in ``rma_shell.providers.agentcore``; the loopback
emulator is ``rma_shell.testing.agentcore``.
"""

from rma.providers.agentcore.codec import CODEC, BedrockAgentCoreCodec

__all__ = ["CODEC", "BedrockAgentCoreCodec"]
