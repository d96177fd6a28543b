"""The tiers' collection (tests/support/tiers.py): which modules ``-m pure`` leaves unimported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import only_real

pytestmark = pytest.mark.pure

TESTS = Path(__file__).resolve().parent


def module(tmp_path: Path, text: str, name: str = "test_x.py") -> Path:
    path = tmp_path / name
    path.write_text(f"import pytest\n\n{text}\n\ndef test_a() -> None:\n    pass\n")
    return path


def test_only_a_module_marked_real_at_its_top_is_left_out_and_only_under_m_pure(
        tmp_path: Path) -> None:
    real = module(tmp_path, "pytestmark = pytest.mark.real")
    assert only_real(real, "pure")
    assert not only_real(real, "real") and not only_real(real, "pure and not slow")
    assert not only_real(real, "")
    assert not only_real(module(tmp_path, "pytestmark = pytest.mark.pure"), "pure")
    mixed = module(tmp_path, "class TestX:\n    pytestmark = pytest.mark.real")
    assert not only_real(mixed, "pure")  # a class's mark is not the module's
    assert not only_real(module(tmp_path, "pytestmark = pytest.mark.real", "helper.py"), "pure")


def test_no_module_left_out_holds_a_test_marked_pure() -> None:
    """What ``-m pure`` leaves unimported has no pure test to lose (a run of every test would
    refuse one as marked both, but ``-m pure`` alone would never see it)."""
    left_out = [path for path in sorted(TESTS.glob("test_*.py")) if only_real(path, "pure")]
    assert left_out  # the real tier's modules
    assert [path.name for path in left_out if "mark.pure" in path.read_text()] == []
