"""SGLang imported as a server imports it, in a child process of a real test: the whole package,
torch and transformers with it (seconds of CPU and half a gigabyte, which a pure test's process
is spared).

Run as ``python -m tests.support.sglang_ordinary WHAT``; it prints one JSON document:

- ``detectors``: first triage's narrow import of the detectors (sglang_narrow.py), as a
  process that triages does, then ``import sglang`` (the real package, no stand-in left) and
  each detector triage asks imported the ordinary way: its module, name and source file, and
  the calls its one-shot ``detect_and_parse`` returns for every text of tests/corpus_markup.py
  that holds tool-call markup (by the corpus's name);
- ``server_args``: the installed version, and every option of ``launch_server``'s parser
  (``ServerArgs.add_cli_args``): its destination, whether it is a switch, its choices.

``ordinary(WHAT)`` runs it and returns the document.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def ordinary(what: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "tests.support.sglang_ordinary", what],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def tool_texts() -> dict[str, str]:
    """The corpus's texts with tool-call markup (a ``</think>`` alone is none), by name."""
    from experiments.markup import markup_family
    from tests.corpus_markup import CORPUS

    return {n: t for n, t in CORPUS.items() if markup_family(t) not in (None, "think")}


def calls_of(detector: type, tool: type, text: str) -> list[dict[str, Any]]:
    """The calls one SGLang detector's one-shot ``detect_and_parse`` returns for ``text`` (as
    the server parses a non-streamed reply), each ``{"name", "arguments"}``; ``tool``: SGLang's
    request model of a tool, which the agent's tools are validated into."""
    from experiments.agent import TOOLS

    model: Any = tool
    result = detector().detect_and_parse(text, [model.model_validate(t) for t in TOOLS])
    return [{"name": call.name, "arguments": json.loads(call.parameters or "{}")}
            for call in result.calls]


def _detectors() -> dict[str, Any]:
    from experiments.workload import triage_sglang
    from experiments.workload.triage import parsers

    narrow = triage_sglang.load()  # first, as a triaging process does
    import sglang
    from sglang.srt.entrypoints.openai.protocol import Tool

    texts, found = tool_texts(), {}
    for parser in parsers():
        module, name = triage_sglang.parser_table()[parser]
        detector = getattr(importlib.import_module(module), name)
        found[parser] = {
            "module": detector.__module__, "qualname": detector.__qualname__,
            "source": inspect.getsourcefile(detector),
            "calls": {text_name: calls_of(detector, Tool, text)
                      for text_name, text in texts.items()}}
    return {"narrow_loaded": narrow.detectors is not None,
            "sglang_file": getattr(sglang, "__file__", None), "detectors": found}


def _server_args() -> dict[str, Any]:
    import argparse

    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return {"version": sglang.__version__, "options": {
        option: {"dest": action.dest, "switch": action.nargs == 0,
                 "choices": None if action.choices is None else list(action.choices)}
        for action in parser._actions for option in action.option_strings}}


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    print(json.dumps({"detectors": _detectors, "server_args": _server_args}[sys.argv[1]]()))
