"""Hostile campaign files for the loader's property tests (test_hostile_inputs.py) and its
counted fuzz run (bench/fuzz_campaign.py): random bytes, mutated valid campaigns, deep nesting,
alias bombs, tags and out-of-range numbers.

The property: ``load_campaign`` returns a Campaign or raises CampaignError whose every line
starts with the file's name; never another exception, never a hang.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from experiments.campaign import Campaign, CampaignError
from experiments.campaign_load import load_campaign

VALID = """\
name: fuzzed
nodes:
  - name: gpu-a
    workdir: /tmp/bisect-fuzz/services
pools:
  - name: pd
    endpoint: http://127.0.0.1:30000
    services:
      - name: sglang
        node: gpu-a
        start: python -m sglang.launch_server --port 30000
        env: {CUDA_VISIBLE_DEVICES: 0}
        health_url: http://127.0.0.1:30000/health
        startup_timeout_s: 600
factors:
  - name: index_k
    levels:
      fp8: {env: {BF16_INDEX_K: 0}}
      bf16: {env: {BF16_INDEX_K: 1}}
  - name: hicache
    levels:
      off:
      on: {flags: --enable-hierarchical-cache --hicache-ratio 2}
workload: {sessions: 60, rounds: 4, timeout_s: 30, seed: 7}
strategy: {kind: factorial, repeats: 3, alpha: 0.01}
cost: {restart_s: 90, workload_s: 485, gpus: 16}
"""

NUMBERS = ["1e30", "1.0e+30", ".inf", "-.inf", ".nan", "9" * 5000, "1" + "0" * 24, "-1", "0",
           "0x", "0xffffffffffffffffffff", "0o777", "0b", "1:2:3:4:5", "1_000", "1.5", "true",
           "2001-13-45", "2001-12-14", "~", "''"]
TOKENS = ["&a ", "*a", "<<: *a", "!!timestamp ", "!!binary ", "!!set ", "!!omap ", "!!pairs ",
          "!!python/object/apply:os.system ", "!!int ", "!!float ", "!!bool ", "!!str ", "!foo ",
          "! ", "[", "]", "{", "}", "- ", "? ", ": ", ", ", "\t", "'", '"', "\\", "|", ">", "#",
          "%YAML 1.1\n", "---\n", "...\n", "\r", "\r\n", "\u2028", "\x85", "\ufeff", "\0",
          "\x1b[31m", "\x7f", '"\\0"', '"\\x1b"', '"\\ud800"', "\n", "\n  ", "[bold]",
          *NUMBERS]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """The valid campaign with a few insertions, deletions and replacements."""
    text = VALID
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 8))
        piece = draw(st.sampled_from(TOKENS) | st.text(max_size=6))
        text = text[:at] + piece * draw(st.integers(1, 3)) + text[at + cut:]
    return text


@st.composite
def out_of_range(draw: st.DrawFn) -> str:
    """A numeric field of the valid campaign set to an edge or absurd value."""
    field = draw(st.sampled_from(["sessions: 60", "rounds: 4", "timeout_s: 30", "seed: 7",
                                  "repeats: 3", "alpha: 0.01", "restart_s: 90", "gpus: 16",
                                  "startup_timeout_s: 600", "workload_s: 485"]))
    name = field.split(":")[0]
    return VALID.replace(field, f"{name}: {draw(st.sampled_from(NUMBERS))}")


@st.composite
def nested(draw: st.DrawFn) -> str:
    depth = draw(st.integers(1, 3000))
    style = draw(st.sampled_from(["flow-list", "flow-map", "block"]))
    if style == "flow-list":
        inner = "[" * depth + "]" * depth
    elif style == "flow-map":
        inner = "{a: " * depth + "1" + "}" * depth
    else:
        inner = "\n" + "".join(" " * (2 * level) + "- \n" for level in range(min(depth, 400)))
    return VALID.replace("seed: 7}", "seed: 7}\nextra: " + inner, 1)


@st.composite
def alias_bomb(draw: st.DrawFn) -> str:
    """A "billion laughs": each anchor a list of ``fan`` aliases of the one before."""
    levels, fan = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    lines = ["l0: &l0 [" + ", ".join(["lol"] * fan) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]" for i in range(1, levels)]
    where = draw(st.sampled_from(["flags", "log_markers", "pre"]))
    recursive = draw(st.booleans())
    bomb = "&r [*r]" if recursive else f"*l{levels - 1}"
    body = VALID.replace("fp8: {env: {BF16_INDEX_K: 0}}", f"fp8: {{{where}: {bomb}}}")
    return "\n".join(lines) + "\n" + body if not recursive else body


def aliased_factors(count: int) -> str:
    """``count`` factors, each an alias of one whose level runs ``count`` aliases of a
    ``count``-word command: count**3 words once expanded, in a file of a few KiB."""
    words = ", ".join(["w"] * count)
    commands = ", ".join(["*cmd"] * count)
    head = VALID.split("factors:")[0]
    first = (f"  - &f {{name: big, levels: {{x: {{log_markers: &cmd [{words}], "
             f"pre: [{commands}]}}, y: {{}}}}}}\n")
    return head + "factors:\n" + first + "  - *f\n" * (count - 1)


def campaign_texts() -> st.SearchStrategy[str | bytes]:
    return st.one_of(st.binary(max_size=600), st.text(max_size=300), mutated(),
                     out_of_range(), nested(), alias_bomb())


def load_outcome(content: str | bytes, path: Path) -> Campaign | CampaignError:
    """Write ``content`` to ``path`` and load it: a Campaign or the CampaignError it raised;
    an AssertionError when the error's lines do not each start with the file's name. Any other
    exception propagates (a defect)."""
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    try:
        return load_campaign(path)
    except CampaignError as exc:
        lines = str(exc).splitlines()
        assert lines, "an empty error message"
        for line in lines:
            assert line.startswith(f"{path}:"), line
        return exc
