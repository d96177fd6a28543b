"""Write the campaign that bisects a real vLLM server on this machine (issue 30).

One pool, one local vLLM (its CPU build, from its own venv) serving the tiny model, restarted
per variant by bisect's process manager. Three factors: a ``patch`` level planting a fault in
the installed vLLM's hermes tool parser (hermes-leak.diff beside this file: a call whose
arguments hold a "7" comes back as content, markup and all), and two real engine flags that
must come out innocent. A patch's ``root`` is absolute, so the file is written per checkout:
``python -m experiments.real_engine.campaign --venv .venv-vllm --model DIR > FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENV = {
    # GiB of KV cache: vLLM's CPU default asks for far more than a 24 GiB machine shared by
    # several processes should give one tiny model.
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def site_packages(venv: Path) -> Path:
    found = sorted(venv.resolve().glob("lib/python3*/site-packages"))
    if not found:
        raise SystemExit(f"{venv}: no lib/python3*/site-packages: run `make real-engine-venv`")
    return found[0]


# vLLM loads the scripted reply (scripted.py) from this checkout: the random model then keeps
# the agent contract, and the stress workload's sessions can come back ``ok``.
SCRIPTED = ("--logits-processors", "experiments.real_engine.scripted:AgentReply")


def workload(kind: str) -> dict[str, Any]:
    """``stress``: the built-in multi-turn sessions, judged by the classifier (the model's
    reply scripted, scripted.py); ``probe``: probe.py's forced calls, for a model of random
    weights left to itself."""
    if kind == "stress":
        # whole replies, not streams: the planted fault sits in the parser's whole-reply path
        return {"sessions": 16, "rounds": 4, "max_concurrency": 8, "timeout_s": 120,
                "stream": False}
    return {"command": ["python3", "-m", "experiments.real_engine.probe"], "cwd": str(ROOT),
            "runs": 4, "timeout_s": 600}


def pools(venv: Path, model: Path, port: int, workdir: str,
          flags: tuple[str, ...] = (), scripted: bool = False) -> dict[str, Any]:
    """The campaign file's ``nodes`` and ``pools``: one local vLLM, its start command ending
    in ``flags`` (a sweep's fixed settings); ``scripted``: its replies the agent contract's."""
    url = f"http://127.0.0.1:{port}"
    start = [
        str(venv.resolve() / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model.resolve()), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", "4096", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        *(SCRIPTED if scripted else ()), *flags,
    ]
    env = {**ENV, "PYTHONPATH": str(ROOT)} if scripted else ENV
    return {
        "nodes": [{"name": "local", "transport": "local", "workdir": workdir}],
        "pools": [{"name": "vllm", "endpoint": url, "services": [{
            "name": "vllm", "node": "local", "start": start, "env": env, "engine": "vllm",
            "health_url": f"{url}/health", "metrics_url": f"{url}/metrics",
            "startup_timeout_s": 600,
        }]}],
    }


def parser_factor(venv: Path) -> dict[str, Any]:
    """``stock`` | ``leaky``: the planted fault, a ``patch`` of the installed vLLM."""
    diff = (HERE / "hermes-leak.diff").read_text(encoding="utf-8")
    return {"name": "parser", "levels": {
        "stock": {},
        "leaky": {"patch": [{"root": str(site_packages(venv)), "diff": diff, "strip": 1}]},
    }}


def campaign(venv: Path, model: Path, port: int, workdir: str, kind: str) -> dict[str, Any]:
    return {
        "name": "real engine: vLLM CPU, a planted hermes parser fault among real flags",
        **pools(venv, model, port, workdir, scripted=kind == "stress"),
        "factors": [
            parser_factor(venv),
            {"name": "max_num_seqs", "levels": {
                "256": {}, "4": {"flags": ["--max-num-seqs", "4"]},
            }},
            {"name": "eager", "levels": {"off": {}, "on": {"flags": ["--enforce-eager"]}}},
        ],
        "workload": workload(kind),
        "strategy": {"kind": "adaptive", "alpha": 0.01},
        "known_good": {"parser": "stock", "max_num_seqs": "256", "eager": "off"},
        "known_bad": {"parser": "leaky", "max_num_seqs": "4", "eager": "on"},
        "cost": {"restart_s": 90, "workload_s": 60, "gpus": 0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--port", type=int, default=39130)
    parser.add_argument("--workdir", default="bisect-real-engine/services")
    parser.add_argument("--workload", choices=["stress", "probe"], default="stress")
    args = parser.parse_args()
    # JSON is YAML: the diff's lines survive as one escaped string.
    json.dump(campaign(args.venv, args.model, args.port, args.workdir,
                       args.workload), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
