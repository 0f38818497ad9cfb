"""Hypothesis properties for the pure core (see ARCHITECTURE.md, ``properties/``)."""
