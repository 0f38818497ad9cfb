"""P-8 on Local: there is nothing remote to create, and ``provision``/``teardown`` say so.

The reference's Local ``provision`` returns the spec unchanged and ``teardown`` is ``:ok``.
rma's ``rma_shell.provisioning.provision``/``teardown`` answer ``Unsupported`` naming the
provider instead (docs/behaviors-status.md, P-8): a handle that provisions nothing would be
passed to ``run`` as if it meant something.
"""

from __future__ import annotations

from rma.errors import Unsupported
from rma.provisioning.spec import AgentSpec
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision, teardown


async def test_P8_decision_local_provision_and_teardown_are_unsupported_not_identity() -> None:
    provider = Local(base_url="http://127.0.0.1:9", model="m")
    spec = AgentSpec.create("bot", system_prompt="hi", model_config="m").unwrap()
    made = (await provision(provider, spec)).failure()
    released = (await teardown(provider, spec)).failure()
    assert isinstance(made, Unsupported) and made.operation == "provision on Local"
    assert isinstance(released, Unsupported) and released.operation == "teardown on Local"
