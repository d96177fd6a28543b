"""The JSON format of every family: the model's own ``to_json`` (versioned, read back by its
``from_json``), indented, with no NaN or infinity."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.reports.renderer import Writes


def to_document(model: Any) -> str:
    return json.dumps(model.to_json(), indent=2, allow_nan=False) + "\n"


JSON = Writes("json", ".json", to_document)
