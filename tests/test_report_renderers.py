"""The reports' one plug-in point: every (format, family) in the registry names a renderer that
says the format and suffix it is listed under; a model is rendered by its own family's (a
search's report by the search's renderers, never by the campaign's forwarding); the formats the
CLI accepts and the suffixes it reads come from the registry alone."""

from __future__ import annotations

import json

import pytest

from orchestrator.reports.renderer import (
    FORMATS,
    Format,
    UnknownFormat,
    Writes,
    format_of,
    formats,
    render,
    renderer,
)

pytestmark = pytest.mark.pure

FAMILIES = ("campaign", "search", "sweep", "compare")


@pytest.mark.parametrize("listed", FORMATS, ids=lambda f: f.name)
def test_every_renderer_says_the_format_and_suffix_it_is_listed_under(listed: Format) -> None:
    for family in listed.where:
        made = renderer(listed.name, family)
        assert made.format == listed.name
        assert made.suffix == listed.suffixes[0]


def test_options_reach_the_function() -> None:
    made = renderer("html", "sweep", hunt_links={"c1": "hunt-c1.html"})
    assert isinstance(made, Writes) and made.options == {"hunt_links": {"c1": "hunt-c1.html"}}
    assert renderer("html", "sweep") is renderer("html", "sweep")  # no options: the module's


def test_each_family_has_its_formats_and_a_comparison_no_junit() -> None:
    assert formats("campaign") == formats("search") == formats("sweep") == [
        "html", "md", "junit", "json"]
    assert formats("compare") == ["html", "md", "json"]
    with pytest.raises(UnknownFormat, match="unknown report format 'junit': html, md, json"):
        renderer("junit", "compare")


def test_a_suffix_chooses_its_format_in_any_case() -> None:
    assert [format_of(s) for s in (".HTML", ".htm", ".md", ".Markdown", ".xml", ".json",
                                   ".txt", "")] == \
        ["html", "html", "md", "md", "junit", "json", None, None]


def test_a_model_is_rendered_by_its_own_family_s_renderer() -> None:
    class Model:
        family = "sweep"

        def to_json(self) -> dict[str, int]:
            return {"sweep_report_version": 1}

    assert json.loads(render(Model(), "json")) == {"sweep_report_version": 1}
    for family in FAMILIES:
        for fmt in formats(family):
            made = renderer(fmt, family)
            assert isinstance(made, Writes)
            module = made.function.__module__
            owner = "campaign" if family == "compare" else family
            assert module.startswith(f"orchestrator.reports.{owner}.") or fmt == "json", module
