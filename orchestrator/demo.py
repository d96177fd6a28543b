"""`bisect demo`: the seed investigation, replayed on twin nodes of this machine.

Four factors shaped like the real DeepSeek deployment; a fault model plants the culprit the
engineer eventually found (bf16 index keys AND HiCache, only under concurrency). No GPU needed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from experiments.campaign import Campaign
from experiments.twin.pool import free_port

DEMO_POOLS = 2

FAULT_MODEL: dict[str, Any] = {
    "seed": 2026,
    "rules": [
        {
            # SGLang PR #22811: HiCache's async host→device loads race the indexer's reads
            # of bf16 index keys; it shows only with many requests in flight.
            "name": "bf16-index-k-hicache-race",
            "when": {
                "env": {"BF16_INDEX_K": "1"},
                "flags": {"enable-hierarchical-cache": True},
            },
            "min_inflight": 16,
            "probability": 0.15,
            "effect": "leak",
            "markup": "dsml",
        }
    ],
    "noise": {"probability": 0.003, "effect": "leak"},
}


# Each level names the log line that proves it loaded (the proof step checks them after every
# restart): a healthy server is no proof that the new configuration is the one running.
DEMO_FACTORS: list[dict[str, Any]] = [
    {"name": "index_k", "levels": {
        "fp8": {"env": {"BF16_INDEX_K": "0"},
                "log_markers": ["index_k dtype=fp8 bytes_per_token_per_layer=132"]},
        "bf16": {"env": {"BF16_INDEX_K": "1"},
                 "log_markers": ["index_k dtype=bf16 bytes_per_token_per_layer=256"]},
    }},
    {"name": "hicache", "levels": {
        "off": {"absent_log_markers": ["host memory for hierarchical KV cache"]},
        "on": {"flags": ["--enable-hierarchical-cache", "--hicache-ratio", "2"],
               "log_markers": ["host memory for hierarchical KV cache"]},
    }},
    {"name": "topk_v2", "levels": {
        "off": {"env": {"SGLANG_OPT_USE_TOPK_V2": "0"}},
        "on": {"env": {"SGLANG_OPT_USE_TOPK_V2": "1"}},
    }},
    {"name": "cuda_graph", "levels": {
        "on": {"log_markers": ["Capture cuda graph end"]},
        "off": {"flags": ["--disable-cuda-graph"],
                "absent_log_markers": ["Capture cuda graph end"]},
    }},
]


def twin_pool(name: str, node: str, fault_model: Path, latency_ms: float = 20,
              startup_delay_s: float = 0.0) -> dict[str, Any]:
    """A pool of one combined twin server on a free loopback port, as campaign-file data; its
    /health says 503 for ``startup_delay_s`` after it listens (the demo shows a start-up)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    return {
        "name": name,
        "endpoint": base,
        "services": [{
            "name": f"sglang-{name}",
            "node": node,
            "start": [
                sys.executable, "-m", "experiments.twin", "--port", str(port),
                "--tool-call-parser", "deepseekv32", "--enable-metrics",
                "--fault-model", str(fault_model),
                "--twin-startup-delay", str(startup_delay_s), "--twin-latency-ms", str(latency_ms),
            ],
            "health_url": f"{base}/health",
            "health_generate_url": f"{base}/health_generate",
            "metrics_url": f"{base}/metrics",
            "startup_timeout_s": 60,
            "log_markers": ["The server is fired up and ready to roll!"],
        }],
    }


def demo_campaign(workdir: Path, fault_model: Path) -> Campaign:
    pools = [twin_pool(f"pool-{index + 1}", "local", fault_model, startup_delay_s=0.3)
             for index in range(DEMO_POOLS)]
    return Campaign.model_validate({
        "name": "demo: DeepSeek tool-call leaks under load (twin nodes)",
        "nodes": [{"name": "local", "transport": "local", "workdir": str(workdir / "services")}],
        "pools": pools,
        "factors": DEMO_FACTORS,
        "workload": {"sessions": 80, "rounds": 4, "timeout_s": 30, "seed": 1},
        "strategy": {"kind": "adaptive", "alpha": 0.01},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
        "known_good": {"index_k": "fp8", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"},
        "known_bad": {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"},
    })


def prepare_demo(workdir: Path) -> Campaign:
    """Write the fault model into ``workdir`` and return the demo campaign."""
    if not workdir.exists():  # an existing directory (the user's) keeps its mode
        workdir.mkdir(parents=True)
        workdir.chmod(0o700)  # owner-only whatever the umask: it holds the store and report
    fault_model = workdir / "fault-model.yaml"
    fault_model.write_text(yaml.safe_dump(FAULT_MODEL, sort_keys=False), encoding="utf-8")
    campaign = demo_campaign(workdir, fault_model)
    (workdir / "campaign.yaml").write_text(
        yaml.safe_dump(campaign.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
    )
    return campaign
