"""What a campaign file must agree with itself on, beyond each field's own type: unique names,
references that resolve, and what the strategy needs (its config class says). Every problem is
returned with the path of the field it concerns, so the loader can name its line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

# The one rule for each word bisect turns into a command or an environment on a node, shared
# with the deploy layer (which refuses the same words again): a leaf module of plain functions.
from deploy.safe_words import (
    env_name_error,
    host_error,
    program_error,
    ref_error,
    unit_error,
    word_error,
)
from experiments.strategy_config import FRACTIONAL_MAX_FACTORS, FULL_MAX_VARIANTS
from experiments.urls import same_server
from experiments.workload.probe import ProbeSpec
from experiments.yaml_lines import Path_

if TYPE_CHECKING:
    from experiments.campaign import Campaign, Factor

__all__ = ["FRACTIONAL_MAX_FACTORS", "FULL_MAX_VARIANTS", "check_references", "command_problems",
           "describe_levels", "place_problems", "probe_problems", "shared_tree",
           "tree_problems", "workdir_error"]


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
    for f, factor in enumerate(campaign.factors):
        if factor.numeric and not campaign.strategy.numeric_factors:
            problems.append((("factors", f, "range"),
                             f"a numeric range is searched by `bisect optimize` (strategy kind "
                             f"optimize); this campaign's strategy is {campaign.strategy.kind}"))
    if not campaign.factors and campaign.strategy.needs_factors:
        problems.append((("factors",), "at least one factor is needed"))
    problems += campaign.strategy.problems(campaign, levels)
    problems += command_problems(campaign)
    problems += probe_problems(campaign)
    problems += place_problems(campaign)
    problems += tree_problems(campaign)
    for field in ("known_good", "known_bad"):
        for factor_name, level in (getattr(campaign, field) or {}).items():
            if factor_name not in levels:
                problems.append(((field, factor_name), f"unknown factor '{factor_name}'"))
            elif not campaign.factor(factor_name).has_level(level):
                known = describe_levels(campaign.factor(factor_name))
                problems.append(
                    ((field, factor_name), f"factor '{factor_name}' has no level '{level}' "
                                           f"(levels: {known})")
                )
    return problems


def workdir_error(workdir: str) -> str | None:
    """What the node would refuse at once (deploy/workdir.py); the rest (owner, mode, links)
    only the node can tell."""
    if ".." in workdir.split("/"):
        return "a workdir cannot hold '..' (give the directory itself)"
    return None


def place_problems(campaign: Campaign) -> list[tuple[Path_, str]]:
    """Two pools at one endpoint would measure one server as two; two process services of one
    name in one workdir would share a pid file and a log."""
    problems: list[tuple[Path_, str]] = []
    endpoints: list[tuple[str, str]] = []
    workdirs = {node.name: (node.transport, node.host, node.workdir.rstrip("/"))
                for node in campaign.nodes}
    pid_files: dict[tuple[object, ...], str] = {}
    for p, pool in enumerate(campaign.pools):
        for name, endpoint in endpoints:
            if same_server(endpoint, pool.endpoint):
                problems.append((("pools", p, "endpoint"),
                                 f"pool {name!r} has this endpoint too: two pools would measure "
                                 f"one server"))
                break
        endpoints.append((pool.name, pool.endpoint))
        for s, service in enumerate(pool.services):
            if service.manager != "process" or service.node not in workdirs:
                continue
            place = (*workdirs[service.node], service.name)
            if place in pid_files:
                problems.append((("pools", p, "services", s, "name"),
                                 f"{pid_files[place]} runs a service {service.name!r} in the same "
                                 f"workdir: they would share a pid file"))
            pid_files.setdefault(place, f"pool {pool.name!r}")
    return problems


def tree_problems(campaign: Campaign) -> list[tuple[Path_, str]]:
    """A git tree of a factor's levels or of a commit range that two pools run from on one
    host (``shared_tree``)."""
    problems: list[tuple[Path_, str]] = []
    for f, factor in enumerate(campaign.factors):
        trees: dict[str, str] = {}  # each tree once, at its first level
        for name, level in factor.levels.items():
            if level is not None and level.git is not None:
                trees.setdefault(level.git.tree, name)
        for tree, name in trees.items():
            if error := shared_tree(campaign, tree, factor.services, "a trial of another commit"):
                problems.append((("factors", f, "levels", name, "git", "tree"), error))
    if campaign.commits is not None and (error := shared_tree(
            campaign, campaign.commits.tree, campaign.commits.services,
            "a trial of another commit")):
        problems.append((("commits", "tree"), error))
    return problems


def shared_tree(campaign: Campaign, tree: str, services: Sequence[str] | None,
                checkout: str) -> str | None:
    """Why ``tree`` cannot be checked out by one pool's trial while another pool runs from it:
    two pools whose services (``services``; None: all) run on one host from the same path.
    ``checkout``: what checks another commit out there. None when no two pools share it.
    Nothing on the driver serialises two pools' checkouts of one tree, and a checkout under a
    running server changes the code the other pool's trial measures. One host: the same
    transport and address (``host``, ``port``); two names of one machine cannot be told."""
    hosts = {node.name: (node.transport, node.host, node.port) for node in campaign.nodes}
    seen: dict[tuple[object, ...], tuple[str, str]] = {}  # host -> (its pool, its node)
    for pool in campaign.pools:
        for service in pool.services:
            if services is not None and service.name not in services:
                continue
            host = hosts.get(service.node)
            if host is None:
                continue  # an unknown node: named by check_references
            if host in seen and seen[host][0] != pool.name:
                other, node = seen[host]
                where = ("this machine (local transport)" if host[0] == "local"
                         else f"host {host[1]}" + (f":{host[2]}" if host[2] else ""))
                nodes = f"node {node!r}" if node == service.node else \
                    f"nodes {node!r} and {service.node!r}"
                return (f"pools {other!r} and {pool.name!r} both run services from the tree "
                        f"{tree} on {where} ({nodes}): {checkout} checked out there for one "
                        f"pool would change the files under the other pool's running server. "
                        f"Give pool {pool.name!r} a tree of its own, in a file of its own (e.g. "
                        f"`git -C {tree} worktree add {tree.rstrip('/')}-{pool.name} HEAD`, "
                        f"that path as its tree), or keep one of these pools")
            seen.setdefault(host, (pool.name, service.node))
    return None


def describe_levels(factor: Factor) -> str:
    """A factor's levels as an error names them: the switch's names, or the knob's range."""
    return ", ".join(factor.levels) if factor.range is None else factor.range.describe()


def probe_problems(campaign: Campaign) -> list[tuple[Path_, str]]:
    """The user's own probe (``workload: {command: ...}``) judges by its exit status, on the
    driver's machine: no wedging to count, no load generators to spread it over; its words are
    an argv, with the rules of a start command's."""
    probe = campaign.workload
    if not isinstance(probe, ProbeSpec):
        return []
    problems: list[tuple[Path_, str]] = []
    if campaign.strategy.target != "corruption":
        problems.append((("strategy", "target"), "a probe judges a variant by its exit status: "
                                                 "leave target at corruption"))
    if campaign.generators is not None:
        problems.append((("generators",), "a probe runs on the driver's machine, once a run: "
                                          "load generators do not apply"))
    if error := program_error(probe.command[0]):
        problems.append((("workload", "command", 0), error))
    problems += [(("workload", "command", index), error)
                 for index, word in enumerate(probe.command[1:], start=1)
                 if (error := word_error(word))]
    if probe.cwd is not None and (error := word_error(probe.cwd)):
        problems.append((("workload", "cwd"), error))
    return problems


def command_problems(campaign: Campaign) -> list[tuple[Path_, str]]:
    """Nothing in a campaign file may run as a command or be read as an option: environment
    variable names, the program of a start command, git refs and unit names follow the rules
    of deploy/safe_words.py, and no word holds a byte no process can receive. (Secret values
    are not in the file: the deploy layer checks them when they are read.)"""
    problems: list[tuple[Path_, str]] = []

    def words(path: Path_, values: Sequence[object]) -> None:
        for index, value in enumerate(values):
            error = word_error(value) if isinstance(value, str) else None
            if error:
                problems.append(((*path, index), error))

    def env(path: Path_, values: Mapping[str, object]) -> None:
        for name, value in values.items():
            # A name that cannot be shown on one line is reported at its mapping.
            where = (*path, name) if name.isprintable() else path
            error = env_name_error(name) or (word_error(value) if isinstance(value, str)
                                             else None)
            if error:
                problems.append((where, error))

    def single(path: Path_, error: str | None) -> None:
        if error:
            problems.append((path, error))

    for n, node in enumerate(campaign.nodes):
        single(("nodes", n, "workdir"), word_error(node.workdir) or workdir_error(node.workdir))
        if node.host is not None:
            single(("nodes", n, "host"), host_error(node.host))
        if node.user is not None:
            single(("nodes", n, "user"), host_error(node.user, "user"))
    for p, pool in enumerate(campaign.pools):
        for s, service in enumerate(pool.services):
            at: Path_ = ("pools", p, "services", s)
            program = service.start[0] if service.start else ""
            if isinstance(program, str):
                single((*at, "start", 0), program_error(program))
            words((*at, "start"), service.start[1:])
            env((*at, "env"), service.env)
            if service.unit is not None:
                single((*at, "unit"), unit_error(service.unit))
    for f, factor in enumerate(campaign.factors):
        for name, level in factor.levels.items():
            if level is None:
                continue
            at = ("factors", f, "levels", name)
            env((*at, "env"), level.env)
            words((*at, "flags"), level.flags)
            for phase in ("pre", "post"):
                for index, hook in enumerate(getattr(level, phase)):
                    single((*at, phase, index), None if hook else "a hook needs a command")
                    words((*at, phase, index), hook)
            for index, patch in enumerate(level.patch):
                single((*at, "patch", index, "root"), word_error(patch.root))
            if level.git is not None:
                single((*at, "git", "ref"), ref_error(level.git.ref))
                single((*at, "git", "tree"), word_error(level.git.tree))
                words((*at, "git", "build"), level.git.build)
    if campaign.commits is not None:
        for field in ("good", "bad"):
            single(("commits", field), ref_error(getattr(campaign.commits, field)))
        single(("commits", "tree"), word_error(campaign.commits.tree))
        words(("commits", "build"), campaign.commits.build)
    return problems
