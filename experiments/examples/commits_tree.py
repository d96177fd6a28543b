#!/usr/bin/env python3
"""Make the tiny git tree of commits.yaml and run the example on it.

From the repository root: ``python3 experiments/examples/commits_tree.py [bisect run options]``.
It (re)makes ``bisect-examples/commits-tree``: 8 commits of a twin fault model (``faults.yaml``),
clean until the 6th commit ("Load HiCache pages asynchronously"), which makes half the sessions
leak under HiCache. A git tree in a campaign must be an absolute path, so it writes
``bisect-examples/commits.yaml``, commits.yaml with ``commits.tree`` set to the tree's absolute
path, and runs ``bisect run`` on it with the options given here (``--store``, ``--json``, ...);
its exit code is bisect's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOME = Path("bisect-examples")  # relative to the current directory, as the campaign's workdir
TREE = HOME / "commits-tree"
MARK = "BISECT_EXAMPLE_TREE"  # only a tree this script made is ever removed
PLACEHOLDER = "/path/to/bisect-examples/commits-tree"
SUBJECTS = ["Add the scheduler", "Tune the radix cache", "Bump the tokenizer",
            "Refactor the metrics", "Log the batch sizes", "Load HiCache pages asynchronously",
            "Fix a typo in the docs", "Raise the default timeout"]
FIRST_BAD = 5  # the 6th commit


def git(*args: str) -> str:
    command = ["git", "-C", str(TREE), "-c", "user.name=Example Dev",
               "-c", "user.email=dev@example.invalid", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def make_tree() -> None:
    if TREE.exists():
        if not (TREE / MARK).exists():
            sys.exit(f"{TREE}: exists and was not made by this script; move it away")
        shutil.rmtree(TREE)
    HOME.mkdir(mode=0o700, exist_ok=True)
    TREE.mkdir(mode=0o700)
    git("init", "-q", "-b", "main")
    (TREE / MARK).write_text("made by experiments/examples/commits_tree.py\n")
    for index, subject in enumerate(SUBJECTS):
        probability = 0.5 if index >= FIRST_BAD else 0.0
        (TREE / "faults.yaml").write_text(
            "rules:\n  - name: async-hicache-load\n"
            "    when: {flags: {enable-hierarchical-cache: true}}\n"
            f"    probability: {probability}\n    effect: leak\n")
        (TREE / "CHANGES").write_text(f"{index}: {subject}\n")
        git("add", "-A")
        git("commit", "-qm", subject)


def main() -> int:
    make_tree()
    campaign = (HERE / "commits.yaml").read_text(encoding="utf-8")
    if PLACEHOLDER not in campaign:
        sys.exit(f"{HERE / 'commits.yaml'}: no `tree: {PLACEHOLDER}` to fill in")
    written = HOME / "commits.yaml"
    written.write_text(campaign.replace(PLACEHOLDER, str(TREE.resolve())), encoding="utf-8")
    bisect = shutil.which("bisect")
    if bisect is None:
        sys.exit("bisect is not on PATH: `source .venv/bin/activate` first")
    return subprocess.run([bisect, "run", str(written), *sys.argv[1:]], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
