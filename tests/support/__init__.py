"""Helpers shared by tests: fixtures' building blocks, fault tools, guards."""
