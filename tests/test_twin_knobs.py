"""The twin's numeric SGLang knobs (issue 17): the time model's shapes, numeric fault conditions,
and the same over HTTP on real twins where it is observable without a clock (log lines, cache
counters, outcomes).

The time model is tested on its pure parts: the shapes (a saturation, opposite moves, a slower
batch) are properties of the formulas, not of a machine's timing.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from experiments import agent
from experiments.twin import faults, logs
from experiments.twin.args import build_parser
from experiments.twin.cli import main as twin_main
from experiments.twin.conditions import Condition
from experiments.twin.latency import LatencyModel, PrefixCache, ServerLatency
from tests.support.twins import (
    FAST,
    Procs,
    body,
    builtin_triage,
    is_leak,
    metric,
    opening,
    post_chat,
    start_twins,
)

REPO = Path(__file__).resolve().parent.parent
TRADEOFF = REPO / "experiments" / "twin" / "tradeoff.example.yaml"


def parse(*argv: str) -> Any:
    return build_parser().parse_args(list(argv))


def model(*argv: str) -> LatencyModel:
    ns = parse(*argv)
    return LatencyModel.from_args(ns, logs.capacity(ns, {}).max_total_num_tokens)


def tokens_per_s(lat: LatencyModel, running: int, prompt: int, output: int) -> float:
    """Output tokens/s of a closed loop: ``running`` requests, each a prefill of ``prompt``
    tokens then ``output`` decode steps with every running prompt held in the KV pool."""
    held = running * prompt
    step = lat.decode_step_s(running, 1.0, held_tokens=held)
    return running * output / (lat.prefill_s(prompt, 0, 1.0, held_tokens=held) + output * step)


# --- the time model ----------------------------------------------------------------------------


@pytest.mark.pure
def test_defaults_keep_the_old_time_model() -> None:
    lat = model()
    assert lat.prefill_s(3000, 1000, 1.0) == pytest.approx(0.020 + (2000 + 100) * 5e-6)
    for running in (1, 64, 256):
        assert lat.decode_step_s(running, 1.0, held_tokens=running * 3000,
                                 prefilling_tokens=50_000) == \
            pytest.approx(0.5e-3 * (1 + 0.005 * (running - 1)))
    eager = model("--disable-cuda-graph")
    assert eager.decode_step_s(8, 1.0) == pytest.approx(1.6 * lat.decode_step_s(8, 1.0))
    assert model("--disable-decode-cuda-graph").graph_max_bs_decode == 0


@pytest.mark.pure
def test_throughput_grows_with_running_requests_until_the_kv_pool_saturates() -> None:
    prompt, output = 8000, 200
    lat = model("--mem-fraction-static", "0.62")
    pool = lat.kv_pool_tokens
    assert pool is not None
    saturation = pool // prompt
    assert 16 < saturation < 256
    rates = {n: tokens_per_s(lat, n, prompt, output) for n in range(1, 257)}
    below = [rates[n] for n in range(1, saturation + 1)]
    assert below == sorted(below)  # grows while the running prompts fit the pool
    best = max(rates, key=rates.__getitem__)
    # The optimum lies inside the range, past the pool by what the fixed per-request overhead
    # still amortises, not at its end: past it throughput falls.
    assert saturation <= best <= 3 * saturation
    after = [rates[n] for n in range(best, 257)]
    assert after == sorted(after, reverse=True) and rates[256] < 0.8 * rates[best]
    step = {n: lat.decode_step_s(n, 1.0, held_tokens=n * prompt) for n in (128, 256)}
    assert step[256] > 1.8 * step[128]  # while latency climbs
    # A bigger pool (more of the GPU for it) moves the saturation point up.
    bigger = model("--mem-fraction-static", "0.7")
    assert bigger.kv_pool_tokens is not None and bigger.kv_pool_tokens > 2 * pool
    assert max(tokens_per_s(bigger, n, prompt, output) for n in range(1, 257)) > rates[best]


@pytest.mark.pure
def test_chunked_prefill_trades_ttft_against_itl() -> None:
    prompt = 32_000
    small = model("--chunked-prefill-size", "1024")
    large = model("--chunked-prefill-size", "16384")
    assert large.prefill_s(prompt, 0, 1.0) < small.prefill_s(prompt, 0, 1.0)  # TTFT
    busy = {"held_tokens": 0, "prefilling_tokens": prompt}
    assert large.decode_step_s(32, 1.0, **busy) > small.decode_step_s(32, 1.0, **busy)  # ITL
    # Without prompts being prefilled a decode step costs the same; a prompt within one chunk
    # costs the same prefill.
    assert large.decode_step_s(32, 1.0) == small.decode_step_s(32, 1.0)
    assert large.prefill_s(900, 0, 1.0) == small.prefill_s(900, 0, 1.0)
    whole = model("--chunked-prefill-size", "-1")
    assert whole.prefill_s(prompt, 0, 1.0) == model().prefill_s(prompt, 0, 1.0)
    assert whole.decode_step_s(32, 1.0, **busy) > large.decode_step_s(32, 1.0, **busy)


@pytest.mark.pure
def test_decode_batches_above_the_graph_bound_run_eager() -> None:
    lat = model("--cuda-graph-max-bs-decode", "32")
    assert lat.decode_step_s(32, 1.0) == pytest.approx(model().decode_step_s(32, 1.0))
    assert lat.decode_step_s(33, 1.0) == pytest.approx(1.6 * model().decode_step_s(33, 1.0))
    # SGLang's default on an H200: 256, 512 from tensor parallelism 4, capped at the admission.
    assert model().graph_max_bs_decode == 256
    assert model("--tp-size", "8").graph_max_bs_decode == 512
    assert model("--max-running-requests", "48").graph_max_bs_decode == 48
    assert model("--max-running-requests", "48", "--cuda-graph-max-bs-decode", "16"
                 ).graph_max_bs_decode == 16
    assert model("--disable-cuda-graph", "--cuda-graph-max-bs-decode", "64"
                 ).graph_max_bs_decode == 0


@pytest.mark.pure
def test_prefill_chunks_above_the_prefill_graph_bound_run_eager() -> None:
    base = model("--chunked-prefill-size", "2048")
    graphed = model("--chunked-prefill-size", "2048", "--cuda-graph-max-bs-prefill", "2048")
    capped = model("--chunked-prefill-size", "2048", "--cuda-graph-max-bs-prefill", "1024")
    assert graphed.prefill_s(8192, 0, 1.0) == base.prefill_s(8192, 0, 1.0)
    assert capped.prefill_s(8192, 0, 1.0) > base.prefill_s(8192, 0, 1.0)
    assert capped.prefill_s(1000, 0, 1.0) == base.prefill_s(1000, 0, 1.0)  # one small chunk


def session_hits(cache: PrefixCache, sessions: int, rounds: int, prompt: int) -> int:
    """Round-robin multi-turn sessions whose prompt grows by ``prompt`` tokens a round."""
    for turn in range(1, rounds + 1):
        for session in range(sessions):
            cache.lookup(f"s{session}", turn * prompt)
            cache.store(f"s{session}", turn * prompt)
    return cache.hit_tokens


@pytest.mark.pure
def test_a_larger_hicache_ratio_keeps_more_prefixes() -> None:
    def host_tokens(ratio: str) -> int:
        ns = parse("--enable-hierarchical-cache", "--mem-fraction-static", "0.6",
                   "--hicache-ratio", ratio)
        tokens = logs.capacity(ns, {}).hicache_tokens
        assert tokens is not None
        return tokens

    small, large = host_tokens("0.5"), host_tokens("4")
    assert large == pytest.approx(8 * small, rel=0.01)
    prompt = small // 40  # 64 sessions of 3 rounds: the small pool holds a fraction of them
    hits = {name: session_hits(PrefixCache(True, max_tokens=tokens), 64, 3, prompt)
            for name, tokens in (("small", small), ("large", large))}
    unbounded = session_hits(PrefixCache(True), 64, 3, prompt)
    assert hits["small"] < hits["large"] == unbounded
    assert session_hits(PrefixCache(True, max_tokens=prompt // 2), 4, 3, prompt) == 0
    ns = parse("--enable-hierarchical-cache", "--hicache-size", "10")  # GB, wins over the ratio
    assert logs.capacity(ns, {}).hicache_tokens == int(10e9 / (61 * (656 + 132)))


@pytest.mark.pure
def test_prompts_being_prefilled_expire_with_their_prefill() -> None:
    now = [0.0]
    lat = ServerLatency(model("--chunked-prefill-size", "4096"), lambda: 0, clock=lambda: now[0])
    first = lat.prefill_s(10_000, 2_000, 1.0)
    second = lat.prefill_s(1_000, 0, 1.0)
    assert lat.prefilling_tokens == 9_000 and second < first
    now[0] = second
    assert lat.prefilling_tokens == 8_000
    now[0] = first
    assert lat.prefilling_tokens == 0
    now[0] = 10.0
    assert lat.prefilling_tokens == 0
    # Unmodelled chunking keeps no record at all.
    plain = ServerLatency(model(), lambda: 0, clock=lambda: now[0])
    plain.prefill_s(10_000, 0, 1.0)
    assert plain.prefilling_tokens == 0


# --- numeric fault conditions ------------------------------------------------------------------


def holds(when: dict[str, Any], flags: dict[str, Any] | None = None,
          env: dict[str, str] | None = None) -> bool:
    """Whether the condition ``when`` holds on a server with these flags and env."""
    return Condition.model_validate(when).holds(flags or {}, env or {})


@pytest.mark.pure
@pytest.mark.parametrize(("op", "bound", "true_at", "false_at"), [
    ("gt", 96, [97, 96.5, "128"], [96, 95, None, True, "x"]),
    ("ge", 96, [96, 97], [95.99, None, False]),
    ("lt", 0.85, [0.8, 0], [0.85, 0.9, None]),
    ("le", 0.85, [0.85, 0.5], [0.851, None]),
])
def test_flag_bounds_hold_exactly_at_their_boundaries(op: str, bound: float,
                                                      true_at: list[Any],
                                                      false_at: list[Any]) -> None:
    for value in true_at:
        assert holds({"flags": {"max-running-requests": {op: bound}}},
                     {"max-running-requests": value}), value
    for value in false_at:
        assert not holds({"flags": {"max-running-requests": {op: bound}}},
                         {"max-running-requests": value}), value


@pytest.mark.pure
def test_comparisons_combine_and_mix_with_exact_values() -> None:
    when = {"flags": {"max-running-requests": {"gt": 64, "le": 128},
                      "enable-hierarchical-cache": True,
                      "hicache-ratio": {"in": [2, 4.0]}}}
    flags = {"enable-hierarchical-cache": True, "hicache-ratio": 2.0}
    assert [n for n in (64, 65, 128, 129) if holds(when, {**flags, "max-running-requests": n})
            ] == [65, 128]
    assert not holds(when, {**flags, "max-running-requests": 100, "hicache-ratio": 3.0})
    assert not holds(when, {"max-running-requests": 100, "hicache-ratio": 2.0,
                            "enable-hierarchical-cache": False})
    # Env values are read as numbers by the bounds, as strings by `in` (null: unset).
    env_when = {"env": {"SGLANG_CHUNK": {"ge": 4096}, "MODE": {"in": ["a", None, 3]}}}
    assert holds(env_when, env={"SGLANG_CHUNK": "4096"})
    assert holds(env_when, env={"SGLANG_CHUNK": "8192", "MODE": "3"})
    assert not holds(env_when, env={"SGLANG_CHUNK": "4095"})
    assert not holds(env_when, env={"SGLANG_CHUNK": "lots"})
    assert not holds(env_when, env={"SGLANG_CHUNK": "8192", "MODE": "b"})
    assert not holds(env_when, env={})  # unset: no bound holds
    # On a role of the pool too.
    role = {"prefill": {"flags": {"chunked-prefill-size": {"lt": 4096}}}}
    assert Condition.model_validate(role).holds({}, {}, {"prefill": faults.RoleView(
        {"chunked-prefill-size": 2048}, {})})


@pytest.mark.pure
@pytest.mark.parametrize(("when", "message"), [
    ("flags: {max-running-requests: {gt: many}}",
     "flags.max-running-requests: comparison gt: a bound must be a finite number, not 'many'"),
    ("flags: {max-running-requests: {gt: true}}", "a bound must be a finite number, not True"),
    ("flags: {max-running-requests: {}}", "a comparison needs at least one of gt, ge, lt, le, in"),
    ("flags: {max-running-requests: {above: 3}}", "comparison above: Extra inputs are not "
     "permitted"),
    ("env: {SGLANG_X: {in: 5}}", "env.SGLANG_X: comparison in: Input should be a valid list"),
    ("flags: {max-running-requests: {le: .inf}}", "a bound must be a finite number"),
])
def test_a_bad_comparison_is_a_clear_error_naming_the_field(tmp_path: Path, when: str,
                                                             message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"rules:\n  - name: r\n    probability: 1\n    effect: leak\n"
                    f"    when:\n      {when}\n")
    with pytest.raises(faults.FaultModelError) as caught:
        faults.load(path)
    text = str(caught.value)
    assert text.startswith(f"fault model {path}, line 6, field rules[0].when.")
    assert message in text and "\n" not in text


@pytest.mark.pure
def test_the_cli_exits_2_on_a_bad_comparison(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("rules:\n  - {name: r, probability: 1, effect: leak,\n"
                    "     when: {flags: {max-running-requests: {gt: x}}}}\n")
    assert twin_main(["--fault-model", str(path), "--twin-startup-delay", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: fault model") and "max-running-requests" in err
    assert "Traceback" not in err


@pytest.mark.pure
def test_the_schema_describes_comparisons() -> None:
    document = faults.schema()
    defs = document["$defs"]
    assert {"gt", "ge", "lt", "le", "in"} <= set(defs["FlagCompare"]["properties"])
    assert {"gt", "ge", "lt", "le", "in"} <= set(defs["EnvCompare"]["properties"])
    flags = json.dumps(defs["RoleCondition"]["properties"]["flags"])
    assert "FlagCompare" in flags
    assert "EnvCompare" in json.dumps(defs["RoleCondition"]["properties"]["env"])


@pytest.mark.pure
def test_the_tradeoff_example_plants_corruption_above_96_with_hicache() -> None:
    planted = faults.load(TRADEOFF)
    [rule] = planted.rules

    def hit_rate(**flags: Any) -> float:
        sessions = [f"s{i}" for i in range(400)]
        hits = [faults.decide(planted, twin_seed=0, flags=flags, env={}, inflight=128,
                              session_key=key) for key in sessions]
        return sum(hit is not None for hit in hits) / len(sessions)

    assert rule.when.holds({"enable-hierarchical-cache": True, "max-running-requests": 97}, {})
    assert hit_rate(**{"enable-hierarchical-cache": True, "max-running-requests": 97}) \
        == pytest.approx(0.3, abs=0.07)
    assert hit_rate(**{"enable-hierarchical-cache": True, "max-running-requests": 96}) == 0
    assert hit_rate(**{"enable-hierarchical-cache": False, "max-running-requests": 256}) == 0


# --- on real twins -----------------------------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _triage() -> Iterator[None]:
    with builtin_triage():
        yield


SMALL_POOL = "0.56"  # a KV pool of some 29,000 tokens: a few long prompts fill it
LONG = "a long build log line that the agent pasted into its prompt\n" * 500  # ~7,500 tokens


@pytest.fixture(scope="module")
def knobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Procs]]:
    tmp = tmp_path_factory.mktemp("knobs")
    procs = Procs(tmp)
    slow = ("--twin-latency-ms", "2500", "--twin-prefill-us-per-token", "0",
            "--twin-decode-ms-per-token", "0")
    hicache = (*FAST, "--enable-hierarchical-cache", "--mem-fraction-static", SMALL_POOL)
    specs = [
        ("graphs", [*slow, "--cuda-graph-max-bs-decode", "4"], None),
        ("pool", [*slow, "--mem-fraction-static", SMALL_POOL], None),
        ("host-small", [*hicache, "--hicache-ratio", "0.2"], None),
        ("host-large", [*hicache, "--hicache-ratio", "2"], None),
        ("mrr-96", [*FAST, "--enable-hierarchical-cache", "--max-running-requests", "96",
                    "--fault-model", str(TRADEOFF)], None),
        ("mrr-97", [*FAST, "--enable-hierarchical-cache", "--max-running-requests", "97",
                    "--fault-model", str(TRADEOFF)], None),
    ]
    urls = start_twins(procs, *specs)
    try:
        yield dict(zip([name for name, _, _ in specs], urls, strict=True)), procs
    finally:
        procs.close()


async def concurrently(url: str, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async def one(payload: dict[str, Any]) -> dict[str, Any]:
            async with http.post(f"{url}/v1/chat/completions", json=payload) as response:
                assert response.status == 200, await response.text()
                return dict(await response.json())

        return list(await asyncio.gather(*(one(p) for p in payloads)))


def decode_lines(procs: Procs, name: str) -> list[str]:
    return [line for line in procs.log(name).splitlines() if "Decode batch." in line]


@pytest.mark.real
def test_a_batch_above_the_decode_graph_bound_logs_eager(
        knobs: tuple[dict[str, str], Procs]) -> None:
    urls, procs = knobs
    assert "Capture cuda graph bs [1, 2, 4]" in procs.log("graphs")
    # Each request holds its running slot for 2.5 s: a batch line each second sees all six.
    asyncio.run(concurrently(urls["graphs"], [body(opening(f"g{i}")) for i in range(6)]))
    lines = decode_lines(procs, "graphs")
    assert any("#running-req: 6," in line and "cuda graph: False" in line for line in lines), \
        lines


@pytest.mark.real
def test_prompts_beyond_the_kv_pool_are_retracted(knobs: tuple[dict[str, str], Procs]) -> None:
    urls, procs = knobs
    ns = parse("--mem-fraction-static", SMALL_POOL)
    pool = logs.capacity(ns, {}).max_total_num_tokens
    payloads = [body(opening(f"kv{i}", filler=LONG)) for i in range(6)]
    asyncio.run(concurrently(urls["pool"], payloads))
    retracted = [int(found[1]) for line in decode_lines(procs, "pool")
                 if "#running-req: 6," in line
                 and (found := re.search(r"#retracted-req: (\d+)", line))]
    assert retracted and all(0 < n < 6 for n in retracted), retracted
    assert f"KV Cache is allocated. #tokens: {pool}," in procs.log("pool")


def second_turn(url: str, key: str) -> list[dict[str, Any]]:
    messages = opening(key, "FIRST00001", filler=LONG)
    status, first = post_chat(url, body(messages))
    assert status == 200, first
    reply = first["choices"][0]["message"]
    call = reply["tool_calls"][0]
    return [*messages, reply, {"role": "tool", "tool_call_id": call["id"],
                               "content": agent.tool_result_message("read_file", "S2")}]


@pytest.mark.real
def test_a_larger_host_pool_turns_more_repeated_prefixes_into_hits(
        knobs: tuple[dict[str, str], Procs]) -> None:
    urls, _ = knobs
    cached = {}
    for name in ("host-small", "host-large"):
        url = urls[name]
        seconds = [second_turn(url, f"{name}-{i}") for i in range(4)]  # all first turns first
        for messages in seconds:
            assert post_chat(url, body(messages))[0] == 200
        cached[name] = metric(url, "sglang:cached_tokens_total")
    # The small host pool (0.2 x ~29,000 tokens) holds no session's ~7,500-token prefix past
    # the next session's; the large one (2x) holds all four.
    assert cached["host-small"] < cached["host-large"]
    assert cached["host-large"] > 4 * 7000


@pytest.mark.real
def test_numeric_fault_rule_over_http_from_the_tradeoff_example(
        knobs: tuple[dict[str, str], Procs]) -> None:
    urls, _ = knobs
    payloads = [body(opening(f"trade-{i}")) for i in range(24)]
    above = asyncio.run(concurrently(urls["mrr-97"], payloads))
    at = asyncio.run(concurrently(urls["mrr-96"], payloads))
    assert 0 < sum(is_leak(answer) for answer in above) < 24
    assert not any(is_leak(answer) for answer in at)
