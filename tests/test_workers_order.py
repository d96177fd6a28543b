"""The order in which `make test`'s groups go to the workers (tests/support/workers.py): the
groups whose real tests weigh most first, each group's tests kept in their order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.support.workers import heaviest_first

pytestmark = pytest.mark.pure


@dataclass
class Item:
    nodeid: str
    real: bool

    def get_closest_marker(self, name: str) -> object | None:
        return name if (name == "real") == self.real else None


def test_the_groups_of_real_tests_go_first_and_a_group_stays_in_its_order() -> None:
    table = [Item(f"test_table.py::test_{n}", real=False) for n in range(40)]
    lab = [Item(f"test_lab_{n}.py::test_it", real=True) for n in range(3)]
    one = [Item("test_one.py::test_a", real=False), Item("test_one.py::test_b", real=True)]
    named = {t.nodeid: "table" for t in table} | {t.nodeid: "shared:lab" for t in lab} | {
        t.nodeid: "one" for t in one}
    ordered = heaviest_first([*table, lab[0], *one, lab[1], lab[2]], named)
    assert [named[t.nodeid] for t in ordered] == ["shared:lab"] * 3 + ["one"] * 2 + ["table"] * 40
    assert ordered[:3] == lab and ordered[3:5] == one and ordered[5:] == table
