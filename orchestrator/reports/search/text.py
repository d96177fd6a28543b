"""How a search's figures read, in every format alike: an objective with its interval, a
failure's count with its upper bound against the limit, an SLO's margin. Plain text: each
renderer escapes it for its own format."""

from __future__ import annotations

import math
from collections.abc import Mapping

from orchestrator.reports.search.model import (
    Bound,
    Configuration,
    Difference,
    Objective,
    SloMargin,
    VersusProduction,
)


def number(value: float | None) -> str:
    """2,003 · 162.7 · 0.412 · – (not measured)."""
    if value is None or not math.isfinite(value):
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def percent(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.1%}"


def confidence(alpha: float) -> str:
    """95%, 99%, 99.9%: the level of a bound or interval at ``alpha``."""
    return f"{(1 - alpha) * 100:.3g}%"


def labelled(levels: Mapping[str, str]) -> str:
    return ", ".join(f"{f}={lvl}" for f, lvl in levels.items()) or "–"


def value(objective: Objective) -> str:
    """``2,003 tok/s``; ``–`` where it was not measured."""
    if objective.mean is None:
        return "–"
    return f"{number(objective.mean)} {objective.unit}"


def interval(objective: Objective) -> str:
    """``1,950 … 2,056``; ``one trial`` where there is no spread to show."""
    if objective.ci is None:
        return "one trial" if objective.mean is not None else "–"
    return f"{number(objective.ci[0])} … {number(objective.ci[1])}"


def objective_text(objective: Objective, alpha: float) -> str:
    """``output_throughput 2,003 tok/s (95% CI 1,950 … 2,056)``."""
    if objective.mean is None:
        return f"{objective.metric} not measured"
    spread = (f"{confidence(alpha)} CI {interval(objective)}" if objective.ci is not None
              else "one trial")
    return f"{objective.metric} {value(objective)} ({spread})"


def objectives_text(row: Configuration, alpha: float) -> str:
    return "; ".join(objective_text(o, alpha) for o in row.objectives)


def counts(bound: Bound) -> str:
    return f"{bound.failed}/{bound.judged}" if bound.judged else "no sessions"


def bound_text(bound: Bound) -> str:
    """``0/180, upper bound 1.7% < 5.0%`` (``≥`` where the bound does not prove the limit)."""
    kept = "<" if bound.upper < bound.limit else "≥"
    return f"{counts(bound)}, upper bound {percent(bound.upper)} {kept} {percent(bound.limit)}"


def slo_text(slo: SloMargin) -> str:
    """``ttft_p99_ms 163 ms ≤ 200 ms`` (``>`` where it is broken)."""
    if slo.value is None:
        return f"{slo.metric} not measured (SLO {number(slo.limit)} ms)"
    kept = "≤" if slo.value <= slo.limit else ">"
    return f"{slo.metric} {number(slo.value)} ms {kept} {number(slo.limit)} ms"


def constraints_text(row: Configuration) -> str:
    """Every limit of a configuration with its margin, on one line."""
    shown = [f"corruption {bound_text(row.corruption)}", f"wedging {bound_text(row.wedging)}"]
    shown += [slo_text(s) for s in row.slo]
    return "; ".join(shown)


def marks(row: Configuration) -> list[str]:
    """What sets a configuration apart: the answer, the front, what the search began with,
    a safe one not yet re-run to confirmation."""
    shown = []
    if row.best:
        shown.append("best")
    if row.pareto:
        shown.append("Pareto front")
    if row.role:
        shown.append(row.role)
    if row.safe and not row.confirmed:
        shown.append("unconfirmed")
    return shown


def signed(value: float | None) -> str:
    """+32 · −1,200 · – (``number`` with its sign)."""
    if value is None or not math.isfinite(value):
        return "–"
    return ("+" if value >= 0 else "−") + number(abs(value))


def trials_text(count: int) -> str:
    return f"{count} trial{'s' * (count != 1)}"


def differences_text(versus: VersusProduction, alpha: float) -> str:
    """Each objective's difference from production: ``output_throughput +1,200 tok/s (95% CI
    +900 … +1,500), one-sided Welch p = 0.0001, 3 vs 3 trials``; on the final phase's pairs
    ``output_throughput +1,200 tok/s (x1.60, 90% CI x1.52 … x1.68), one-sided paired t p =
    0.0001, 3 pairs``."""
    said = []
    for d in versus.objectives:
        if d.pairs is not None:
            said.append(_paired_text(d, alpha))
            continue
        trials = f"{d.trials[0]} vs {d.trials[1]} trials"
        if d.p_value is None:
            said.append(f"{d.metric} {signed(d.difference)} {d.unit} ({trials})")
            continue
        ci = ("" if d.ci is None
              else f" ({confidence(alpha)} CI {signed(d.ci[0])} … {signed(d.ci[1])})")
        said.append(f"{d.metric} {signed(d.difference)} {d.unit}{ci}, one-sided Welch "
                    f"p = {d.p_value:.2g}, {trials}")
    return "; ".join(said)


def _paired_text(d: Difference, alpha: float) -> str:
    pairs = f"{d.pairs} pair{'s' * (d.pairs != 1)} of the final phase"
    if d.ratio is None:
        return f"{d.metric}: {pairs}"
    ratio = f"x{d.ratio:.3f}"
    if d.ratio_ci is not None:  # each side at alpha: the one-sided test's bound
        ratio += (f", {confidence(2 * alpha)} CI x{d.ratio_ci[0]:.3f} … "
                  f"x{d.ratio_ci[1]:.3f}")
    if d.p_value is None:
        return f"{d.metric} {signed(d.difference)} {d.unit} ({ratio}; {pairs})"
    return (f"{d.metric} {signed(d.difference)} {d.unit} ({ratio}), one-sided paired t "
            f"p = {d.p_value:.2g}, {pairs}")


def versus_text(versus: VersusProduction, alpha: float) -> str:
    """The answer against production in words: ``shown better than production:
    output_throughput +1,200 tok/s (95% CI +900 … +1,500), one-sided Welch p = 0.0001, 3 vs 3
    trials``; or why it is not, with the same figures."""
    if not versus.measured:
        return "production was not measured"
    if versus.is_production:
        return "production itself is the best safe configuration"
    head = "shown better than production" if versus.shown_better else versus.why
    said = differences_text(versus, alpha)
    return f"{head}: {said}" if said else head
