"""Calibration benchmark: is the confidence a verdict states honest? (git-bayesect's habit.)

Commit posterior: a simulated commit range (first bad commit at a random index, a failure rate
before it and another from it on, 80 sessions a trial) is bisected by the ``commits`` strategy
on the driver's own loop with one pool (bench/simulated.py: the store, the verdict as `bisect
verdict` recomputes it). The verdict states a probability for the commit it names
(``commits.posterior``: the posterior mass of the named commit, or of a skipped run; the reason
says "first bad commit: abc123 'subject' (author), posterior 0.973"). Over many seeds, a
verdict stated at p should be wrong about 1 - p of the time: verdicts are binned by stated
probability and each bin's observed wrong rate is given with its Wilson interval. At every step
of every run, the reliability check compares the posterior's largest mass with how often that
commit is the true one.

Adaptive (calibration_adaptive.py): a verdict names culprits after sequential tests at
alpha = 0.01 and gives each a p-value; it states no probability of its own. Over the strategy
benchmark's scenarios (bench/scenarios.py, the adaptive contender of bench/contenders.py), how
often is a named culprit set wrong, against the 1 - alpha such a test promises for each of its
answers? And its report states a word for the culprits it names ("strong", "clear" or "weak",
from the clustered p and the trials taken as units): every verdict naming a culprit set is
binned by the word its report states (built by the report's own code,
orchestrator/reports/campaign/build.py), with how often a verdict stated so names exactly the
planted set.

Trials draw the noise between trials (bench/noise.py) of ``--trial-noise``: ``real`` (the
default: a restart halves or doubles a rate at one sd, pools apart, a drift) or ``iid`` (every
trial of a commit or variant drawn from one rate, as before issue 27).

    .venv/bin/python -m bench.calibration [--seeds 200] [--sizes 16,64,256]
        [--noise 0-10,2-8,0-3] [--adaptive-seeds 50] [--workers 2] [--json out.json]
        [--trial-noise real|iid]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.calibration_adaptive import adaptive_runs, words_overall
from bench.calibration_figures import binned, rate
from bench.noise import NOISES, REAL_WORLD, TrialNoise
from bench.scenarios import COST, ROUNDS, SESSIONS, Pool
from bench.simulated import SimulatedPools
from db.store import Store
from experiments.campaign import Campaign
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.commits import Commits
from orchestrator.executor.driver import drive
from orchestrator.stored import evidence, verdict_of

# Failure rates before and after the first bad commit: a clean baseline, a noisy one, a faint
# change.
NOISE = {"0-10": (0.0, 0.10), "2-8": (0.02, 0.08), "0-3": (0.0, 0.03)}
SIZES = (16, 64, 256)
BINS = ((0.95, 0.99), (0.99, 1.0))  # [0.95, 0.99) and [0.99, 1]: the last includes 1
RELIABILITY = (0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0)  # bins of the largest mass, every step


@dataclass(frozen=True)
class CommitRun:
    size: int
    noise: str
    seed: int
    first_bad: int  # the true index (0 is the known-good commit)
    status: str
    named: tuple[int, ...]  # the indices the verdict names (a skipped run: several)
    stated: float  # the probability the verdict states for them; the largest mass otherwise
    trials: int
    steps: tuple[tuple[float, bool], ...]  # after each trial: largest mass, is it the truth

    @property
    def wrong(self) -> bool:
        return self.first_bad not in self.named


def _shas(size: int, seed: int) -> list[str]:
    return [hashlib.sha1(f"{seed}/{i}".encode()).hexdigest()[:12] for i in range(size)]


def commit_campaign(shas: Sequence[str]) -> Campaign:
    """A resolved commit range as `bisect commits` stores it, each commit an env level (the
    simulated pool reads only the names), on one pool."""
    return Campaign.model_validate({
        "name": f"calibration: {len(shas)} commits",
        "nodes": [{"name": "local", "transport": "local", "workdir": "/nonexistent"}],
        "pools": [{"name": "pool-1", "endpoint": "http://127.0.0.1:9", "services": [{
            "name": "server-1", "node": "local", "start": ["true"],
            "health_url": "http://127.0.0.1:9/health"}]}],
        "factors": [{"name": "commit", "levels": {sha: {"env": {"COMMIT": sha}}
                                                  for sha in shas}}],
        "workload": {"sessions": SESSIONS, "rounds": ROUNDS, "seed": 1},
        "strategy": {"kind": "commits"},
        "cost": {"restart_s": COST.restart_s, "workload_s": COST.workload_s, "gpus": COST.gpus},
        "commits": {"tree": "/nonexistent", "good": shas[0], "bad": shas[-1],
                    "resolved": list(shas)},
    })


def commit_run(store: Store, size: int, noise: str, seed: int,
               trial_noise: TrialNoise = REAL_WORLD) -> CommitRun:
    """One simulated range bisected on the real loop, to its stored verdict; its trials drawn
    with ``trial_noise`` between them."""
    before, after = NOISE[noise]
    first_bad = random.Random(f"first bad {size} {noise} {seed}").randint(1, size - 1)
    shas = _shas(size, seed)
    index = {sha: i for i, sha in enumerate(shas)}
    pool = Pool(lambda lv: after if index[lv["commit"]] >= first_bad else before,
                seed * 1_000_003 + size, noise=trial_noise)
    campaign_id = f"commits {size} {noise} {seed}"
    campaign = commit_campaign(shas)
    store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"), "bench")
    drive(store, campaign_id, campaign, SimulatedPools(pool))
    verdict = verdict_of(store, campaign_id)
    # The posterior after each trial, in the order they ran, as the strategy computes it (each
    # commit's counts at their design effect): the reliability check.
    search, steps = Commits(shas, sessions=SESSIONS).replay_target, []
    seen = evidence(store.trials(campaign_id), planned=SESSIONS)
    for ran in range(1, len(seen) + 1):
        post = np.asarray(search(seen[:ran]).posterior)
        steps.append((float(post.max()), int(post.argmax()) == first_bad))
    found = verdict.finding_json("commits")
    assert found is not None
    named = tuple(index[sha] for sha in found["first_bad"])
    stated = float(found["posterior"]) if named else steps[-1][0] if steps else 0.0
    return CommitRun(size, noise, seed, first_bad, str(verdict.status), named, stated,
                     len(verdict.trials), tuple(steps))


def _commit_batch(job: tuple[int, str, Sequence[int], TrialNoise]) -> list[CommitRun]:
    size, noise, seeds, trial_noise = job
    with tempfile.TemporaryDirectory(prefix="bisect-calibration-") as folder:
        store = Store.open(str(Path(folder) / "calibration.db"))
        try:
            return [commit_run(store, size, noise, seed, trial_noise) for seed in seeds]
        finally:
            store.close()


def commit_runs(sizes: Iterable[int], noises: Iterable[str], seeds: int,
                workers: int = 1, trial_noise: TrialNoise = REAL_WORLD) -> list[CommitRun]:
    """Every (size, noise) setting, ``seeds`` runs each, split over ``workers`` processes."""
    chunk = max(1, seeds // max(1, 4 * workers))
    jobs = [(size, noise, range(start, min(seeds, start + chunk)), trial_noise)
            for size in sizes for noise in noises for start in range(0, seeds, chunk)]
    if workers <= 1:
        batches = [_commit_batch(job) for job in jobs]
    else:
        with ProcessPoolExecutor(workers) as executor:
            batches = list(executor.map(_commit_batch, jobs))
    return [run for batch in batches for run in batch]


def summary(runs: Sequence[CommitRun]) -> dict[str, Any]:
    """The commit posterior's figures, per setting and over all."""
    def figures(group: Sequence[CommitRun]) -> dict[str, Any]:
        named = [r for r in group if r.status == Status.CULPRIT]
        points = [(r.stated, r.wrong) for r in named]
        steps = [(p, not truth) for r in group for p, truth in r.steps]
        return {
            "runs": len(group), "culprit": len(named),
            "not_reproduced": sum(r.status == Status.NOT_REPRODUCED for r in group),
            "inconclusive": sum(r.status == Status.INCONCLUSIVE for r in group),
            "median_trials": float(np.median([r.trials for r in group])) if group else None,
            "stated_at_least_095": rate(sum(w for p, w in points if p >= 0.95),
                                        sum(p >= 0.95 for p, _ in points)),
            "bins": binned(points, BINS),
            "reliability": binned(steps, list(itertools.pairwise(RELIABILITY))),
        }
    settings = dict.fromkeys((r.size, r.noise) for r in runs)
    return {"overall": figures(runs),
            "settings": [{"size": size, "noise": noise,
                          **figures([r for r in runs if (r.size, r.noise) == (size, noise)])}
                         for size, noise in settings]}


def _pct(figure: dict[str, Any], name: str = "wrong") -> str:
    if not figure["n"]:
        return "–"
    low, high = figure["wilson95"]
    return f"{figure['rate']:.1%} ({figure[name]}/{figure['n']}; {low:.1%}–{high:.1%})"


def _word_rows(scenario: str, words: Sequence[dict[str, Any]], every: bool) -> list[str]:
    """A table row per word (only those stated, unless ``every``)."""
    return [f"| {scenario} | {w['word']} | {w['verdicts']} | {_pct(w['right'], 'right')} | "
            f"{_pct(w['wrong'])} |" for w in words if every or w["verdicts"]]


def tables(result: dict[str, Any]) -> str:
    """The Markdown tables of BENCHMARKS.md."""
    lines = []
    if "commits" in result:
        head = ["commits", "noise", "culprit / not reproduced / inconclusive", "median trials",
                "wrong, stated [0.95, 0.99)", "wrong, stated [0.99, 1]", "wrong, stated ≥ 0.95"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        settings = result["commits"]["settings"] + [
            {"size": "all", "noise": "all", **result["commits"]["overall"]}]
        for s in settings:
            noise = s["noise"] if s["noise"] == "all" else \
                "{:g}% → {:g}%".format(*(100 * r for r in NOISE[s["noise"]]))
            lines.append("| " + " | ".join([
                str(s["size"]), noise,
                f"{s['culprit']} / {s['not_reproduced']} / {s['inconclusive']} of {s['runs']}",
                f"{s['median_trials']:g}", *(_pct(b) for b in s["bins"]),
                _pct(s["stated_at_least_095"])]) + " |")
        lines += ["", "| largest posterior mass, after each trial | steps | mean stated | "
                      "its commit is not the first bad one |", "|---|---|---|---|"]
        for b in result["commits"]["overall"]["reliability"]:
            stated = "–" if b["mean_stated"] is None else f"{b['mean_stated']:.3f}"
            lines.append(f"| [{b['bin'][0]:g}, {b['bin'][1]:g}{']' if b['bin'][1] == 1 else ')'}"
                         f" | {b['n']} | {stated} | {_pct(b)} |")
    if "adaptive" in result:
        lines += ["", "| scenario | seeds | named culprits wrong | \"nothing to blame\" wrong | "
                      "largest stated p |", "|---|---|---|---|---|"]
        for row in result["adaptive"]:
            p = "–" if row["max_p_value"] is None else f"{row['max_p_value']:.2g}"
            lines.append(f"| {row['scenario']} | {row['seeds']} | {_pct(row['named'])} | "
                         f"{_pct(row['nothing_to_blame'])} | {p} |")
    if "adaptive_words" in result:
        lines += ["", "| scenario | stated word | verdicts | right (names exactly the planted "
                      "set) | wrong |", "|---|---|---|---|---|"]
        for row in result["adaptive"]:
            lines += _word_rows(row["scenario"], row["words"], False) or [
                f"| {row['scenario']} | – | 0 | – | – |"]
        overall = result["adaptive_words"]
        lines += _word_rows("all", overall["words"], True)
        lines += ["", "Wrong verdicts stated \"strong\": "
                      f"{_pct(overall['wrong_stated_strong'], 'strong')}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="runs per commit-range setting")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="commit range sizes, comma-separated ('' for none)")
    parser.add_argument("--noise", default=",".join(NOISE),
                        help=f"noise settings, comma-separated, of {', '.join(NOISE)}")
    parser.add_argument("--adaptive-seeds", type=int, default=50,
                        help="seeds per scenario for the adaptive strategy (0: none)")
    parser.add_argument("--scenarios", default="",
                        help="only the scenarios whose name contains one of these (comma)")
    parser.add_argument("--workers", type=int, default=2, help="processes for the commit runs")
    parser.add_argument("--json", default=None)
    parser.add_argument("--trial-noise", choices=list(NOISES), default="real",
                        help="noise between trials (bench/noise.py): real (default) or iid")
    args = parser.parse_args(argv)
    trial_noise = NOISES[args.trial_noise]
    started = time.monotonic()
    result: dict[str, Any] = {}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    noises = [s for s in args.noise.split(",") if s]
    if unknown := set(noises) - set(NOISE):
        parser.error(f"unknown noise setting(s): {', '.join(sorted(unknown))}")
    if sizes and noises and args.seeds:
        runs = commit_runs(sizes, noises, args.seeds, args.workers, trial_noise)
        result["commits"] = summary(runs)
        result["commit_runs"] = [asdict(r) for r in runs]
    if args.adaptive_seeds:
        result["adaptive"] = adaptive_runs(args.adaptive_seeds,
                                           [s for s in args.scenarios.split(",") if s],
                                           trial_noise)
        result["adaptive_words"] = words_overall(result["adaptive"])
    result["trial_noise"] = trial_noise.describe()
    print(f"({args.seeds} seeds per commit setting, {args.adaptive_seeds} per adaptive "
          f"scenario, {trial_noise.describe()}, {time.monotonic() - started:.0f} s)\n")
    print(tables(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
