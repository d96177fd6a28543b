"""The engine seam and the GPU engine's race logic, on the CPU stand-in device (no CUDA here).

The stand-in's copy lands after ``bytes / bandwidth`` of main-stream work (experiments/twin/
standin.py): what the GPU decides by its timing, the stand-in decides by its clock, so the slot
pool, the step, the fix switch, bytes per token, the checksum compare and the markup of a stale
read are tested as they run on the GPU. Real twins over HTTP with ``--engine cpu-standin``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from experiments import agent
from experiments.markup import MarkupFamily, markup_family
from experiments.twin import engine
from experiments.twin.engine import EngineError, EngineSettings, IndexKRead, settings
from experiments.twin.index_k import VALUES, RaceEngine, SlotPool, step, turn_value
from experiments.twin.standin import StandinDevice, standin_device
from tests.support.twins import (
    FAST,
    body,
    is_leak,
    opening,
    post_chat,
    processes,
    start_pd_pool,
    start_twins,
)

HICACHE = ("--enable-hierarchical-cache",)


def config(bf16: bool = True, wait: bool = False, pool_slots: int = 4,
           knobs: Mapping[str, str] | None = None) -> EngineSettings:
    env = {"BF16_INDEX_K": "1" if bf16 else "0", engine.WAIT_ENV: "1" if wait else "0"}
    return settings("cpu-standin", env, None,
                    {engine.POOL_SLOTS_ENV: str(pool_slots), **(knobs or {})})


def read(session: str, round_: int, hicache: bool = True) -> IndexKRead:
    return IndexKRead(rid=f"{session}-{round_}", session=session, round=round_, hicache=hicache)


def run_steps(cfg: EngineSettings, *batches: list[IndexKRead]) -> list[list[engine.ReadResult]]:
    device, pool = StandinDevice(cfg), SlotPool(cfg.pool_slots)
    return [step(device, pool, cfg, batch) for batch in batches]


# Two sessions through one device slot: b evicts a, so a's second turn is reloaded from host.
EVICTING = ([read("a", 1)], [read("b", 1)], [read("a", 2)])


@pytest.mark.pure
def test_bytes_per_token_and_the_slot_follow_bf16_index_k() -> None:
    assert config(bf16=False).bytes_per_token == 132  # 128 B key + 4 B scale
    assert config(bf16=True).bytes_per_token == 256
    assert config(bf16=True, knobs={engine.SLOT_TOKENS_ENV: "1024"}).slot_bytes == 1024 * 256


@pytest.mark.pure
def test_a_lone_reload_races_with_bf16_and_not_with_fp8() -> None:
    # 64K tokens at 50 GB/s: fp8 lands in 173 us, inside the 250 us of attention; bf16 in 336.
    fp8 = run_steps(config(bf16=False, pool_slots=1), *EVICTING)[-1][0]
    bf16 = run_steps(config(bf16=True, pool_slots=1), *EVICTING)[-1][0]
    assert fp8.reloaded and not fp8.stale and fp8.got == fp8.expected
    assert bf16.reloaded and bf16.stale
    # The read saw the landed share of the new bytes and the old rest: a partial sum.
    nbytes = config().slot_bytes
    assert min(VALUES) * nbytes < bf16.got < max(VALUES) * nbytes
    assert bf16.expected % nbytes == 0 and bf16.expected // nbytes in VALUES


@pytest.mark.pure
def test_the_fix_waits_on_the_copy_and_reads_whole_slots() -> None:
    fixed = run_steps(config(bf16=True, wait=True, pool_slots=1), *EVICTING)[-1][0]
    assert fixed.reloaded and not fixed.stale and fixed.got == fixed.expected


@pytest.mark.pure
def test_no_race_without_a_reload() -> None:
    # HiCache off: the evicted prefix is recomputed on the main stream, nothing is loaded.
    off = run_steps(config(pool_slots=1), [read("a", 1, False)], [read("b", 1, False)],
                    [read("a", 2, False)])
    assert [r.reloaded or r.stale for batch in off for r in batch] == [False] * 3
    # Enough slots: the prefix is still on the device; a first turn has nothing to reload.
    kept = run_steps(config(pool_slots=2), *EVICTING)
    assert [r.reloaded or r.stale for batch in kept for r in batch] == [False] * 3


@pytest.mark.pure
def test_a_batch_serialises_its_copies_behind_its_attention() -> None:
    # Two reloads in one step, layer-wise: each session's copy, its own 250 us of attention,
    # its read. bf16's copies (336 us each) are read before they land; fp8's (173 us) are not.
    warm = [[read("a", 1), read("b", 1)], [read("c", 1), read("d", 1)]]
    bf16 = run_steps(config(bf16=True, pool_slots=2), *warm, [read("a", 2), read("b", 2)])[-1]
    assert [(r.reloaded, r.stale) for r in bf16] == [(True, True), (True, True)]
    fp8 = run_steps(config(bf16=False, pool_slots=2), *warm, [read("a", 2), read("b", 2)])[-1]
    assert [(r.reloaded, r.stale) for r in fp8] == [(True, False), (True, False)]
    # A copy starts when the main stream reaches its session: a resident session read first
    # gives it no head start (its read still comes 250 us after it began, before 336).
    warm = [[read("a", 1), read("b", 1), read("c", 1)], [read("d", 1)]]  # d evicts a
    mixed = run_steps(config(bf16=True, pool_slots=3), *warm, [read("b", 2), read("a", 2)])[-1]
    assert [(r.reloaded, r.stale) for r in mixed] == [(False, False), (True, True)]


@pytest.mark.pure
def test_the_pool_evicts_the_least_recently_used_slot_not_pinned() -> None:
    pool = SlotPool(2)
    assert pool.assign("a", set()) == (0, False)
    assert pool.assign("b", set()) == (1, False)
    assert pool.assign("a", set()) == (0, True)  # a is now the most recent
    assert pool.assign("c", set()) == (1, False)  # b was the least recent
    assert pool.assign("b", {1}) == (0, False)  # c's slot is pinned by this step: a goes


@pytest.mark.pure
def test_a_turn_value_never_equals_what_the_slot_holds() -> None:
    for old in (0, *VALUES):
        for round_ in range(1, 30):
            value = turn_value("s", round_, old)
            assert value in VALUES and value != old


@pytest.mark.pure
def test_the_fix_switch_env_then_the_tree(tmp_path: Path) -> None:
    source = tmp_path / engine.INDEXER_SOURCE
    assert engine.wait_for_load({}, None) == (False, f"{engine.WAIT_ENV} unset, no tree")
    assert not engine.wait_for_load({}, tmp_path)[0]  # no indexer source: no wait
    source.parent.mkdir(parents=True)
    source.write_text("def read(ev):\n    torch.cuda.current_stream().wait_event(ev)\n")
    waits, reason = engine.wait_for_load({}, tmp_path)
    assert waits and reason.endswith("waits")
    assert engine.wait_for_load({engine.WAIT_ENV: "0"}, tmp_path) == (
        False, f"{engine.WAIT_ENV}=0")  # the env var wins
    source.write_text("def read(ev):\n    # torch.cuda.current_stream().wait_event(ev)\n")
    assert not engine.wait_for_load({}, tmp_path)[0]  # a commented-out wait is no wait
    outside = tmp_path.parent / f"{tmp_path.name}-outside.py"
    outside.write_text("x.wait_event(ev)\n")
    source.unlink()
    source.symlink_to(outside)  # a symlink out of the tree reads nothing
    assert not engine.wait_for_load({}, tmp_path)[0]
    with pytest.raises(EngineError, match=f"{engine.WAIT_ENV}='yes': write 1"):
        engine.wait_for_load({engine.WAIT_ENV: "yes"}, tmp_path)
    with pytest.raises(EngineError, match=f"{engine.POOL_SLOTS_ENV}='0': a number from 1"):
        settings("gpu", {}, None, {engine.POOL_SLOTS_ENV: "0"})


@pytest.mark.pure
def test_the_planted_engine_reads_nothing(tmp_path: Path) -> None:
    planted = engine.make("planted", {engine.WAIT_ENV: "not even checked"}, tmp_path)
    assert asyncio.run(planted.read(read("a", 2))) == engine.CLEAN


@pytest.mark.pure
def test_the_race_engine_serves_concurrent_reads_from_its_thread() -> None:
    lines: list[str] = []
    racing = RaceEngine("cpu-standin", config(bf16=True, pool_slots=2), standin_device,
                        log=lines.append)

    async def sessions() -> list[engine.ReadResult]:
        async def one(name: str) -> list[engine.ReadResult]:
            return [await racing.read(read(name, r)) for r in (1, 2, 3)]
        done = await asyncio.gather(*(one(f"s{i}") for i in range(8)))
        return [result for each in done for result in each]

    try:
        results = asyncio.run(sessions())
    finally:
        racing.close()
    stats = racing.stats
    assert stats.reads == len(results) == 24 and sum(stats.batch_sizes) == 24
    assert stats.reloads == sum(r.reloaded for r in results) > 0  # 8 sessions, 2 slots
    assert not any(r.reloaded for r in results[::3])  # first turns are computed, not loaded
    assert stats.stale == sum(r.stale for r in results) > 0
    assert lines[0].startswith("Twin engine cpu-standin: CPU stand-in device")
    assert "wait for HiCache load: off (SGLANG_HICACHE_WAIT_LOAD=0)" in lines[0]
    stale_lines = [line for line in lines if "stale index-K read" in line]
    assert len(stale_lines) == stats.stale and "(HiCache load not awaited)" in stale_lines[0]


@pytest.mark.pure
def test_a_device_that_cannot_start_fails_every_read() -> None:
    def broken(_: EngineSettings) -> StandinDevice:
        raise EngineError("no device here")

    lines: list[str] = []
    racing = RaceEngine("gpu", config(), broken, log=lines.append)
    try:
        assert racing.wait_ready(10) == "engine gpu cannot start: no device here"
        with pytest.raises(EngineError, match="no device here"):
            asyncio.run(racing.read(read("a", 1)))
    finally:
        racing.close()
    assert lines == ["Twin engine gpu: engine gpu cannot start: no device here"]


# --- Real twins over HTTP ---------------------------------------------------------------------

STANDIN_ENV = {engine.POOL_SLOTS_ENV: "1"}


def turns(url: str, rounds: int = 2, keys: tuple[str, ...] = ("a", "b")) -> dict[str, list[Any]]:
    """Sessions take turns, one request at a time (``keys`` in order each round): with one
    device slot each turn evicts the other session, so every later turn is reloaded."""
    messages = {key: opening(f"eng-{key}", canary=f"CANARY{key.upper()}01") for key in keys}
    answers: dict[str, list[Any]] = {key: [] for key in keys}
    for round_ in range(rounds):
        for key in keys:
            status, answer = post_chat(url, body(messages[key]))
            assert status == 200, answer
            answers[key].append(answer)
            message = answer["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            messages[key] += [{"role": "assistant", "content": message.get("content"),
                               "tool_calls": calls or None},
                              {"role": "tool", "tool_call_id": calls[0]["id"] if calls else "x",
                               "content": agent.tool_result_message(
                                   "run", f"CANARY{key.upper()}{round_ + 2:02d}")}]
    return answers


@pytest.mark.real
def test_twins_leak_on_a_stale_read_only_with_bf16_hicache_and_no_wait(tmp_path: Path) -> None:
    bf16 = {**STANDIN_ENV, "BF16_INDEX_K": "1"}
    with processes(tmp_path) as procs:
        race, fixed, fp8, cold, planted = start_twins(
            procs,
            ("race", ["--engine", "cpu-standin", *HICACHE, *FAST], bf16),
            ("fixed", ["--engine", "cpu-standin", *HICACHE, *FAST],
             {**bf16, engine.WAIT_ENV: "1"}),
            ("fp8", ["--engine", "cpu-standin", *HICACHE, *FAST],
             {**STANDIN_ENV, "BF16_INDEX_K": "0"}),
            ("cold", ["--engine", "cpu-standin", *FAST], bf16),  # HiCache off
            ("planted", [*HICACHE, *FAST], bf16),
        )
        raced = turns(race)
        for name, url in (("fixed", fixed), ("fp8", fp8), ("cold", cold),
                          ("planted", planted)):
            answers = turns(url)
            assert not any(is_leak(a) for each in answers.values() for a in each), name
        log = procs.log("race")
        fixed_log = procs.log("fixed")
        planted_log = procs.log("planted")
    # First turns are computed; each second turn was reloaded while the other session held the
    # slot, and read before its copy landed: the parser's family of markup, no tool call.
    assert [is_leak(a) for a in raced["a"]] == [False, True]
    assert [is_leak(a) for a in raced["b"]] == [False, True]
    leaked = raced["a"][1]["choices"][0]["message"]["content"]
    assert markup_family(leaked) == MarkupFamily.DSML  # --tool-call-parser deepseekv32
    assert log.count("stale index-K read") == 2
    assert "wait for HiCache load: off (SGLANG_HICACHE_WAIT_LOAD unset" in log
    assert "x 256 B = 16.8 MB, 1 device slots" in log
    assert "wait for HiCache load: on (SGLANG_HICACHE_WAIT_LOAD=1)" in fixed_log
    assert "Twin engine" not in planted_log  # the default engine is today's twin


@pytest.mark.real
def test_the_fix_comes_from_the_twins_tree_when_the_env_is_silent(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    source = tree / engine.INDEXER_SOURCE
    source.parent.mkdir(parents=True)
    source.write_text("def read_index_k(load_done):\n"
                      "    torch.cuda.current_stream().wait_event(load_done)\n")
    env = {**STANDIN_ENV, "BF16_INDEX_K": "1"}
    with processes(tmp_path) as procs:
        [url] = start_twins(procs, ("tree", ["--engine", "cpu-standin", *HICACHE, *FAST,
                                             "--twin-tree", str(tree)], env))
        answers = turns(url)
        log = procs.log("tree")
    assert not any(is_leak(a) for each in answers.values() for a in each)
    assert f"{engine.WAIT_ENV} unset, {source} waits" in log


@pytest.mark.real
def test_a_decode_reads_its_index_keys_with_its_prefills_hicache(tmp_path: Path) -> None:
    env = {**STANDIN_ENV, "BF16_INDEX_K": "1"}
    with processes(tmp_path) as procs:
        pool = start_pd_pool(procs, prefill_args=[*HICACHE, *FAST],
                             decode_args=["--engine", "cpu-standin", *FAST],
                             prefill_env=env, decode_env=env)
        answers = turns(pool.router)
        log = procs.log("decode")
    assert [is_leak(a) for a in answers["a"]] == [False, True]
    assert log.count("stale index-K read") == 2


@pytest.mark.real
def test_the_gpu_engine_without_cuda_answers_500_and_says_why(tmp_path: Path) -> None:
    with processes(tmp_path) as procs:
        [url] = start_twins(procs, ("gpu", ["--engine", "gpu", *FAST], {}))
        status, answer = post_chat(url, body(opening("g")), timeout=120)
        log = procs.log("gpu")
    assert status == 500 and "--engine gpu needs" in answer["message"], answer
    assert "Twin engine gpu: engine gpu cannot start: --engine gpu needs" in log
    assert "Traceback" not in log


@pytest.mark.real
def test_the_gpu_benchmarks_campaigns_render_and_the_hunt_removes_one_wait(
        tmp_path: Path) -> None:
    # bench/gpu/campaigns.py renders what run.sh runs on the device: checked here so that the
    # device's minutes are not spent on a typo (each file is validated as it is written).
    from bench.gpu import campaigns

    for fix, strategy in (("off", "adaptive"), ("on", "factorial")):
        assert campaigns.main(["seed", "--dir", str(tmp_path), "--fix", fix, "--strategy",
                               strategy, "--engine", "cpu-standin"]) == 0
    off = (tmp_path / "seed-fix-off.yaml").read_text()
    on = (tmp_path / "seed-fix-on.yaml").read_text()
    assert "SGLANG_HICACHE_WAIT_LOAD: '0'" in off and "known_bad" in off
    assert "SGLANG_HICACHE_WAIT_LOAD: '1'" in on and "fractional" in on
    assert campaigns.main(["hunt", "--dir", str(tmp_path), "--engine", "gpu"]) == 0
    tree = tmp_path / "hunt-tree"
    shas = campaigns.git(tree, "rev-list", "--reverse", "main").split()
    waits = [engine._WAIT_LINE.search(campaigns.git(
        tree, "show", f"{sha}:{engine.INDEXER_SOURCE}").encode()) is not None for sha in shas]
    assert waits == [True] * 5 + [False] * 5  # commit 5 removed the wait
    hunt = (tmp_path / "hunt.yaml").read_text()
    assert f"good: {shas[0]}" in hunt and f"bad: {shas[-1]}" in hunt and "--twin-tree" in hunt


@pytest.mark.real
@pytest.mark.parametrize(("name", "value"), [("BISECT_TWIN_GPU_POOL_SLOTS", "0"),
                                             ("SGLANG_HICACHE_WAIT_LOAD", "maybe")])
def test_a_bad_engine_setting_is_refused_at_start(name: str, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "experiments.twin", "--engine", "cpu-standin",
                           "--port", "1", "--twin-startup-delay", "0"],
                          env={**os.environ, name: value}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and name in done.stderr
    assert "Traceback" not in done.stderr
