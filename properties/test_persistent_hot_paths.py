"""``SeenIds.add_new``, the session machine's dedupe step, against the window model.

``add_new`` is ``add`` fused with the membership test, with an in-place append when the
version is the newest; its versions must behave exactly as ``add``'s, forks included.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from properties.test_persistent import IDS, MAX_VERSIONS, SeenIdsModel, model_add


class SeenIdsAddNewModel(SeenIdsModel):
    """The SeenIds model (its rules and invariants), plus ``add_new`` on any version."""

    @precondition(lambda self: bool(self.versions))
    @rule(i=st.integers(0, MAX_VERSIONS), event_id=st.sampled_from(IDS))
    def add_new(self, i: int, event_id: str) -> None:
        seen, model = self._pick(i)
        added = seen.add_new(event_id)
        if event_id in model[-self.window :]:
            assert added is None, (event_id, model)
            return
        assert added is not None, (event_id, model)
        self._keep(added, model_add(model, self.window, event_id))


SeenIdsAddNewModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestSeenIdsAddNew = SeenIdsAddNewModel.TestCase
