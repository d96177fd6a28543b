"""Every SGLang flag the twin accepts exists in the pinned SGLang's own ServerArgs CLI, spelt,
shaped and named alike (issue 17): a campaign proven on twins must pass a real node's preflight.

The twin's own flags (``--twin-*`` and the few listed below) are left out explicitly, and that
list is checked too: each entry is the twin's and none is SGLang's. SGLang is the version the
Makefile pins (`make test` installs it); its parser is built once for the module (~9 s).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.twin.args import TWIN_ONLY, build_parser
from experiments.twin.cli import main as twin_main

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parent.parent
# The twin's flags that are not `--twin-*` and that SGLang does not have (`--engine`: what
# decides the corruption, experiments/twin/engine.py).
TWIN_FLAGS = frozenset({"--fault-model", "--schema", "--engine"})


def twin_only(option: str) -> bool:
    return option.startswith("--twin-") or option in TWIN_FLAGS


@pytest.fixture(scope="module")
def sglang() -> Iterator[dict[str, argparse.Action]]:
    """SGLang's launch_server options, each with its action."""
    import sglang as package
    from sglang.srt.server_args import ServerArgs

    pinned = re.search(r"^SGLANG_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert pinned and package.__version__ == pinned[1], (package.__version__, pinned)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    yield {option: action for action in parser._actions for option in action.option_strings}


def twin_actions() -> dict[str, argparse.Action]:
    return {option: action for action in build_parser()._actions
            for option in action.option_strings}


def test_every_sglang_flag_of_the_twin_is_in_sglangs_server_args(
        sglang: dict[str, argparse.Action]) -> None:
    missing = sorted(option for option in twin_actions()
                     if not twin_only(option) and option not in sglang)
    assert not missing, f"the twin accepts flags SGLang does not: {missing}"


def test_each_shared_flag_has_sglangs_shape_and_name(sglang: dict[str, argparse.Action]) -> None:
    """Same destination (a ServerArgs field: the twin's server_args and fault conditions use
    it), a switch where SGLang has a switch, and no choice SGLang would refuse."""
    wrong = []
    for option, action in twin_actions().items():
        if twin_only(option) or option in ("-h", "--help"):
            continue
        real = sglang[option]
        if action.dest != real.dest:
            wrong.append(f"{option}: dest {action.dest}, SGLang's {real.dest}")
        if (action.nargs == 0) != (real.nargs == 0):
            wrong.append(f"{option}: switch {action.nargs == 0}, SGLang's {real.nargs == 0}")
        if action.choices is not None and real.choices is not None and \
                not set(action.choices) <= set(real.choices):
            wrong.append(f"{option}: choices {sorted(set(action.choices) - set(real.choices))} "
                         "are not SGLang's")
    assert not wrong, wrong


def test_the_twin_only_list_is_the_twins_and_not_sglangs(
        sglang: dict[str, argparse.Action]) -> None:
    twin = twin_actions()
    own = {option for option in twin if twin_only(option)}
    assert own >= TWIN_FLAGS, sorted(TWIN_FLAGS - own)  # no stale entry
    assert not own & set(sglang), sorted(own & set(sglang))
    assert any(option.startswith("--twin-") for option in own)
    # The same set, by destination, is what server_args leaves out of the ServerArgs line.
    assert {twin[option].dest for option in own} == set(TWIN_ONLY)


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
