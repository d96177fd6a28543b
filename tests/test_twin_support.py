"""No tests, and no helpers: the twin helpers are in tests/support/twins.py.

Kept only because bench/sweep_twins.py, outside tests/, still imports ``FAST`` from here; once it
imports it from tests.support.twins, delete this file.
"""

from __future__ import annotations

from tests.support.twins import FAST

__all__ = ["FAST"]
