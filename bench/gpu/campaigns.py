"""Campaign files of the GPU benchmark, rendered from seed.yaml and hunt.yaml beside this file.

    python bench/gpu/campaigns.py seed --dir D --fix off|on [--engine gpu] [--pools 1]
                                       [--strategy adaptive|factorial]
    python bench/gpu/campaigns.py hunt --dir D [--engine gpu] [--commits 10] [--removed 5]

``seed``: the seed's four factors with the fix switch held off or on (the twin service's
``SGLANG_HICACHE_WAIT_LOAD``). With the fix on, the adaptive strategy ends ``not_reproduced``
(the known-bad variant is clean); ``--strategy factorial`` runs a fraction of resolution IV
(8 variants, without known-good and known-bad) and ends ``no_culprit`` instead.

``hunt``: a git tree ``D/hunt-tree`` whose commit ``--removed`` (of ``--commits``, oldest 0)
deletes the indexer's wait on HiCache's load from the tree's ``nsa_indexer.py``
(experiments/twin/engine.py reads it when the env var is unset), and the ``commits`` campaign over
it. Prints one JSON document: the campaign file, and for the hunt the tree, ``good``, ``bad`` and
``removed_wait`` (the SHA the hunt must name).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from string import Template
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from experiments.campaign import Campaign  # noqa: E402
from experiments.twin.engine import ENGINES, INDEXER_SOURCE  # noqa: E402
from experiments.twin.pool import free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
FRACTION = {"kind": "factorial", "design": "fractional", "resolution": 4, "repeats": 1}

INDEXER_WAITS = '''"""NSA indexer (an excerpt for the twin): the index keys of the tokens."""

import torch


def read_index_k(index_k_buffer, layer_id, load_done):
    # HiCache loads the host copy back layer by layer on its own stream: the read must wait for
    # this layer's copy to land, or it sees the slot's old bytes.
    torch.cuda.current_stream().wait_event(load_done[layer_id])
    return index_k_buffer[layer_id]
'''
INDEXER_NO_WAIT = '''"""NSA indexer (an excerpt for the twin): the index keys of the tokens."""

import torch


def read_index_k(index_k_buffer, layer_id, load_done):
    return index_k_buffer[layer_id]
'''


def render(template: str, workdir: Path, engine: str, pools: int, **values: str) -> dict[str, Any]:
    """The campaign of ``template`` with ``pools`` pools on free loopback ports; paths are
    written as JSON strings (valid YAML whatever they hold), the rest are safe words."""
    text = (HERE / template).read_text(encoding="utf-8")
    quoted = {"python": json.dumps(sys.executable), "workdir": json.dumps(str(workdir)),
              **{key: json.dumps(value) for key, value in values.items() if key == "tree"}}
    plain = {key: value for key, value in values.items() if key != "tree"}
    documents = [yaml.safe_load(Template(text).substitute(
        engine=engine, pool=f"gpu-{index + 1}", port=str(free_port()), **quoted, **plain))
        for index in range(pools)]
    data: dict[str, Any] = documents[0]
    data["pools"] = [each["pools"][0] for each in documents]
    Campaign.model_validate(data)  # a typo stops here, not on the device
    return data


def write(path: Path, data: dict[str, Any], source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(f"# rendered from bench/gpu/{source} by bench/gpu/campaigns.py\n"
                    + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
    return path


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def hunt_tree(tree: Path, commits: int, removed: int) -> list[str]:
    """A fresh tree of ``commits`` commits; commit ``removed`` drops the wait."""
    if tree.exists():
        subprocess.run(["rm", "-rf", "--", str(tree)], check=True)
    tree.mkdir(parents=True, mode=0o700)
    git(tree, "init", "-q", "-b", "main")
    git(tree, "config", "user.email", "hunt@example.invalid")
    git(tree, "config", "user.name", "hunt")
    source = tree / INDEXER_SOURCE
    source.parent.mkdir(parents=True)
    shas = []
    for index in range(commits):
        if index == 0:
            subject = "Indexer: read index-K after HiCache's layer load"
        elif index == removed:
            subject = "Indexer: drop the wait on HiCache's load (the forward syncs anyway)"
        else:
            subject = f"Scheduler: tidy-up {index}"
        source.write_text(INDEXER_WAITS if index < removed else INDEXER_NO_WAIT)
        (tree / "CHANGES").write_text("".join(f"change {i}\n" for i in range(index + 1)))
        git(tree, "add", "-A")
        git(tree, "commit", "-qm", subject)
        shas.append(git(tree, "rev-parse", "HEAD"))
    return shas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    seed = sub.add_parser("seed")
    seed.add_argument("--fix", choices=("off", "on"), required=True)
    seed.add_argument("--strategy", choices=("adaptive", "factorial"), default="adaptive")
    seed.add_argument("--pools", type=int, default=1)
    hunt = sub.add_parser("hunt")
    hunt.add_argument("--commits", type=int, default=10)
    hunt.add_argument("--removed", type=int, default=5)
    for each in (seed, hunt):
        each.add_argument("--dir", type=Path, required=True)
        each.add_argument("--engine", choices=ENGINES, default="gpu")
    ns = parser.parse_args(argv)
    workdir = ns.dir.resolve()
    if ns.what == "seed":
        name = f"seed-fix-{ns.fix}"
        data = render("seed.yaml", workdir / f"{name}-node", ns.engine, ns.pools,
                      wait="1" if ns.fix == "on" else "0")
        if ns.strategy == "factorial":  # every variant judged on its own: no reproduction
            data["strategy"] = FRACTION
            del data["known_good"], data["known_bad"]
            Campaign.model_validate(data)
        path = write(workdir / f"{name}.yaml", data, "seed.yaml")
        print(json.dumps({"campaign": str(path)}))
        return 0
    if not 0 < ns.removed < ns.commits:
        parser.error("--removed must name a commit after the first and within --commits")
    tree = workdir / "hunt-tree"
    shas = hunt_tree(tree, ns.commits, ns.removed)
    data = render("hunt.yaml", workdir / "hunt-node", ns.engine, 1, tree=str(tree))
    data["commits"]["good"], data["commits"]["bad"] = shas[0], shas[-1]
    path = write(workdir / "hunt.yaml", data, "hunt.yaml")
    print(json.dumps({"campaign": str(path), "tree": str(tree), "good": shas[0],
                      "bad": shas[-1], "removed_wait": shas[ns.removed]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
