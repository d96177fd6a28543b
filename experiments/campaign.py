"""The campaign file: what to deploy where, which factors to flip, how to stress, how to decide.

Validated by pydantic; every error names the file, the line and the field (exit code 2 upstream:
campaign_load.py reads a file into a ``Campaign``).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from experiments.knobs import Knob
from experiments.optimize_config import OptimizeConfig
from experiments.secrets import ENV_NAME, PlainUrl, SecretRef
from experiments.strategy_config import (
    CONFIGS,
    FactorialConfig,
    StrategyConfig,
    kind_of,
    with_kind,
)
from experiments.workload.probe import ProbeSpec
from experiments.workload.spec import WorkloadSpec

# Upper bounds of numeric fields: far above what a real campaign needs, so that a typo such as
# `timeout_s: 1e30` or `.inf` is named by `bisect validate` instead of running (or hanging).
DAY_S = 86_400.0


class CampaignError(ValueError):
    """A campaign file that cannot be used; the message names file, line and field."""


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return value


def _split_shell_words(value: Any) -> Any:
    return shlex.split(value) if isinstance(value, str) else value


EnvValue = Annotated[str, BeforeValidator(_scalar_to_str)]
# A value that may be a secret: `{secret: ENV_NAME}` / `{secret_file: PATH}` (experiments/secrets).
EnvOrSecret = EnvValue | SecretRef
# An argv; a string is split as a shell would split it (it never reaches a shell).
Argv = Annotated[list[str], BeforeValidator(_split_shell_words)]
def _not_dots(name: str) -> str:
    if not name.strip("."):  # a name can become a file name (a process service's NAME.pid)
        raise ValueError(f"{name!r} is not a name: it would be a path")
    return name


Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$"), AfterValidator(_not_dots)]
# Level names may be written as numbers (`tp: {4: ..., 8: ...}`); they are names all the same.
LevelName = Annotated[Name, BeforeValidator(_scalar_to_str)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PatchSpec(_Strict):
    """A unified diff applied under ``root`` on every node the factor touches (like
    ``patch -p{strip} -d root``), atomically, and reverted byte for byte."""

    root: str = Field(pattern=r"^/")
    diff: str = Field(min_length=1)
    strip: int = Field(default=1, ge=0, le=64)


class GitSpec(_Strict):
    """Check out ``ref`` in the node's source tree (stale bytecode purged), then ``build``."""

    tree: str = Field(pattern=r"^/")
    ref: str = Field(min_length=1)
    build: Argv = []
    build_timeout_s: float = Field(default=1800.0, gt=0, le=DAY_S, allow_inf_nan=False)


class CommitRange(_Strict):
    """The ``commits`` strategy: which git tree, which range, how to build, under which levels.

    The range is resolved on the node when the campaign starts and becomes a factor named
    ``commit`` (one level per commit, oldest first); ``levels`` holds every other factor fixed
    (e.g. the configuration where the corruption shows)."""

    tree: str = Field(pattern=r"^/")
    good: str = Field(min_length=1)
    bad: str = Field(min_length=1)
    build: Argv = []
    build_timeout_s: float = Field(default=1800.0, gt=0, le=DAY_S, allow_inf_nan=False)
    services: list[str] | None = None  # the services running from the tree (default: all)
    first_parent: bool = False
    levels: dict[str, LevelName] = {}
    # Filled when the range is resolved: the commit factor's levels, oldest first (a list,
    # because mappings do not keep their order through every store).
    resolved: list[str] = []
    # Filled with them: each commit's subject and author, as git gave them, for the verdict's
    # words (a campaign stored before they were has none: its commits are named by SHA alone).
    described: dict[str, CommitDescription] = {}


class CommitDescription(_Strict):
    subject: str
    author: str


class Level(_Strict):
    """What one level of a factor sets: environment variables and extra command-line flags.

    ``log_markers`` must appear in a restarted service's log for the level to count as loaded
    (e.g. the HiCache host allocation line); ``absent_log_markers`` must not."""

    env: dict[str, EnvOrSecret] = {}
    flags: Argv = []
    log_markers: list[str] = []
    absent_log_markers: list[str] = []
    patch: list[PatchSpec] = []
    git: GitSpec | None = None
    pre: list[Argv] = []  # commands run on the node before its services restart
    post: list[Argv] = []  # and after they are healthy again


class Factor(_Strict):
    """A switch with named ``levels``, or a numeric knob whose ``range`` holds its levels
    (`bisect optimize` searches it; experiments/knobs.py)."""

    name: Name
    range: Knob | None = None  # before levels: their check reads it
    levels: dict[LevelName, Level | None] = Field(default={}, validate_default=True)
    services: list[str] | None = None  # the services it touches; None means every service

    @field_validator("levels")
    @classmethod
    def _levels_or_range(cls, levels: dict[str, Level | None],
                         info: ValidationInfo) -> dict[str, Level | None]:
        ranged = info.data.get("range") is not None or "range" not in info.data
        if ranged and "range" in info.data and levels:
            raise PydanticCustomError("factor_kind", "a factor has `levels` or a `range`, not "
                                                     "both")
        if not ranged and len(levels) < 2:
            raise PydanticCustomError("factor_levels", "at least 2 levels (or a numeric "
                                                       "`range`)")
        return levels

    @property
    def numeric(self) -> bool:
        return self.range is not None

    def has_level(self, name: str) -> bool:
        return name in self.levels if self.range is None else self.range.value(name) is not None

    def level(self, name: str) -> Level:
        if self.range is not None:
            flags, env = self.range.settings(name)
            return Level(flags=flags, env=dict(env))
        return self.levels[name] or Level()

    def shown_levels(self) -> list[str]:
        """The levels a reader or a preflight is shown: all of a switch, a range's two ends."""
        return list(self.levels) if self.range is None else self.range.ends()


class Node(_Strict):
    """Where services run. ``transport: ssh`` reaches it over SSH, with OpenSSH's semantics:
    values given here win over the ssh config file, which fills in the rest (HostName, User,
    Port, IdentityFile, ProxyJump) when ``host`` is one of its aliases."""

    name: Name
    transport: Literal["local", "ssh"] = "local"
    workdir: str  # pid and log files of the services live here
    # ssh only. host: an address, a DNS name or a Host alias of the ssh config.
    host: Annotated[str, Field(min_length=1)] | None = Field(default=None, validate_default=True)
    port: int | None = Field(default=None, ge=1, le=65535)  # None: the config's Port, else 22
    user: str | None = None  # None: the config's User, else the local user
    identity_file: str | list[str] | None = None  # none: the config's, the agent, ~/.ssh/id_*
    ssh_config: str | None = None  # None: ~/.ssh/config
    known_hosts: str | None = None  # None: the config's UserKnownHostsFile, ~/.ssh/known_hosts
    # strict: an unknown host key is refused; accept_new: trusted on first use and recorded in
    # known_hosts (OpenSSH's StrictHostKeyChecking=accept-new). A changed key is always refused.
    host_key_policy: Literal["strict", "accept_new"] = "strict"
    connect_timeout_s: float = Field(default=10.0, gt=0, le=3600, allow_inf_nan=False)

    @field_validator("host")
    @classmethod
    def _host_matches_transport(cls, host: str | None, info: ValidationInfo) -> str | None:
        transport = info.data.get("transport")  # absent when the transport itself was invalid
        if transport == "ssh" and host is None:
            raise PydanticCustomError(
                "ssh_host", "required when transport is ssh (an address, a DNS name or an "
                            "alias of the ssh config)")
        if transport == "local" and host is not None:
            raise PydanticCustomError(
                "local_host", "set, but the node's transport is local: add `transport: ssh`")
        return host


class Service(_Strict):
    name: Name
    node: str
    # A word may be a secret (SGLang's `--api-key`): visible in the node's process list.
    start: Annotated[list[str | SecretRef], BeforeValidator(_split_shell_words),
                     Field(min_length=1)]
    env: dict[str, EnvOrSecret] = {}
    health_url: PlainUrl
    # Optional second wait: SGLang's /health_generate runs a real generation, so a server that
    # answers /health but cannot decode yet is not stressed.
    health_generate_url: PlainUrl | None = None
    metrics_url: PlainUrl | None = None
    startup_timeout_s: float = Field(default=120.0, gt=0, le=DAY_S, allow_inf_nan=False)
    log_markers: list[str] = []  # in every start's log, e.g. "fired up and ready to roll"
    # Whose log lines are read as wedge signs (experiments.collect.ENGINES): vLLM logs ERROR
    # for every tool call a model breaks, which is no sign of a server hanging.
    engine: Literal["sglang", "vllm"] = "sglang"
    # process: bisect starts the command itself (pid and log files in the node's workdir);
    # systemd: the node's unit (default NAME.service) gets the variant as a drop-in.
    manager: Literal["process", "systemd"] = "process"
    unit: str | None = None


class Pool(_Strict):
    name: Name
    endpoint: PlainUrl  # the OpenAI-compatible base URL the workload talks to
    # The driver's environment variable holding the endpoint's API key (never stored), sent
    # by the workload as `Authorization: Bearer KEY`.
    api_key_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    services: list[Service] = Field(min_length=1)  # restart order: first to last


class Cost(_Strict):
    """Real-world durations, so a time-compressed run on twins still reports real cost."""

    restart_s: float = Field(default=90.0, ge=0, le=DAY_S, allow_inf_nan=False)
    workload_s: float = Field(default=485.0, ge=0, le=DAY_S, allow_inf_nan=False)
    gpus: int = Field(default=8, ge=0, le=100_000)  # GPUs held by one pool while a trial runs


class Generators(_Strict):
    """Load generators: Ray actors that run a trial's sessions, each a disjoint share with the
    trial's seed, e.g. on load machines started with `ray start --resources '{"loadgen": 4}'`.
    Absent, the pool's own actor runs the workload."""

    count: int = Field(ge=1, le=10_000)  # generators per trial (at most one per session)
    # custom Ray resources each one holds, e.g. {loadgen: 1}
    resources: dict[str, Annotated[float, Field(le=1e6, allow_inf_nan=False)]] = {}
    labels: dict[str, str] = {}  # node labels it needs (`ray start --labels`)
    num_cpus: float = Field(default=0, ge=0, le=1024, allow_inf_nan=False)  # CPUs each holds
    # to be placed and started
    start_timeout_s: float = Field(default=120.0, gt=0, le=DAY_S, allow_inf_nan=False)

    @field_validator("resources")
    @classmethod
    def _custom(cls, resources: dict[str, float]) -> dict[str, float]:
        if {"CPU", "GPU", "memory"} & set(resources) or min(resources.values(), default=1) <= 0:
            raise PydanticCustomError("resources", "custom Ray resources with positive amounts "
                                                   "(CPUs: num_cpus)")
        return resources


def _workload_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "probe" if "command" in value else "stress"
    return "probe" if isinstance(value, ProbeSpec) else "stress"


# The built-in stress workload, or the user's own probe (`command:`, as `git bisect run`).
Workload = Annotated[Annotated[WorkloadSpec, Tag("stress")] | Annotated[ProbeSpec, Tag("probe")],
                     Discriminator(_workload_kind)]


class Campaign(_Strict):
    name: str = Field(min_length=1)
    nodes: list[Node] = Field(min_length=1)
    pools: list[Pool] = Field(min_length=1)
    factors: list[Factor] = []  # at least one, unless a commit range is bisected
    workload: Workload = WorkloadSpec()
    # One of the registered kinds' classes (CONFIGS), discriminated on `kind`; see below.
    strategy: StrategyConfig = FactorialConfig()
    cost: Cost = Cost()
    generators: Generators | None = None  # None: the workload runs in the pool's actor
    known_good: dict[str, LevelName] | None = None
    known_bad: dict[str, LevelName] | None = None
    commits: CommitRange | None = None

    @model_validator(mode="before")
    @classmethod
    def _strategy_kind(cls, data: Any) -> Any:
        return with_kind(data) if isinstance(data, dict) else data

    @property
    def strategy_kind(self) -> str:
        return self.strategy.kind

    def factor(self, name: str) -> Factor:
        return next(f for f in self.factors if f.name == name)

    def level_names(self) -> dict[str, list[str]]:
        return {f.name: list(f.levels) for f in self.factors}


def register_strategy_config(config: type[StrategyConfig]) -> None:
    """Add a strategy kind's class to the union the campaign's ``strategy`` is parsed as."""
    CONFIGS[kind_of(config)] = config
    _rebuild_strategy_union()


def unregister_strategy_config(kind: str) -> None:
    """Take a plug-in kind out again (a test's); the built-in kinds stay."""
    if kind in ("adaptive", "factorial", "commits", "sweep", "optimize"):
        raise ValueError(f"'{kind}' is a built-in strategy kind")
    CONFIGS.pop(kind, None)
    _rebuild_strategy_union()


def _rebuild_strategy_union() -> None:
    field = Campaign.model_fields["strategy"]
    choices = tuple(CONFIGS.values())
    union: Any = Union[choices] if len(choices) > 1 else choices[0]  # noqa: UP007
    field.annotation = union
    field.discriminator = "kind" if len(choices) > 1 else None
    Campaign.model_rebuild(force=True)


CONFIGS[kind_of(OptimizeConfig)] = OptimizeConfig  # its own module: the search's parts
_rebuild_strategy_union()


def campaign_schema() -> dict[str, Any]:
    return Campaign.model_json_schema()
