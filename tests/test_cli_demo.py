"""The demo through the real console script, once (the run's one demo, from the installed wheel:
tests/support/demo.py), and every command a newcomer runs on its store: strict JSON everywhere
(no NaN), the paths it wrote, the next commands it prints working as printed, ids by prefix and
`last`, a closed pipe."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree

import pytest

from orchestrator.reports.text import share
from tests.support.browser import (
    browser_fixture,  # noqa: F401 - its headless Chromium
    opened,
    overflows,
)
from tests.support.demo import Demo, strict

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.real


def test_the_demo_json_is_strict_and_names_the_paths_it_wrote(demo: Demo) -> None:
    document = demo.document
    assert document["status"] == "culprit"
    assert [c["factors"] for c in document["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    assert document["store"] == str(demo.cwd / "bisect-demo" / "bisect.db")
    assert document["report"] == str(demo.cwd / "bisect-demo" / "report.html")
    assert Path(document["store"]).is_file() and Path(document["report"]).is_file()
    # the Markdown summary and the JUnit file beside the HTML, from the same report model
    assert document["markdown"] == str(demo.cwd / "bisect-demo" / "report.md")
    assert document["junit"] == str(demo.cwd / "bisect-demo" / "report.xml")
    summary = Path(document["markdown"]).read_text()
    assert summary.startswith("**Culprit found:** Corruption follows index\\_k=bf16 AND hicache=on")
    ElementTree.parse(document["junit"])  # well-formed
    # Steps where no test was made say so with null, never NaN.
    known = [s for s in document["log"] if s["answer"].endswith("(known)")]
    assert known and all(s["p_fail"] is None and s["p_pass"] is None for s in known)


def test_the_demo_says_where_its_store_is_and_what_to_run_next(demo: Demo) -> None:
    lines = demo.stderr.splitlines()
    assert "store: bisect-demo/bisect.db" in lines[:3]  # before the first trial
    after = lines.index("next:") + 1
    commands = [shlex.split(line.split("#")[0]) for line in lines[after:after + 3]]
    # The program as it was started: by name where PATH finds it, else by its path.
    program = commands[0][0]
    assert program in ("bisect", demo.program)
    at = [demo.campaign_id, "--store", "bisect-demo/bisect.db"]
    assert commands == [[program, "log", *at], [program, "show", *at],
                        [program, "report", *at, "-o", "bisect-report.html"]]
    # Each works as printed, from where the demo ran (their --json, strict: the next test).
    for argv in commands:
        done = subprocess.run(argv, cwd=demo.cwd, env=demo.env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0 and done.stdout and not done.stderr, done.stderr
    assert (demo.cwd / "bisect-report.html").is_file()


def test_every_reading_command_prints_strict_json(demo: Demo) -> None:
    store = ("--store", "bisect-demo/bisect.db")
    verdict = strict(demo.bisect("verdict", "last", *store, "--json").stdout)
    assert verdict["campaign"] == demo.campaign_id and verdict["status"] == "culprit"
    assert verdict["store"] == demo.document["store"]
    # the culprit measured on its own (alone on known-good's background), in words and JSON
    own = verdict["culprits"][0]["own"]
    assert own["variant_with"] == "cuda_graph=on,hicache=on,index_k=bf16,topk_v2=on"
    kind, counted = next(iter(own["outcomes"].items()))
    assert kind in ("leak", "no_tool", "lost_plot", "bad_args") and counted["with"] > 0
    said = demo.bisect("verdict", "last", *store).stdout
    assert f"alone: {own['rate_with']:.1%} vs {own['rate_without']:.1%}" in said
    assert f"{kind} {counted['with']} vs {counted['without']}" in said
    assert set(verdict["failures"]) == {"corruption", "wedging"}
    trail = strict(demo.bisect("log", demo.campaign_id[:15], *store, "--json").stdout)
    assert trail == demo.document["log"]
    trials = strict(demo.bisect("show", "last", *store, "--json").stdout)
    # every attempt: one that failed and was retried (seen under load) is listed as such
    assert len([t for t in trials if t["status"] == "done"]) == verdict["cost"]["trials"]
    assert all(t["status"] == "failed" and t["error"] for t in trials if t["status"] != "done")
    report = strict(demo.bisect("report", "last", *store, "-o", "again.html", "--json").stdout)
    assert report == {"campaign": demo.campaign_id, "store": demo.document["store"],
                      "report": str(demo.cwd / "again.html")}
    [listed] = strict(demo.bisect("ls", *store, "--json").stdout)
    assert listed["id"] == demo.campaign_id
    assert listed["trials"] == verdict["cost"]["trials"] and isinstance(listed["trials"], int)
    doctor = strict(demo.bisect("doctor", "last", *store, "--json").stdout)
    assert doctor["campaign"] == demo.campaign_id and doctor["healthy"]


def test_ls_and_show_never_cut_an_id_or_a_variant(demo: Demo) -> None:
    store = ("--store", "bisect-demo/bisect.db")
    for columns in ("40", "80", "200"):
        env = {**demo.env, "COLUMNS": columns}
        listed = subprocess.run([demo.program, "ls", *store], cwd=demo.cwd, env=env,
                                capture_output=True, text=True, check=True).stdout
        assert demo.campaign_id in listed and "…" not in listed, listed
        shown = subprocess.run([demo.program, "show", "last", *store], cwd=demo.cwd, env=env,
                               capture_output=True, text=True, check=True).stdout
        assert demo.campaign_id in shown and "…" not in shown, shown
        assert "index_k=bf16" in shown and "hicache=on" in shown


def test_a_closed_pipe_ends_the_command_quietly(demo: Demo) -> None:
    """`bisect ls --json | head -c1`: the reader is gone before the write; exit 141 (128 +
    SIGPIPE, as git), nothing on stderr."""
    for args in (("ls", "--json"), ("show", "last"), ("log", "last", "--json")):
        with subprocess.Popen([demo.program, *args, "--store", "bisect-demo/bisect.db"],
                              cwd=demo.cwd, env=demo.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as run:
            assert run.stdout is not None and run.stderr is not None
            run.stdout.close()  # before bisect has written a byte (it takes ~1 s to start)
            stderr = run.stderr.read().decode()
            assert run.wait(timeout=60) == 141, stderr
        assert stderr == "", stderr


def test_a_reading_command_without_the_demo_s_store_points_to_it(demo: Demo) -> None:
    """The default store is ./bisect.db: a newcomer who forgets --store is told where the
    demo's is, and no empty store is made."""
    env = {k: v for k, v in demo.env.items() if k != "BISECT_STORE"}
    done = subprocess.run([demo.program, "log", "last"], cwd=demo.cwd, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr == (f"error: no store at {demo.cwd / 'bisect.db'} (the demo's store is "
                           "bisect-demo/bisect.db: add --store bisect-demo/bisect.db)\n")
    assert not (demo.cwd / "bisect.db").exists()


def test_the_demo_s_report_adds_up_and_fits_a_laptop(demo: Demo, browser: Browser) -> None:
    """What a serving engineer reads in the demo's report: each rate beside the counts it is
    of, the same in the table, the bars and the compare page (with its ≥ where every trial of
    a variant stopped early); the culprit's counts are its pooled variants' rows, named; what
    it causes counts those very sessions; a trial without a scrape under load draws no line;
    and no table scrolls sideways or overflows at 1280x800."""
    document = strict(demo.bisect("report", "last", "--store", "bisect-demo/bisect.db",
                                  "--format", "json").stdout)
    compared = demo.cwd / "compared.html"
    demo.bisect("report", "last", "--store", "bisect-demo/bisect.db", "--compare", "last",
                "-o", str(compared))
    report = opened(browser, Path(demo.document["report"]))
    page = report.page
    assert overflows(page) == []
    variants = document["variants"]
    cells = page.locator("#variants tbody tr").all()
    bars = page.locator("#chart-rates g.variant text").all_text_contents()[1::2]
    for variant, row in zip(variants, cells, strict=True):
        shown = ("≥ " if variant["lower_bound"] else "") + share(variant["rate"])
        counts = f"{variant['failed']}/{variant['judged']}"
        assert row.get_attribute("data-key") == variant["key"]
        rate = row.locator("td.rate").inner_text()
        assert rate.startswith(f"{shown} {counts}"), (rate, variant)
        assert any(bar.startswith(f"{shown.replace(' ', '')}  {counts}") for bar in bars), bars
    [culprit] = [c for c in document["culprits"] if c["failure"] == "corruption"]
    pooled = [v for v in variants if v["key"] in culprit["variants_with"]]
    assert (sum(v["failed"] for v in pooled), sum(v["judged"] for v in pooled)) == \
        (culprit["failed_with"], culprit["sessions_with"])
    assert sum(culprit["outcomes"].values()) == culprit["failed_with"]  # leaks: 23, not 41
    said = page.locator("#verdict").inner_text()
    assert f"({culprit['failed_with']} of {culprit['sessions_with']})" in said
    assert share(culprit["rate_with"]) in said and share(culprit["rate_without"]) in said
    pooled_text = page.locator("#pooled-corruption-1").inner_text()
    assert f"{culprit['failed_with']} of {culprit['sessions_with']} sessions judged" in pooled_text
    assert f"of {len(pooled)} variant" in pooled_text
    stopped = sum(v["stopped_early"] for v in variants if all(
        v["levels"].get(f) == lvl for f, lvl in culprit["levels"].items()))
    assert culprit["stopped_with"] == stopped and (
        f"{stopped} trial" in pooled_text if stopped else "stopped early" not in pooled_text)
    idle = sum(len({t for t, _ in s["running"] + s["queued"]}) <= 2 for s in document["series"])
    assert page.locator("#chart-series text.no-samples").count() == idle
    assert page.locator("#chart-series polyline").count() == 2 * (len(document["series"]) - idle)
    page.close()
    side = opened(browser, compared)
    assert overflows(side.page) == []
    rows = side.page.locator("table").first.locator("tbody tr").all()
    for variant, row in zip(variants, rows, strict=True):
        rate_a = row.locator("td").nth(3).inner_text()
        assert rate_a == ("≥ " if variant["lower_bound"] else "") + share(variant["rate"])
    side.page.close()
