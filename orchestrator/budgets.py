"""A stored campaign's trial budget, raised for `bisect resume --max-trials`: an `inconclusive`
verdict at its budget goes on from the trials it has, instead of a new campaign from none.

Under restart noise a weak failure can need several times the default budget (BENCHMARKS.md,
"1% noise + 6% 2-way"); the strategies replay their decisions from the stored trials, so a
larger budget in the stored campaign is all a resume needs to run on where the last run stopped.
A budget is only ever raised: a lower one would rewrite what the trials already run were for.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from db.store import Store
from experiments.campaign import CampaignError
from experiments.strategy_config import AdaptiveConfig, CommitsConfig
from orchestrator.core.verdict import Status, Verdict
from orchestrator.stored import campaign_of

# The strategies whose campaign has a budget of trials, and which of their fields hold it.
PER_CAMPAIGN = "max_trials"
PER_VARIANT = "max_trials_per_variant"
_FIELDS: dict[type, tuple[str, ...]] = {AdaptiveConfig: (PER_CAMPAIGN, PER_VARIANT),
                                        CommitsConfig: (PER_CAMPAIGN,)}


@dataclass(frozen=True)
class Raised:
    """One budget field raised: ``strategy.<field>`` from ``before`` to ``after``."""

    field: str
    before: int
    after: int

    def said(self) -> str:
        return f"strategy.{self.field}: {self.before} -> {self.after}"


def raise_budget(store: Store, campaign_id: str, wanted: dict[str, int]) -> list[Raised]:
    """Store ``campaign_id`` with the budget fields of ``wanted`` (field -> trials) raised;
    nothing is stored where any of them cannot be (a `CampaignError` says which and why)."""
    campaign = campaign_of(store, campaign_id)
    strategy = campaign.strategy
    fields = _FIELDS.get(type(strategy), ())
    raised = []
    for field, after in wanted.items():
        option = "--" + field.replace("_", "-")
        if field not in fields:
            raise CampaignError(f"{option}: the {strategy.kind} strategy of campaign "
                                f"{campaign_id} has no `strategy.{field}` to raise")
        before = getattr(strategy, field)
        if after < before:
            raise CampaignError(f"{option} {after} is below the campaign's {before} "
                                f"(`strategy.{field}`): a budget can only be raised")
        if after > before:
            raised.append(Raised(field, before, after))
    if not raised:
        return []
    bigger = strategy.model_copy(update={r.field: r.after for r in raised})
    # validated as a campaign file's would be: a budget above a field's bound is bad input too
    try:
        checked = type(strategy).model_validate(bigger.model_dump(mode="json"))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0])
        raise CampaignError(f"--{field.replace('_', '-')} {first['input']}: "
                            f"{first['msg'].lower()} (`strategy.{field}`)") from None
    store.set_campaign_spec(campaign_id, campaign.model_copy(update={"strategy": checked})
                            .model_dump(mode="json"))
    return raised


def budget_spent(verdict: Verdict, campaign_id: str, store: Store) -> str | None:
    """Where an `inconclusive` verdict stopped at its budget (the campaign's, or a variant's
    with its extension), the resume that runs on with twice it; else None. A variant's budget
    is not offered where a variant could not be judged: the search may have stopped at it
    ("cannot go on"), which more trials would not change."""
    if verdict.status is not Status.INCONCLUSIVE:
        return None
    strategy = campaign_of(store, campaign_id).strategy
    fields = _FIELDS.get(type(strategy), ())
    if not fields:
        return None
    most = max((len(cell.trials) for cell in verdict.cells), default=0)
    spent = [field for field in fields
             if (field == PER_CAMPAIGN and len(verdict.trials) >= getattr(strategy, field))
             or (field == PER_VARIANT and most >= getattr(strategy, field)
                 and not verdict.unresolvable)]
    if not spent:
        return None
    return " ".join(f"--{field.replace('_', '-')} {2 * getattr(strategy, field)}"
                    for field in spent)
