"""The one plug-in point of the reports: a ``Renderer`` turns one family's model into one
format, and the registry finds it by (format, family). A new format is one module per family it
serves and its line in ``FORMATS``; no caller names a renderer.

The families: ``campaign`` (``campaign.model.Report``), ``search`` (the same ``Report`` holding a
search's answer: ``Report.family``), ``sweep`` (``sweep.model.SweepReport``) and ``compare`` (two
campaigns side by side, ``campaign.compare.Comparison``). Each renderer's module is imported on
first use: a Markdown report loads no Jinja."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol


class Renderer(Protocol):
    """One format of one family's model."""

    @property
    def format(self) -> str:
        """As ``--format`` names it."""
        ...

    @property
    def suffix(self) -> str:
        """The suffix of a file in this format."""
        ...

    def render(self, model: Any) -> str:
        ...


@dataclass(frozen=True)
class Writes:
    """A renderer that is one function of the model, given ``options`` (a sweep page's links to
    its hunt's report): every renderer here is one."""

    format: str
    suffix: str
    function: Callable[..., str]
    options: Mapping[str, Any] = field(default_factory=dict)

    def render(self, model: Any) -> str:
        return self.function(model, **self.options)


@dataclass(frozen=True)
class Format:
    name: str
    suffixes: tuple[str, ...]  # the first is written; each one chooses this format for ``-o``
    where: Mapping[str, str]  # the renderer of each family it serves: "module:NAME"


_C, _S, _W = "orchestrator.reports.campaign", "orchestrator.reports.search", \
    "orchestrator.reports.sweep"
JSON = "orchestrator.reports.document:JSON"  # every model says its own JSON (``to_json``)
FORMATS: tuple[Format, ...] = (
    Format("html", (".html", ".htm"), {
        "campaign": f"{_C}.html:HTML", "search": f"{_S}.html:HTML",
        "sweep": f"{_W}.html:HTML", "compare": f"{_C}.compare:HTML"}),
    Format("md", (".md", ".markdown"), {
        "campaign": f"{_C}.markdown:MARKDOWN", "search": f"{_S}.markdown:MARKDOWN",
        "sweep": f"{_W}.markdown:MARKDOWN", "compare": f"{_C}.compare:MARKDOWN"}),
    Format("junit", (".xml",), {
        "campaign": f"{_C}.junit:JUNIT", "search": f"{_S}.junit:JUNIT",
        "sweep": f"{_W}.junit:JUNIT"}),
    Format("json", (".json",), dict.fromkeys(("campaign", "search", "sweep", "compare"), JSON)),
)


class UnknownFormat(ValueError):
    """A format no renderer of the family writes."""


def formats(family: str) -> list[str]:
    """The formats a family is written in, in ``FORMATS``' order."""
    return [f.name for f in FORMATS if family in f.where]


def format_of(suffix: str) -> str | None:
    """The format a file's suffix asks for (``.md``: md), None for one no format claims."""
    return next((f.name for f in FORMATS if suffix.lower() in f.suffixes), None)


def renderer(fmt: str, family: str, **options: Any) -> Renderer:
    """The renderer of ``family`` in ``fmt``, made with ``options`` (a sweep page's links to
    its hunt's report)."""
    where = next((f.where.get(family) for f in FORMATS if f.name == fmt), None)
    if where is None:
        raise UnknownFormat(f"unknown report format {fmt!r}: {', '.join(formats(family))}")
    module, name = where.split(":")
    made: Writes = getattr(importlib.import_module(module), name)
    return replace(made, options=options) if options else made


def render(model: Any, fmt: str, **options: Any) -> str:
    """``model`` (of the family it names: ``model.family``) in ``fmt``."""
    return renderer(fmt, model.family, **options).render(model)
