"""The session machine: ``step(state, event) -> (state, commands)`` and its vocabulary."""
