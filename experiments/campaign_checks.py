"""What a campaign file must agree with itself on, beyond each field's own type: unique names,
references that resolve, and what each strategy needs. Every problem is returned with the path
of the field it concerns, so the loader can name its line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.yaml_lines import Path_

if TYPE_CHECKING:
    from experiments.campaign import Campaign

# The fractional designs bisect knows are tabulated for up to this many two-level factors
# (orchestrator/strategies/design.py; a test keeps the two equal).
FRACTIONAL_MAX_FACTORS = 11


def check_references(campaign: Campaign) -> list[tuple[Path_, str]]:
    problems: list[tuple[Path_, str]] = []

    def unique(items: list[str], path: Path_, what: str) -> None:
        seen: set[str] = set()
        for index, item in enumerate(items):
            if item in seen:
                problems.append(((*path, index, "name"), f"duplicate {what} name '{item}'"))
            seen.add(item)

    unique([n.name for n in campaign.nodes], ("nodes",), "node")
    unique([p.name for p in campaign.pools], ("pools",), "pool")
    unique([f.name for f in campaign.factors], ("factors",), "factor")
    node_names = {n.name for n in campaign.nodes}
    service_names: set[str] = set()
    for p, pool in enumerate(campaign.pools):
        unique([s.name for s in pool.services], ("pools", p, "services"), "service")
        for s, service in enumerate(pool.services):
            service_names.add(service.name)
            if service.node not in node_names:
                problems.append(
                    (("pools", p, "services", s, "node"), f"unknown node '{service.node}'")
                )
    for f, factor in enumerate(campaign.factors):
        for s, name in enumerate(factor.services or []):
            if name not in service_names:
                problems.append((("factors", f, "services", s), f"unknown service '{name}'"))
    levels: dict[str, list[str]] = {}  # the first of duplicate factors: no misleading echoes
    for factor in campaign.factors:
        levels.setdefault(factor.name, list(factor.levels))
    kind = campaign.strategy_kind
    if not campaign.factors and kind != "commits":
        problems.append((("factors",), "at least one factor is needed"))
    if kind == "commits":
        if campaign.commits is None:
            problems.append((("strategy", "kind"), "the commits strategy needs a `commits:` "
                                                   "section (tree, good, bad)"))
        else:
            if "commit" in levels:
                problems.append((("factors",), "`commit` is the factor the commit range "
                                               "becomes: name yours otherwise"))
            missing = [name for name in levels if name not in campaign.commits.levels]
            if missing:
                problems.append((("commits", "levels"), f"hold every other factor at one level "
                                                        f"(missing: {', '.join(missing)})"))
            for name, level in campaign.commits.levels.items():
                if name not in levels or level not in levels[name]:
                    problems.append((("commits", "levels", name),
                                     f"no factor level {name}={level}"))
            for s_index, name in enumerate(campaign.commits.services or []):
                if name not in service_names:
                    problems.append((("commits", "services", s_index),
                                     f"unknown service '{name}'"))
    if kind == "adaptive":
        for field in ("known_good", "known_bad"):
            missing = [name for name in levels if name not in (getattr(campaign, field) or {})]
            if missing:
                problems.append(((field,), f"the adaptive strategy needs a level for every "
                                           f"factor (missing: {', '.join(missing)})"))
        if campaign.known_good is not None and campaign.known_good == campaign.known_bad:
            problems.append((("known_bad",), "known_bad is the same variant as known_good"))
    problems += _design_problems(campaign, levels)
    for field in ("known_good", "known_bad"):
        for factor_name, level in (getattr(campaign, field) or {}).items():
            if factor_name not in levels:
                problems.append(((field, factor_name), f"unknown factor '{factor_name}'"))
            elif level not in levels[factor_name]:
                known = ", ".join(levels[factor_name])
                problems.append(
                    ((field, factor_name), f"factor '{factor_name}' has no level '{level}' "
                                           f"(levels: {known})")
                )
    return problems


def _design_problems(campaign: Campaign, levels: dict[str, list[str]]) -> list[tuple[Path_, str]]:
    """`design` and `resolution` belong to the factorial strategy; a fraction needs a table
    entry. Factors of more than two levels are crossed in full with the fraction."""
    plan = campaign.strategy
    if plan.design == "full":
        if plan.resolution != type(plan).model_fields["resolution"].default:
            return [(("strategy", "resolution"), "applies to `design: fractional` only")]
        return []
    if campaign.strategy_kind != "factorial":
        return [(("strategy", "design"), f"only the factorial strategy has a design (this "
                                         f"campaign's strategy is {campaign.strategy_kind})")]
    two_level = [name for name, names in levels.items() if len(names) == 2]
    if len(two_level) > FRACTIONAL_MAX_FACTORS:
        return [(("strategy", "design"), f"{len(two_level)} two-level factors: fractional "
                                         f"designs are tabulated for up to "
                                         f"{FRACTIONAL_MAX_FACTORS}")]
    return []
