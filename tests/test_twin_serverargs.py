"""Every SGLang flag the twin accepts exists in the pinned SGLang's own ServerArgs CLI, spelt,
shaped and named alike (issue 17): a campaign proven on twins must pass a real node's preflight.

The twin's own flags (``--twin-*`` and the few listed below) are left out explicitly, and that
list is checked too: each entry is the twin's and none is SGLang's. SGLang is the version the
Makefile pins (`make test` installs it); its parser is read once for the module, in a child
process that imports SGLang as a server does (torch and transformers: ~7 s of CPU), which makes
the tests that read it real; the twin's own parser and help are pure.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from experiments.twin.args import TWIN_ONLY, build_parser
from experiments.twin.cli import main as twin_main
from tests.support.sglang_ordinary import ordinary

REPO = Path(__file__).resolve().parent.parent
# The twin's flags that are not `--twin-*` and that SGLang does not have (`--engine`: what
# decides the corruption, experiments/twin/engine.py).
TWIN_FLAGS = frozenset({"--fault-model", "--schema", "--engine"})


def twin_only(option: str) -> bool:
    return option.startswith("--twin-") or option in TWIN_FLAGS


class Option(NamedTuple):
    """One of SGLang's launch_server options, as its action says."""

    dest: str
    switch: bool  # takes no value (nargs 0)
    choices: list[Any] | None


@pytest.fixture(scope="module")
def sglang() -> dict[str, Option]:
    """SGLang's launch_server options (tests/support/sglang_ordinary.py)."""
    said = ordinary("server_args")
    pinned = re.search(r"^SGLANG_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert pinned and said["version"] == pinned[1], (said["version"], pinned)
    return {option: Option(**fields) for option, fields in said["options"].items()}


def twin_actions() -> dict[str, argparse.Action]:
    return {option: action for action in build_parser()._actions
            for option in action.option_strings}


@pytest.mark.real
def test_every_sglang_flag_of_the_twin_is_in_sglangs_server_args(
        sglang: dict[str, Option]) -> None:
    missing = sorted(option for option in twin_actions()
                     if not twin_only(option) and option not in sglang)
    assert not missing, f"the twin accepts flags SGLang does not: {missing}"


@pytest.mark.real
def test_each_shared_flag_has_sglangs_shape_and_name(sglang: dict[str, Option]) -> None:
    """Same destination (a ServerArgs field: the twin's server_args and fault conditions use
    it), a switch where SGLang has a switch, and no choice SGLang would refuse."""
    wrong = []
    for option, action in twin_actions().items():
        if twin_only(option) or option in ("-h", "--help"):
            continue
        real = sglang[option]
        if action.dest != real.dest:
            wrong.append(f"{option}: dest {action.dest}, SGLang's {real.dest}")
        if (action.nargs == 0) != real.switch:
            wrong.append(f"{option}: switch {action.nargs == 0}, SGLang's {real.switch}")
        if action.choices is not None and real.choices is not None and \
                not set(action.choices) <= set(real.choices):
            wrong.append(f"{option}: choices {sorted(set(action.choices) - set(real.choices))} "
                         "are not SGLang's")
    assert not wrong, wrong


@pytest.mark.real
def test_the_twin_only_list_is_the_twins_and_not_sglangs(
        sglang: dict[str, Option]) -> None:
    twin = twin_actions()
    own = {option for option in twin if twin_only(option)}
    assert own >= TWIN_FLAGS, sorted(TWIN_FLAGS - own)  # no stale entry
    assert not own & set(sglang), sorted(own & set(sglang))
    assert any(option.startswith("--twin-") for option in own)
    # The same set, by destination, is what server_args leaves out of the ServerArgs line.
    assert {twin[option].dest for option in own} == set(TWIN_ONLY)


@pytest.mark.pure
def test_help_names_only_flags_the_twin_accepts(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at hyphens, inside flag names
    assert twin_main(["--help"]) == 0
    text = capsys.readouterr().out
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", text))
    accepted = {*twin_actions(), "--router"}  # `--router` is read before parsing (cli.py)
    assert named <= accepted, sorted(named - accepted)
    assert {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill", "--max-running-requests",
            "--chunked-prefill-size", "--mem-fraction-static", "--hicache-ratio"} <= named


@pytest.mark.pure
@pytest.mark.parametrize("argv", [["--cuda-graph-max-bs", "8"], ["--tp", "8"], ["--dp", "2"],
                                  ["--max-running", "8"]])
def test_flags_sglang_0_5_23_lacks_are_refused(argv: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`--cuda-graph-max-bs` was split into -decode and -prefill; `--tp`/`--dp` are no aliases
    of SGLang's (`--tp-size`/`--tensor-parallel-size`); and no abbreviation is taken (one
    unique among the twin's flags may be ambiguous among SGLang's)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err
