"""Noise between trials in the twin's fault model (issue 27): a multiplier of every rate and of
the speed drawn at each start, per-node offsets, a drift with wall time. Pure parts first (the
draws, their spread, the clock injected), then real twins: two starts draw apart, the log and
/get_server_info say what was drawn, the sessions are the simulation's at that rate, a PD decode
deciding with its prefill's model uses the prefill's draw, the schema refuses bad values."""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from experiments.twin import faults, variation
from experiments.twin.latency import LatencyModel, ServerLatency
from experiments.twin.simulate import server_view, session_outcomes
from experiments.twin.variation import Drift, RestartNoise, Variability, Variation
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from tests.support.twins import (
    FAST,
    body,
    get,
    is_leak,
    opening,
    post_chat,
    processes,
    start_pd_pool,
    start_twins,
)

EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def _spec(**noise: Any) -> Variability:
    return faults.Noise.model_validate(noise)


def _starts(spec: Variability, count: int, seed: int = 1) -> list[Variation]:
    """``count`` starts, their "urandom" a seeded stream (each start still its own draw)."""
    source = random.Random(seed)
    drawn = [variation.start(spec, twin_seed=0, node="n", urandom=source.randbytes)
             for _ in range(count)]
    assert all(v is not None for v in drawn)
    return [v for v in drawn if v is not None]


# --- pure parts ---------------------------------------------------------------------------------


@pytest.mark.pure
def test_a_fault_model_without_noise_between_trials_is_todays_twin() -> None:
    rules = [{"name": "r", "probability": 0.2, "effect": "leak"}]
    for noise in (None, {"probability": 0.05, "effect": "no_tool"}, {"seed": 3}):
        model = faults.FaultModel.model_validate({"seed": 4, "rules": rules, "noise": noise})
        assert variation.start(model.noise, twin_seed=0, node="n") is None
        for key in (f"s{i}" for i in range(300)):
            kwargs: dict[str, Any] = {"twin_seed": 0, "flags": {}, "env": {}, "inflight": 1,
                                      "session_key": key}
            assert faults.decide(model, **kwargs) == faults.decide(model, **kwargs,
                                                                   rate_scale=1.0)
    assert variation.rate_now(None, 0.0) == variation.speed_now(None, 0.0) == 1.0
    # the time model without a speed, or with speed 1, is the one it always was
    timing = LatencyModel(0.02, 5e-6, 5e-4, 0.005, 1.6, 0.1, 256)
    plain = ServerLatency(timing, lambda: 0)
    unit = ServerLatency(timing, lambda: 0, speed=lambda: 1.0)
    assert plain.prefill_s(1000, 100, 1.03) == unit.prefill_s(1000, 100, 1.03)
    assert plain.decode_step_s(8, 0.97) == unit.decode_step_s(8, 0.97)
    assert plain.base_s == unit.base_s == 0.02


@pytest.mark.pure
def test_restart_multipliers_have_the_spread_the_file_sets() -> None:
    spec = _spec(restart={"rate_spread": 0.7, "speed_spread": 0.2})
    drawn = _starts(spec, 4000)
    rates = [math.log(v.restart_rate) for v in drawn]
    speeds = [math.log(v.restart_speed) for v in drawn]
    assert statistics.stdev(rates) == pytest.approx(0.7, abs=0.04)
    assert statistics.stdev(speeds) == pytest.approx(0.2, abs=0.015)
    # mean 1: the file's probability stays the rate averaged over restarts
    assert statistics.fmean(math.exp(r) for r in rates) == pytest.approx(1.0, abs=0.05)
    assert statistics.fmean(math.exp(s) for s in speeds) == pytest.approx(1.0, abs=0.02)
    # "halves or doubles": about a third of the starts land beyond x0.5..x2 of the median
    median = statistics.median(rates)
    beyond = sum(abs(r - median) > math.log(2) for r in rates) / len(rates)
    assert 0.25 < beyond < 0.40
    # every start its own draw: urandom gives each a new source
    assert len({v.seed for v in drawn}) == len(drawn)
    assert all(v.source == "urandom" for v in drawn)
    # a zero spread draws exactly 1
    flat = _starts(_spec(restart={"rate_spread": 0.0, "speed_spread": 0.3}), 5)
    assert {v.restart_rate for v in flat} == {1.0} and len({v.restart_speed for v in flat}) == 5


@pytest.mark.pure
def test_a_seed_in_the_file_makes_the_start_reproducible() -> None:
    spec = _spec(seed=12, restart={"rate_spread": 0.7})
    one = variation.start(spec, twin_seed=0, node="n")
    again = variation.start(spec, twin_seed=0, node="n")
    other = variation.start(spec, twin_seed=1, node="n")
    assert one is not None and again is not None and other is not None
    assert one == again and one.source == "noise.seed"
    assert other.restart_rate != one.restart_rate  # --twin-seed joins the source


@pytest.mark.pure
def test_node_offsets_apply_to_the_node_the_twin_is_told() -> None:
    spec = _spec(seed=1, restart={"rate_spread": 0.5},
                 node={"gpu-a": {"rate": 2.0, "speed": 0.5}, "gpu-b": {"speed": 1.25}})
    a = variation.start(spec, twin_seed=0, node="gpu-a")
    b = variation.start(spec, twin_seed=0, node="gpu-b")
    elsewhere = variation.start(spec, twin_seed=0, node="gpu-z")
    assert a is not None and b is not None and elsewhere is not None
    assert a.rate(0) == pytest.approx(2.0 * a.restart_rate)
    assert a.speed(0) == pytest.approx(0.5 * a.restart_speed)
    assert b.rate(0) == b.restart_rate and b.speed(0) == pytest.approx(1.25)
    assert (elsewhere.node_rate, elsewhere.node_speed) == (1.0, 1.0)
    # a node offset alone varies the twin too: its start is reported
    assert variation.start(_spec(node={"gpu-a": {"rate": 3}}), twin_seed=0,
                           node="gpu-a") is not None
    # which node: $BISECT_TWIN_NODE, else the host name
    assert variation.node_name({"BISECT_TWIN_NODE": "gpu-a"}) == "gpu-a"
    assert variation.node_name({}) == socket.gethostname()


@pytest.mark.pure
def test_drift_moves_speed_and_rate_with_wall_time() -> None:
    drift = Drift(since=datetime(2026, 1, 1), speed_per_hour=0.1, rate_per_hour=-0.05)
    assert drift.since.tzinfo is not None  # no zone: UTC
    drawn = Variation(seed=0, source="noise.seed", drift=drift)
    hour = 3600.0
    assert drawn.speed(EPOCH) == 1.0 and drawn.rate(EPOCH) == 1.0
    assert drawn.speed(EPOCH + hour) == pytest.approx(1.1)
    assert drawn.speed(EPOCH + 10 * hour) == pytest.approx(2.0)
    assert drawn.rate(EPOCH + 10 * hour) == pytest.approx(0.5)
    assert drawn.speed(EPOCH + 1000 * hour) == 10.0  # bounded
    assert drawn.rate(EPOCH + 1000 * hour) == 0.1
    assert drawn.speed(EPOCH - 1000 * hour) == 0.1
    # a baseline run and one a day later meet different speeds ...
    assert drawn.speed(EPOCH + 24 * hour) > drawn.speed(EPOCH + hour)
    # ... and the time model reads the speed when it times a request (the clock injected)
    now = [EPOCH + hour]
    model = LatencyModel(0.011, 0.0, 0.001, 0.0, 1.6, 0.1, 256)
    latency = ServerLatency(model, lambda: 0, speed=lambda: drawn.speed(now[0]))
    assert latency.base_s == pytest.approx(0.01)
    assert latency.decode_step_s(1, 1.0) == pytest.approx(0.001 / 1.1)
    now[0] = EPOCH + 10 * hour
    assert latency.base_s == pytest.approx(0.0055)
    assert latency.prefill_s(10, 0, 1.0) == pytest.approx(0.0055)


@pytest.mark.pure
def test_the_multiplier_scales_every_rate_clamped_at_one() -> None:
    model = faults.FaultModel.model_validate({
        "seed": 2, "rules": [{"name": "r", "probability": 0.2, "effect": "leak"}],
        "noise": {"probability": 0.05, "effect": "no_tool"}})

    def shares(scale: float) -> tuple[float, float]:
        decisions = [faults.decide(model, twin_seed=0, flags={}, env={}, inflight=1,
                                   session_key=f"k{i}", rate_scale=scale) for i in range(4000)]
        leak = sum(d is not None and d.rule == "r" for d in decisions) / 4000
        base = sum(d is not None and d.rule == faults.NOISE_RULE for d in decisions) / 4000
        return leak, base

    leak, base = shares(1.0)
    assert leak == pytest.approx(0.2, abs=0.02) and base == pytest.approx(0.04, abs=0.015)
    leak, base = shares(2.0)
    assert leak == pytest.approx(0.4, abs=0.025) and base == pytest.approx(0.06, abs=0.015)
    assert shares(5.0) == (1.0, 0.0)  # 0.2 x 5: every session, the base rate never reached
    # the benchmarks' simulation draws the same way
    view = server_view([], {})
    doubled = session_outcomes(model, view, sessions=400, seed=1, rate_scale=2.0)
    plain = session_outcomes(model, view, sessions=400, seed=1)
    assert sum(o.value != "ok" for o in doubled) > 1.5 * sum(o.value != "ok" for o in plain)


@pytest.mark.pure
def test_a_start_is_reported_and_read_back() -> None:
    drift = Drift(since=datetime(2026, 1, 1, tzinfo=UTC), speed_per_hour=0.01)
    drawn = Variation(7, "urandom", 1.5, 0.9, "gpu-a", 2.0, 1.1, drift)
    doc = json.loads(json.dumps(drawn.as_json(EPOCH + 3600)))
    assert Variation.from_json(doc) == drawn
    assert doc["rate"] == pytest.approx(3.0) and doc["speed"] == pytest.approx(0.9 * 1.1 * 1.01)
    line = drawn.log_line(EPOCH)
    assert line.startswith("Twin noise: start draw rate x1.5 speed x0.9 (source urandom")
    assert "node gpu-a: rate x2 speed x1.1" in line and "drift since 2026-01-01" in line


@pytest.mark.pure
def test_the_schema_describes_the_noise_between_trials() -> None:
    document = faults.schema()
    noise = document["$defs"]["Noise"]["properties"]
    assert {"probability", "per", "seed", "restart", "node", "drift"} <= set(noise)
    assert set(document["$defs"]["RestartNoise"]["properties"]) == {"rate_spread",
                                                                     "speed_spread"}
    assert set(document["$defs"]["NodeOffset"]["properties"]) == {"rate", "speed"}
    assert document["$defs"]["Drift"]["required"] == ["since"]
    good = {"rules": [], "noise": {"seed": 3, "restart": {"rate_spread": 0.69},
                                   "node": {"gpu-a": {"rate": 2}},
                                   "drift": {"since": "2026-01-01T00:00:00Z",
                                             "speed_per_hour": -0.01}}}
    jsonschema.validate(good, document)
    faults.FaultModel.model_validate(good)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"noise": {"restart": {"rate_spread": -1}}}, document)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"noise": {"node": {"a": {"rate": 0}}}}, document)
    assert RestartNoise().rate_spread == 0.0


@pytest.mark.pure
def test_the_examples_noise_section_is_valid_once_uncommented() -> None:
    example = Path(faults.__file__).with_name("faults.example.yaml").read_text()
    head, _, tail = example.partition("  # The noise between trials")
    tail = tail.split("\n", 1)[1]
    uncommented = "\n".join(line.replace("  # ", "  ", 1) for line in tail.splitlines())
    model = faults.FaultModel.model_validate(yaml.safe_load(head + uncommented))
    assert model.noise is not None and model.noise.varies and model.noise.seed == 12
    assert model.noise.node["gpu-a"].rate == 2.0 and model.noise.drift is not None


@pytest.mark.pure
@pytest.mark.parametrize(("noise", "line", "field", "message"), [
    ({"restart": {"rate_spread": -0.5}}, 3, "noise.restart.rate_spread",
     "greater than or equal to 0"),
    ({"restart": {"rate_spread": True}}, 3, "noise.restart.rate_spread", "a number is needed"),
    ({"restart": {"speed_spread": 9}}, 3, "noise.restart.speed_spread", "less than or equal"),
    ({"restart": {"spread": 0.7}}, 3, "noise.restart.spread", "Extra inputs"),
    ({"node": {"gpu-a": {"rate": 0}}}, 4, "noise.node.gpu-a.rate", "greater than 0"),
    ({"node": {"gpu-a": {"hot": 2}}}, 4, "noise.node.gpu-a.hot", "Extra inputs"),
    ({"drift": {"speed_per_hour": 0.1}}, 2, "noise.drift.since", "Field required"),
    ({"drift": {"since": "yesterday"}}, 3, "noise.drift.since", "datetime"),
    ({"drift": {"since": "2026-01-01T00:00:00", "speed_per_hour": ".inf"}}, 4,
     "noise.drift.speed_per_hour", "finite"),
    ({"seed": "lucky"}, 2, "noise.seed", "integer"),
])
def test_bad_noise_names_the_file_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], noise: dict[str, Any], line: int,
        field: str, message: str) -> None:
    from experiments.twin.cli import main

    path = tmp_path / "bad.yaml"
    text = yaml.safe_dump({"noise": noise}, default_flow_style=False, sort_keys=False)
    path.write_text(text.replace("'.inf'", ".inf"))
    assert main(["--fault-model", str(path), "--twin-startup-delay", "0"]) == 2
    err = capsys.readouterr().err
    assert f"fault model {path}, line {line}, field {field}:" in err, err
    assert message in err and len(err.strip().splitlines()) == 1


# --- real twins ---------------------------------------------------------------------------------


def _info(url: str) -> dict[str, Any]:
    return dict(json.loads(get(f"{url}/get_server_info")[1])["twin"])


@pytest.mark.real
def test_two_starts_draw_apart_and_say_so(tmp_path: Path) -> None:
    noisy = tmp_path / "noisy.yaml"
    noisy.write_text(yaml.safe_dump({
        "rules": [{"name": "r", "probability": 0.1, "effect": "leak"}],
        "noise": {"restart": {"rate_spread": 0.7, "speed_spread": 0.2},
                  "node": {"gpu-a": {"rate": 2.0, "speed": 1.5}}}}))
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"rules": [{"name": "r", "probability": 0.1,
                                                "effect": "leak"}]}))
    node = {"BISECT_TWIN_NODE": "gpu-a"}
    with processes(tmp_path) as procs:
        urls = start_twins(procs, ("one", [*FAST, "--fault-model", str(noisy)], node),
                           ("two", [*FAST, "--fault-model", str(noisy)], node),
                           ("other", [*FAST, "--fault-model", str(noisy)],
                            {"BISECT_TWIN_NODE": "gpu-b"}),
                           ("plain", [*FAST, "--fault-model", str(plain)], node))
        one, two, other, bare = (_info(url)["noise"] for url in urls)
        assert one["source"] == two["source"] == "urandom" and one["seed"] != two["seed"]
        assert one["restart"]["rate"] != two["restart"]["rate"]
        assert one["node"] == "gpu-a" and one["node_offset"] == {"rate": 2.0, "speed": 1.5}
        assert one["rate"] == pytest.approx(2.0 * one["restart"]["rate"])
        assert one["speed"] == pytest.approx(1.5 * one["restart"]["speed"])
        assert other["node"] == "gpu-b" and other["node_offset"] == {"rate": 1.0, "speed": 1.0}
        assert bare is None  # no noise between trials: the i.i.d. twin, as before
        for name, drawn in (("one", one), ("two", two)):
            log = procs.log(name)
            assert f"Twin noise: start draw rate x{drawn['restart']['rate']:.4g} " in log
            assert "node gpu-a: rate x2 speed x1.5" in log
            assert log.index("server_args=") < log.index("Twin noise:") < \
                log.index("fired up and ready")
        assert "Twin noise" not in procs.log("plain")
        assert json.loads(get(f"{urls[3]}/get_server_info")[1])["env"]["BISECT_TWIN_NODE"] \
            == "gpu-a"


@pytest.mark.real
def test_sessions_are_drawn_at_the_rate_this_start_drew(tmp_path: Path) -> None:
    model = {"seed": 9, "rules": [{"name": "r", "probability": 0.15, "effect": "leak"}],
             "noise": {"seed": 4, "restart": {"rate_spread": 0.7},
                       "node": {"gpu-a": {"rate": 2.5}}}}
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(model))
    with processes(tmp_path) as procs:
        [url] = start_twins(procs, ("twin", ["--twin-latency-ms", "5", "--fault-model",
                                             str(path)], {"BISECT_TWIN_NODE": "gpu-a"}))
        drawn = _info(url)["noise"]
        assert drawn["source"] == "noise.seed"
        result = asyncio.run(run_stress(url, WorkloadSpec(sessions=60, rounds=1, timeout_s=20),
                                        seed=5))
    over_http = [s.outcome for s in sorted(result.sessions, key=lambda s: s.index)]
    loaded = faults.load(path)
    simulated = session_outcomes(loaded, server_view([], {}), sessions=60, seed=5,
                                 rate_scale=drawn["rate"])
    assert over_http == simulated
    assert simulated != session_outcomes(loaded, server_view([], {}), sessions=60, seed=5)


@pytest.mark.real
def test_the_node_speed_paces_the_time_model(tmp_path: Path) -> None:
    path = tmp_path / "fast-node.yaml"
    path.write_text(yaml.safe_dump({"noise": {"node": {"gpu-a": {"speed": 4.0}}}}))
    timing = ["--twin-latency-ms", "300", "--twin-prefill-us-per-token", "0",
              "--twin-decode-ms-per-token", "0"]
    with processes(tmp_path) as procs:
        slow, fast = start_twins(procs, ("slow", timing, None),
                                 ("fast", [*timing, "--fault-model", str(path)],
                                  {"BISECT_TWIN_NODE": "gpu-a"}))

        def took(url: str) -> float:
            times = []
            for index in range(3):
                started = time.monotonic()
                status, _ = post_chat(url, body(opening(f"t{index}")))
                assert status == 200
                times.append(time.monotonic() - started)
            return statistics.median(times)

        assert took(fast) < 0.6 * took(slow)  # 75 ms against 300 ms, modelled


@pytest.mark.real
def test_a_decode_deciding_with_its_prefills_model_uses_the_prefills_draw(
        tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({
        "rules": [{"name": "always", "probability": 1.0, "effect": "leak"}],
        "noise": {"node": {"cold": {"rate": 1e-9}}}}))
    with processes(tmp_path) as procs:
        pool = start_pd_pool(procs, prefill_args=("--fault-model", str(path)),
                             prefill_env={"BISECT_TWIN_NODE": "cold"})
        for index in range(3):
            status, answer = post_chat(pool.router, body(opening(f"pd{index}")))
            assert status == 200 and not is_leak(answer)
        pool.restart_prefill({"BISECT_TWIN_NODE": "hot"})  # no offset there: every session leaks
        status, answer = post_chat(pool.router, body(opening("pd-hot")))
        assert status == 200 and is_leak(answer)
