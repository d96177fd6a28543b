"""The stress workload with a user's own tools and system prompt (experiments/workload/
agent_tools.py): the canary contract on any tool with a string argument, over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.agent import SYSTEM_PROMPT, TOOLS
from experiments.outcomes import Outcome
from experiments.workload.agent_tools import (
    BUILT_IN,
    CANARY_RULE,
    ToolsError,
    agent_from,
    load_agent,
)
from experiments.workload.spec import WorkloadSpec
from tests.support.agent_server import AgentServer, call, completion, stress


def tool(name: str, **properties: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"{name} of the shop",
        "parameters": {"type": "object",
                       "properties": {k: {"type": v} for k, v in properties.items()},
                       "required": list(properties)}}}


SHOP = [tool("lookup_order", order_id="string", verbose="boolean"), tool("now"),
        tool("refund", order_id="string", amount="number", canary="string")]


@pytest.mark.pure
def test_the_built_in_agent_is_the_contract_as_it_was() -> None:
    assert agent_from(None, None) is BUILT_IN
    assert (BUILT_IN.tools, BUILT_IN.system_prompt) == (TOOLS, SYSTEM_PROMPT)
    # a prompt of one's own keeps the built-in tools and gains the canary rule
    own = agent_from(None, "You are a careful shop assistant.\n")
    assert own.tools == TOOLS
    assert own.system_prompt == f"You are a careful shop assistant.\n\n{CANARY_RULE}"


@pytest.mark.pure
def test_user_tools_are_sent_as_given_and_sorted_by_where_the_canary_rides() -> None:
    agent = agent_from(json.dumps(SHOP), None)
    assert agent.tools == SHOP  # not a property added: the schema the parser sees is theirs
    assert agent.loose == {"lookup_order"}  # in a string argument
    assert agent.unchecked == {"now"}  # no string argument: judged without the canary
    assert agent.system_prompt.endswith(CANARY_RULE)
    # a saved request body (its "tools"), and bare function objects, are read too
    body = {"model": "m", "messages": [], "tools": [SHOP[0]["function"]]}
    assert agent_from(json.dumps(body), None).tools == [SHOP[0]]


@pytest.mark.pure
@pytest.mark.parametrize(("text", "why"), [
    ("[", "not JSON"),
    ("[]", "non-empty JSON list"),
    ('{"tools": 3}', "non-empty JSON list"),
    ('[{"type": "function"}]', "tool 0 is not"),
    ('[{"type": "function", "function": {"parameters": {}}}]', "no function name"),
    (json.dumps([SHOP[0], SHOP[0]]), "two tools are named 'lookup_order'"),
    (json.dumps([tool("now")]), "no tool has a string argument"),
    (json.dumps([{"type": "function", "function": {"name": "x", "parameters": []}}]),
     "parameters must be a JSON schema object"),
])
def test_a_tools_file_that_cannot_work_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ToolsError, match=why):
        agent_from(text, None)


@pytest.mark.pure
def test_load_agent_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "tools.json"
    bad.write_text("[]")
    with pytest.raises(ToolsError, match=f"^{bad}: expected"):
        load_agent(bad, None)
    empty = tmp_path / "prompt.txt"
    empty.write_text(" \n")
    with pytest.raises(ToolsError, match=f"^{empty}: the system prompt is empty"):
        load_agent(None, empty)
    with pytest.raises(ToolsError, match="cannot read it"):
        load_agent(tmp_path / "missing.json", None)


@pytest.mark.real
def test_the_canary_rides_in_any_string_argument_of_a_users_tool() -> None:
    """A server that answers with the user's tools: the canary inside ``order_id`` is on the
    plot; a stale one there is lost_plot; a tool with a `canary` argument is checked there;
    a call to a tool without a string argument passes on its own."""

    async def shop(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        index = int(key.split("-")[1])
        order = {"order_id": f"A-17 canary={canary}", "verbose": True}
        if index == 1 and turn == 2:
            order["order_id"] = "A-17 canary=STALE00000"
        if index == 2 and turn == 1:
            return completion(None, [call("refund", {"order_id": "A-17", "amount": 5.0,
                                                     "canary": canary})])
        if index == 3 and turn == 1:  # the canary given, but in the wrong place
            return completion(None, [call("refund", {"order_id": canary, "amount": 5.0,
                                                     "canary": "x"})])
        if index == 4 and turn == 1:
            return completion(None, [call("now", {})])
        return completion(None, [call("lookup_order", order, call_id=f"c{index}{turn}")])

    server = AgentServer(shop)
    agent = agent_from(json.dumps(SHOP), "You run the order desk.")
    result = stress(server, WorkloadSpec(sessions=5, rounds=2, model="m"), agent=agent)
    outcomes = {s.key: s.outcome for s in result.sessions}
    assert outcomes == {"s0-0": Outcome.OK, "s0-1": Outcome.LOST_PLOT, "s0-2": Outcome.OK,
                        "s0-3": Outcome.LOST_PLOT, "s0-4": Outcome.OK}
    stale = next(s for s in result.sessions if s.key == "s0-1")
    assert "in a string argument of lookup_order" in (stale.evidence or "")
    wrong_place = next(s for s in result.sessions if s.key == "s0-3")
    assert "in its canary argument of refund" in (wrong_place.evidence or "")
    first = server.requests[0]["body"]
    assert first["tools"] == SHOP
    assert first["messages"][0] == {"role": "system",
                                    "content": f"You run the order desk.\n\n{CANARY_RULE}"}
    # the tool result the next turn sends back names the user's tool and a fresh canary
    second = next(r for r in server.requests if r["key"] == "s0-0" and r["turn"] == 2)
    assert second["body"]["messages"][-1]["content"].startswith("lookup_order finished.")
