"""Provisioning flows: managed agents, environments and harnesses as content-addressed entities."""
