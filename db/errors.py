"""The store's one error type (and its not-found flavour)."""

from __future__ import annotations


class StoreError(Exception):
    """Any failure of the store, with a sentence a user can read."""


class NotFound(StoreError):
    """The campaign, variant or trial asked for does not exist."""
