"""Reading a campaign file into a ``Campaign`` (experiments/campaign.py holds its schema): the
YAML parsed, validated by pydantic and checked against itself (campaign_checks.py); every
error names the file, the line and the field (``CampaignError``, exit code 2 upstream).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

from pydantic import ValidationError

from experiments.campaign import Campaign, CampaignError
from experiments.campaign_checks import check_references
from experiments.strategy_config import CONFIGS, foreign_field
from experiments.workload.probe import PROBE_KEYS, ProbeSpec, placed
from experiments.workload.spec import WorkloadSpec
from experiments.yaml_lines import (
    LoadedYaml,
    Path_,
    YamlInputError,
    dotted,
    load_yaml,
    read_yaml_text,
    shown,
)


def error_line(err: Any) -> tuple[Path_, str]:
    """Where an error is and what it says, as the file's author wrote it: the union's tag is
    no field of theirs, and a field of another kind says which kinds have it."""
    loc, message = tuple(err["loc"]), err["msg"].replace("Field required", "missing")
    if loc[:1] == ("strategy",) and err["type"] == "union_tag_invalid":
        *rest, last = [f"'{k}'" for k in CONFIGS]
        kinds = f"{', '.join(rest)} or {last}" if rest else last
        return ("strategy", "kind"), f"Input should be {kinds}"
    if loc[:1] == ("strategy",) and len(loc) > 1 and loc[1] in CONFIGS:
        kind, loc = str(loc[1]), ("strategy", *loc[2:])
        if err["type"] == "extra_forbidden" and len(loc) == 2:
            message = foreign_field(kind, str(loc[1])) or message
    if loc[:1] == ("workload",) and len(loc) > 1 and loc[1] in ("stress", "probe"):
        tag, loc = loc[1], ("workload", *loc[2:])  # the union's tag is no field of theirs
        if tag == "probe" and err["type"] == "extra_forbidden" and len(loc) == 2 \
                and loc[1] in WorkloadSpec.model_fields:
            message = (f"a key of the built-in stress workload, not of a probe (`command`), "
                       f"which takes {', '.join(PROBE_KEYS)}")
    return loc, message


def format_problem(loaded: LoadedYaml, path: Path_, message: str) -> str:
    field = dotted(path)
    # One line each, whatever the key or message quotes from the file.
    return shown(f"{loaded.where(path)}: {field + ': ' if field else ''}{message}")


def parse_campaign(loaded: LoadedYaml) -> Campaign:
    if not isinstance(loaded.data, dict):
        found = "an empty document" if loaded.data is None else type(loaded.data).__name__
        raise CampaignError(
            f"{loaded.where(())}: a campaign file must be a YAML mapping (found {found})"
        )
    try:
        campaign = Campaign.model_validate(loaded.data)
    except ValidationError as exc:
        lines = [format_problem(loaded, *error_line(err)) for err in exc.errors()]
        raise CampaignError("\n".join(lines)) from None
    problems = check_references(campaign)
    if problems:
        raise CampaignError("\n".join(format_problem(loaded, path, msg) for path, msg in problems))
    return campaign


class _Read(Protocol):
    """What a file of runs is read into: a campaign or a sweep, each with its workload."""

    workload: Any

    def model_copy(self, *, update: dict[str, Any]) -> Self: ...


Read = TypeVar("Read", bound=_Read)


def load_file(path: str | Path, parse: Callable[[LoadedYaml], Read],
              error: type[ValueError]) -> Read:
    """``path`` read and parsed by ``parse``; every problem raised as ``error`` (the file's
    line and field named), a probe's command placed in the file's directory."""
    try:
        loaded = load_yaml(read_yaml_text(path), str(path))
    except YamlInputError as exc:
        raise error(str(exc)) from None
    read = parse(loaded)
    if isinstance(read.workload, ProbeSpec):  # it runs from the file's directory
        probe, problems = placed(read.workload, Path(path).resolve().parent)
        if problems:
            raise error("\n".join(format_problem(loaded, at, msg) for at, msg in problems))
        read = read.model_copy(update={"workload": probe})
    return read


def load_campaign(path: str | Path) -> Campaign:
    return load_file(path, parse_campaign, CampaignError)
