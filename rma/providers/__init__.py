"""Pure provider codecs, one package per loop host (see ``rma.provider.ProviderCodec``):
``claude``, ``agentcore``, ``local`` — the same three names as ``rma_shell.providers`` and
``rma_shell.testing`` use for the host's transport and emulator; ``scripted`` is the test host.

Each knows its host's input and event vocabulary; none of them does I/O. The modules' paths
before issue #22 (``rma.providers.claude_managed_agents`` …) still import, warned.
"""

from rma._moved import install

install(
    {
        "rma.providers.claude_managed_agents": "rma.providers.claude.codec",
        "rma.providers.bedrock_agentcore": "rma.providers.agentcore.codec",
        "rma.providers.agentcore_commands": "rma.providers.agentcore.commands",
        "rma.providers.local_conversation": "rma.providers.local.conversation",
        "rma.providers.local_request": "rma.providers.local.request",
        "rma.providers.local_response": "rma.providers.local.response",
        "rma.providers.local_stream": "rma.providers.local.stream",
    }
)
