"""SGLang's tool-call detectors as triage imports them (sglang_narrow.py: their own modules,
without sglang's ``__init__``, torch or openai) are the ones a server imports with the whole
package: the same classes from the same source, and the same calls for every text of
tests/corpus_markup.py. test_triage_parsers.py checks the triage against the narrow ones; this
closes the gap to SGLang as it runs. The whole package is imported in a child process (torch
and transformers: seconds, half a gigabyte), after a narrow import there, as in a process that
triages first: that import left no stand-in, and the real package loads."""

from __future__ import annotations

import inspect

import pytest

from experiments.workload import triage_sglang
from experiments.workload.triage import parsers
from tests.support.sglang_ordinary import calls_of, ordinary, tool_texts

pytestmark = pytest.mark.real


def test_the_narrow_detectors_are_sglangs_ordinary_ones() -> None:
    said = ordinary("detectors")
    assert said["narrow_loaded"] and said["sglang_file"]  # the real package: no stand-in left
    narrow = triage_sglang.load()
    assert narrow.detectors is not None and narrow.tool is not None, narrow.error
    assert sorted(said["detectors"]) == sorted(parsers())
    texts = tool_texts()
    for parser, theirs in said["detectors"].items():
        ours = narrow.detectors[parser]
        assert (ours.__module__, ours.__qualname__) == (theirs["module"], theirs["qualname"])
        # its module is out of sys.modules again (sglang_narrow.py): the file its own
        # methods were compiled from
        compiled = {v.__code__.co_filename for v in vars(ours).values() if inspect.isfunction(v)}
        assert compiled == {theirs["source"]}, parser
        assert theirs["calls"].keys() == texts.keys()
        for name, text in texts.items():
            assert calls_of(ours, narrow.tool, text) == theirs["calls"][name], (parser, name)
