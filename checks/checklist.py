"""Run the whole checklist: each check of the registry (checks/registry.py CHECKS: its function,
its inputs, its parameters' ranges) with its configured thresholds.

Checks are pure functions; this module loads and validates a config, turns a crash inside one check
into an `error` result (never a crashed run), and decides the gate. Results always come in registry
order, whatever order the checks run in: the checks whose registry entry says `background` run
on a thread beside the others, those that say `run_first` before the others (near_duplicates leaves
the row hashes exact_duplicates reuses in CheckInputs.derived). Over shards (CheckInputs.shards) the
checks that need the responses' text run as checks/batched.py runs them, and a check whose `engines`
leave out a sharded run is skipped in one line. The checks registered from outside (a plugin's
`Check`) run here like the built-ins; their defaults are their functions' (registry.plugin_defaults).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from prefdata.base.errors import UnusableInput
from prefdata.base.files import read_side_file
from prefdata.base.yamlkeys import load_yaml
from prefdata.checks.base import CHECKLIST, CheckResult
from prefdata.checks.registry import BOUND, CHECKS, DASK, SHARDS, CheckInputs, plugin_defaults


def _registry() -> dict[str, tuple[Callable[..., Any], Callable[[CheckInputs], dict[str, Any]]]]:
    """check id -> (function, how to bind its data arguments), in registry order (registry.CHECKS)."""
    return {check_id: (check.function, check.bind) for check_id, check in CHECKS.items()}


def default_config() -> dict[str, Any]:
    """checks/checklist.yaml, with each check registered from outside under its own defaults."""
    config = yaml.safe_load(resources.files("prefdata.checks").joinpath(CHECKLIST).read_text())
    config["checks"].update(plugin_defaults())
    return config


# Configs that ship with prefdata, named instead of a path (`--config small-data`).
PRESETS = ("small-data",)


def load_config(path: str | Path | None = None, recorded: dict[str, Any] | None = None,
                where: str = "the recorded checklist") -> dict[str, Any]:
    """The default checklist with a user's YAML laid over it (a file, or a shipped preset's name), or
    with `recorded` (the whole config a version was validated with, as its report keeps it) laid over
    it, checked the same way; unknown checks or parameters are errors."""
    config = default_config()
    if recorded is not None:
        path, user = where, recorded
    elif path is None:
        return config
    else:
        try:
            if str(path) in PRESETS and not Path(path).exists():
                text = resources.files("prefdata.checks").joinpath(f"{path}.yaml").read_text()
            else:
                text = read_side_file(path, "--config")
            user = load_yaml(text, str(path)) or {}
        except OSError as exc:
            raise UnusableInput(f"{path}: cannot read the checklist config ({exc})".replace("\n", " ")) from None
    if not isinstance(user, dict) or not isinstance(user.get("checks", {}), dict):
        raise UnusableInput(f"{path}: expected a mapping with 'checks:' (see checks/checklist.yaml)")
    unknown = set(user) - {"strict", "checks"}
    if unknown:
        raise UnusableInput(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; use 'strict' and 'checks'")
    for check_id, params in (user.get("checks") or {}).items():
        if check_id not in CHECKS:
            raise UnusableInput(f"{path}: unknown check {check_id!r}; known: {', '.join(CHECKS)}")
        params = params or {}
        defaults = _parameters(CHECKS[check_id].function)
        bad = set(params) - set(defaults) - {"waive"}
        if bad:
            raise UnusableInput(f"{path}: check {check_id!r} has no parameter {', '.join(sorted(bad))}; "
                                f"it takes {', '.join(sorted(defaults))} (or waive)")
        for name, value in params.items():
            _check_type(path, check_id, name, value, defaults.get(name))
            _check_range(path, check_id, name, value)
            if "waive" not in params and name in CHECKS[check_id].off_at and CHECKS[check_id].turns_off(name, value):
                # a value that lets every row pass is a waiver in all but name: it must say why, so that it
                # is recorded, signed, shown and held to a trainer's allowed_waivers like any waiver
                raise UnusableInput(f"{path}: {check_id}.{name}: {value!r} turns the check off, which is a waiver: "
                                    f"write `{check_id}: {{waive: \"why\"}}` instead (recorded with the signed "
                                    "report), or a value that still checks")
        config["checks"][check_id] = {**config["checks"].get(check_id, {}), **params}
    if "strict" in user:
        if not isinstance(user["strict"], bool):  # YAML reads `maybe` or `"no"` as text, which bool() takes as true
            raise UnusableInput(f"{path}: strict must be true or false, not {user['strict']!r}")
        config["strict"] = user["strict"]
    return config


def _parameters(function: Callable[..., Any]) -> dict[str, Any]:
    """The tunable parameters of a check (those with defaults), with their defaults."""
    return {n: p.default for n, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty and n not in BOUND}


def _defaults_of(check: Callable[..., Any], run: Callable[..., Any]) -> Callable[..., Any]:
    """`run` called with `check`'s defaults under the parameters given: a batched stand-in takes the
    parameters of the check it stands in for, with the same defaults."""
    defaults = _parameters(check)
    return lambda **given: run(**{**defaults, **given})


def _check_type(path: Any, check_id: str, name: str, value: Any, default: Any) -> None:
    """A YAML value must have the type of the parameter's default, so typos fail at load time."""
    where = f"{path}: {check_id}.{name}"
    if name == "waive":
        if not isinstance(value, str) or not value.strip():
            raise UnusableInput(f"{where} must be the reason, as text")
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            raise UnusableInput(f"{where} must be true or false, got {value!r}")
    elif isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnusableInput(f"{where} must be a number, got {value!r}")
    elif isinstance(default, str) and not isinstance(value, str):
        raise UnusableInput(f"{where} must be text, got {value!r}")
    elif isinstance(default, (tuple, list)) and not isinstance(value, list):
        raise UnusableInput(f"{where} must be a list, got {value!r}")


def _check_range(path: Any, check_id: str, name: str, value: Any) -> None:
    """A value of the right type must also lie in its parameter's range or choices (the registry's)."""
    where = f"{path}: {check_id}.{name} = {value!r}"
    allowed = CHECKS[check_id].ranges.get(name)
    if allowed is not None and value is not None and not allowed.admits(value):
        raise UnusableInput(f"{where} is out of range; allowed: {allowed}")
    choices = CHECKS[check_id].choices.get(name)
    if choices is not None and value not in choices:
        raise UnusableInput(f"{where} is not allowed; choose one of {', '.join(choices)}")


def background_checks() -> tuple[str, ...]:
    """The checks run on a thread beside the others (their registry entry's `background`)."""
    return tuple(c for c, check in CHECKS.items() if check.background)


def not_here(check_id: str, engine: str) -> CheckResult:
    """The one line a runner gives a check whose `engines` leave its engine out."""
    where = {SHARDS: "a sharded run (pairs too big for memory)", DASK: "Dask"}[engine]
    return CheckResult(check_id, "skip", message=f"not run on {where}: its registry entry's engines are "
                                                 f"{', '.join(CHECKS[check_id].engines)}")


def _run_one(check_id: str, function: Callable[..., Any], bind: Callable[[CheckInputs], dict[str, Any]],
             params: dict[str, Any], inputs: CheckInputs) -> list[CheckResult]:
    started = time.perf_counter()
    try:
        produced = function(**bind(inputs), **params)
    except Exception as exc:  # one broken check reports an error; the others still run
        produced = CheckResult(check_id, "error", message=f"{type(exc).__name__}: {exc}".splitlines()[0])
    seconds = round(time.perf_counter() - started, 3)
    produced = produced if isinstance(produced, list) else [produced]
    for result in produced:
        result.details.setdefault("seconds", seconds)
    return produced


def run_checklist(inputs: CheckInputs, config: dict[str, Any] | None = None,
                  only: list[str] | None = None, background: tuple[str, ...] | None = None) -> list[CheckResult]:
    """Every check (or those in `only`) in registry order; the checks in `background` (default: those
    whose entry says `background`) run on one thread beside the others (same results, same order:
    tests/test_checklist.py)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    config = config or default_config()
    background = background_checks() if background is None else background
    registry = _registry()
    skipped: set[str] = set()
    if inputs.shards is not None:  # the checks that read the responses run over the shards
        from prefdata.checks import batched

        registry.update({c: (_defaults_of(registry[c][0], f), lambda i: {"inputs": i})
                         for c, f in batched.stand_ins().items()})
        skipped = {c for c, check in CHECKS.items() if not check.runs_on(SHARDS)}
    planned: list[Any] = []  # per check, in registry order: its results, a Future of them, or what runs it
    pool: ThreadPoolExecutor | None = None
    try:
        for check_id, (function, bind) in registry.items():
            if only is not None and check_id not in only:
                continue
            params = dict(config["checks"].get(check_id) or {})
            reason = params.pop("waive", None)
            if reason:
                planned.append([CheckResult(check_id, "skip", message=f"waived: {reason}", details={"waived": True})])
            elif check_id in skipped:
                planned.append([not_here(check_id, SHARDS)])
            elif check_id in background:
                pool = pool or ThreadPoolExecutor(1, thread_name_prefix="checklist")
                planned.append(pool.submit(_run_one, check_id, function, bind, params, inputs))
            else:  # run below, once every background check has started
                planned.append((check_id, function, bind, params))
        waiting = [k for k, item in enumerate(planned) if isinstance(item, tuple)]
        for k in sorted(waiting, key=lambda k: not CHECKS[planned[k][0]].run_first):  # stable: registry order
            planned[k] = _run_one(*planned[k], inputs)
        results: list[CheckResult] = []
        for item in planned:
            results.extend(item.result() if isinstance(item, Future) else item)
        return results
    finally:
        if pool is not None:
            pool.shutdown(wait=True)



def run_checklist_on_dask(inputs: CheckInputs, config: dict[str, Any] | None = None, only: list[str] | None = None,
                          partition_rows: int = 250_000) -> list[CheckResult]:
    """run_checklist with the checks whose registry entry's `engines` include Dask run on the current
    Dask client, the others here (on the thin frame of a sharded input): the same results, in registry
    order, each check's waiver, error and `seconds` handled as run_checklist handles them."""
    from .distributed import run_on_dask

    config = config or default_config()
    wanted = [c for c in CHECKS if only is None or c in only]
    on_dask = [c for c in wanted if CHECKS[c].runs_on(DASK)]
    results: dict[str, list[CheckResult]] = {c: [] for c in wanted}
    for result in run_checklist(inputs, config, only=[c for c in wanted if c not in on_dask]):
        results[result.id if result.id in results else result.id.split(".")[0]].append(result)  # gx.RULE
    running = []
    for c in on_dask:
        waived = (config["checks"].get(c) or {}).get("waive")
        if waived:
            results[c] = [CheckResult(c, "skip", message=f"waived: {waived}", details={"waived": True})]
        else:
            running.append(c)
    if running:
        results.update(run_on_dask(inputs, config, running, _run_one, partition_rows))
    return [r for c in wanted for r in results[c]]

def strictly(results: list[CheckResult]) -> list[CheckResult]:
    """--strict: a check that could not run fails (a waived one, a recorded decision, does not)."""
    return [
        replace(r, status="fail", message=f"strict: could not run: {r.message}")
        if r.status == "skip" and not r.details.get("waived") else r
        for r in results
    ]


def gate(results: list[CheckResult]) -> bool:
    """Passed when no check failed or errored."""
    return all(r.status not in ("fail", "error") for r in results)


def whole_file_parts(inputs: CheckInputs, results: list[CheckResult], config: dict[str, Any]) -> None:
    """An in-memory run of a version of one data file: each reusable check's result is that file's
    part (inputs.derived[PARTS]), under the parameters it ran with (its defaults under the config's)."""
    from .batched import PARTS, as_part, reusable

    if inputs.shards is not None or not inputs.part_keys or len(inputs.part_keys) != 1:
        return
    [key] = inputs.part_keys
    parts = inputs.derived.setdefault(PARTS, {})
    for result in results:
        params = dict(config["checks"].get(result.id) or {})
        if result.id in CHECKS and reusable(result.id) and "waive" not in params and result.status in ("pass", "fail"):
            params = {**_parameters(CHECKS[result.id].function), **params}
            parts.setdefault(key, {})[result.id] = as_part(params, inputs.pairs.height, result)
