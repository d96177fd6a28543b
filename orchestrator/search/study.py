"""Optuna behind the optimize strategy's ``Search``: one study per campaign, in its own database
next to the store (db/sibling.py), so that ``optuna-dashboard URL`` opens it and a resumed
campaign continues the same study.

Used as Optuna's maintainers intend: ask-and-tell, ``enqueue_trial`` for the configurations
measured as given (production, known-good, a candidate's re-runs), constraints for the sampler
(the API moved: 4.x samplers take ``constraints_func``, 5.x trials ``set_constraint``; both are
supported, see ``NEW_CONSTRAINTS``). The store stays the record: every finished trial is told
from it, and a measurement the study missed (a driver killed between the store and the study)
is added from it, never lost.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.samplers import BaseSampler, GPSampler, GridSampler, RandomSampler, TPESampler
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial
from sqlalchemy.engine import make_url

from db.errors import StoreError
from db.store import Store
from experiments.campaign import Campaign
from experiments.optimize_config import OptimizeConfig, direction
from orchestrator.core.evidence import Levels, variant_key
from orchestrator.core.strategies.optimize import Told
from orchestrator.search.space import distributions, grid, levels_of, params

NEW_CONSTRAINTS = int(optuna.__version__.split(".")[0]) >= 5  # trial.set_constraint
CONSTRAINTS = "constraints"  # 4.x: the trial's user attribute constraints_func reads
SEQ, ENDED = "bisect_trial", "bisect_ended"  # user attributes: the store's trial, why it failed
DEPLOY_FAILED = "deployment failed"

optuna.logging.set_verbosity(optuna.logging.WARNING)  # the campaign's own progress says enough


class StudyError(Exception):
    """A study that cannot be used (a sampler whose dependency is missing, a bad storage)."""


def study_name(campaign_id: str) -> str:
    return f"bisect-{campaign_id}"


STUDY_DATABASE = "optuna"  # the study's database next to the store: bisect.optuna.db, DB_optuna


def open_search(campaign: Campaign, campaign_id: str, store: Store) -> OptunaSearch:
    """The campaign's study, in its database next to the store (made if missing)."""
    try:
        url = store.sibling(STUDY_DATABASE)
    except StoreError as exc:
        raise StudyError(str(exc)) from None
    return OptunaSearch(campaign, campaign_id, url)


def study_url(store: Store) -> str:
    """Where ``optuna-dashboard`` finds the studies (the password, if any, hidden)."""
    return make_url(store.sibling(STUDY_DATABASE)).render_as_string(hide_password=True)


def _constraints_of(trial: FrozenTrial) -> Sequence[float]:
    return list(trial.user_attrs.get(CONSTRAINTS, []))


def sampler_for(plan: OptimizeConfig, campaign: Campaign) -> BaseSampler:
    old = {} if NEW_CONSTRAINTS else {"constraints_func": _constraints_of}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if plan.sampler == "tpe":
            return TPESampler(seed=plan.seed, n_startup_trials=plan.startup_trials,
                              multivariate=True, constant_liar=True, **old)  # type: ignore[arg-type]
        if plan.sampler == "gp":
            if importlib.util.find_spec("torch") is None:
                raise StudyError("sampler gp needs PyTorch (`pip install torch`); tpe does not")
            return GPSampler(seed=plan.seed, n_startup_trials=plan.startup_trials,
                             **old)  # type: ignore[arg-type]
    if plan.sampler == "random":
        return RandomSampler(seed=plan.seed)
    return AskTellGrid(grid(campaign.factors), seed=plan.seed)


class AskTellGrid(GridSampler):
    """Optuna's GridSampler, for ask-and-tell: its ``after_trial`` calls ``study.stop()`` when
    the grid is done, which raises outside ``study.optimize``; here the strategy's budget (the
    grid's size) ends the search instead."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        return None


class OptunaSearch:
    """The study of one campaign. ``storage``: an SQLAlchemy URL (Optuna's RDBStorage) or None
    for an in-memory study (the benchmark's)."""

    def __init__(self, campaign: Campaign, campaign_id: str, storage: str | None) -> None:
        assert isinstance(campaign.strategy, OptimizeConfig)
        self.plan, self.factors = campaign.strategy, list(campaign.factors)
        self.space = distributions(self.factors)
        try:
            self.study = optuna.create_study(
                storage=storage, study_name=study_name(campaign_id), load_if_exists=True,
                sampler=sampler_for(self.plan, campaign),
                directions=[direction(m) for m in self.plan.objectives])
        except StudyError:
            raise
        except Exception as exc:  # a storage Optuna cannot open: one sentence, no traceback
            raise StudyError(f"cannot open the study: {str(exc).splitlines()[0]}") from None
        self.study.set_user_attr("campaign", campaign_id)
        self.asked: dict[int, Trial] = {}  # by number: the trials this process asked
        # What the study held when opened, kept up to date here after: this process is its one
        # writer (the driver's), and a reread of its trials from the database costs 7 queries
        # a running trial, twice a proposal (a third of a search's queries).
        trials = self.study.get_trials(deepcopy=False)
        self.told_seqs: set[int] = {t.user_attrs[SEQ] for t in trials if SEQ in t.user_attrs}
        self.deploy_failed: int = sum(1 for t in trials if t.state == TrialState.FAIL
                                 and t.user_attrs.get(ENDED) == DEPLOY_FAILED)
        # asked by a driver that was killed: ended at the first sync
        self.orphans: list[int] = [t.number for t in trials if t.state == TrialState.RUNNING]

    # -- the Search protocol --------------------------------------------------------------

    def suggest(self, told: Sequence[Told], fixed: Sequence[Levels], pending: Sequence[Levels],
                count: int) -> list[dict[str, str]]:
        self._sync(told, pending)
        chosen = []
        for levels in fixed:
            self.study.enqueue_trial(params(self.factors, levels))
            chosen.append(self._ask())
        chosen += [self._ask() for _ in range(count)]
        return chosen

    def failed(self) -> int:
        return self.deploy_failed

    def close(self, told: Sequence[Told]) -> None:
        self._sync(told, ())

    # -- the study kept in step with the store -----------------------------------------

    def _ask(self) -> dict[str, str]:
        trial = self.study.ask(self.space)
        levels = levels_of(self.factors, trial.params)
        self.asked[trial.number] = trial
        return levels

    def _sync(self, told: Sequence[Told], pending: Sequence[Levels]) -> None:
        """Tell the study every finished trial it has not heard of, and end the trials that
        will never finish: asked here and no longer running (their deployment failed), or
        asked by a driver that was killed (the store discarded its unfinished trials)."""
        for measured in told:
            if measured.seq in self.told_seqs:
                continue
            key = variant_key(measured.levels)
            match = next((n for n, t in self.asked.items()
                          if variant_key(levels_of(self.factors, t.params)) == key), None)
            if match is not None:
                self._tell(self.asked.pop(match), measured)
            else:  # measured before this process asked anything: from the store
                self.study.add_trial(self._frozen(measured))
            self.told_seqs.add(measured.seq)
        waiting = Counter(variant_key(levels) for levels in pending)
        for number, trial in list(self.asked.items()):
            key = variant_key(levels_of(self.factors, trial.params))
            if waiting[key]:
                waiting[key] -= 1  # still running
                continue
            trial.set_user_attr(ENDED, DEPLOY_FAILED)  # the driver failed it
            self.study.tell(trial, state=TrialState.FAIL)
            self.deploy_failed += 1
            del self.asked[number]
        for number in self.orphans:
            self.study.tell(number, state=TrialState.FAIL)
        self.orphans = []

    def _tell(self, trial: Trial, measured: Told) -> None:
        trial.set_user_attr(SEQ, measured.seq)
        if measured.values is None:
            trial.set_user_attr(ENDED, "nothing measured")
            self.study.tell(trial, state=TrialState.FAIL)
            return
        if NEW_CONSTRAINTS:
            for name, value in measured.constraints.items():
                trial.set_constraint(name, value)
        else:
            trial.set_user_attr(CONSTRAINTS, list(measured.constraints.values()))
        self.study.tell(trial, list(measured.values))

    def _frozen(self, measured: Told) -> FrozenTrial:
        attrs: dict[str, Any] = {SEQ: measured.seq}
        values = list(measured.values) if measured.values is not None else None
        state = TrialState.COMPLETE if values is not None else TrialState.FAIL
        extra: dict[str, Any] = {}
        if values is not None and NEW_CONSTRAINTS:
            extra["constraints"] = dict(measured.constraints)
        elif values is not None:
            attrs[CONSTRAINTS] = list(measured.constraints.values())
            extra["system_attrs"] = {"constraints": list(measured.constraints.values())}
        return create_trial(state=state, values=values, params=params(
            self.factors, measured.levels), distributions=self.space, user_attrs=attrs, **extra)
