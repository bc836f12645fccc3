"""Run the whole checklist: bind each check to its inputs and its configured thresholds.

Checks are pure functions; this module is the one place that knows which input each needs, turns
a crash inside one check into an `error` result (never a crashed run), and decides the gate.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from prefdata.checks.base import CheckResult
from prefdata.errors import UnusableInput


@dataclass
class CheckInputs:
    pairs: pl.DataFrame                         # every split of the dataset under check
    comparisons: pl.DataFrame | None = None     # all comparisons with their labels (ties too)
    votes: pl.DataFrame | None = None           # long votes: pair_id (= pairs.id), annotator, vote
    eval_pairs: pl.DataFrame | None = None      # a separate eval set (--eval)
    reference_prompts: pl.Series | None = None  # production prompts (--reference-prompts)
    card_text: str | None = None                # the dataset card / guideline document
    sft: pl.DataFrame | None = None             # the version's chosen-only SFT subset
    lineage: dict[str, Any] | None = None
    verdicts: pl.DataFrame | None = None        # an independent scorer's verdicts: id, preferred
    docs_dir: Path | None = None                # where GX writes its Data Docs


def _registry() -> dict[str, tuple[Callable[..., Any], Callable[[CheckInputs], dict[str, Any]]]]:
    """check id -> (function, how to bind its data arguments). Imported here, not at module load."""
    from prefdata.checks import agreement, content, dedup, direction, gx_suite, isolation, structure

    def train_and_eval(i: CheckInputs) -> dict[str, Any]:
        train, held_out = isolation.split_train_eval(i.pairs)
        return {"train": train, "eval_pairs": i.eval_pairs if i.eval_pairs is not None else held_out, "votes": i.votes}

    return {
        "prompt_distribution": (content.check_prompt_distribution,
                                lambda i: {"prompts": isolation.split_train_eval(i.pairs)[0]["prompt"], "reference": i.reference_prompts}),
        "same_policy": (structure.check_same_policy, lambda i: {"pairs": i.pairs, "comparisons": i.comparisons, "lineage": i.lineage}),
        "length_ratio": (structure.check_length_ratio, lambda i: {"pairs": i.pairs}),
        "agreement": (agreement.check_agreement, lambda i: {"votes": i.votes}),
        "safety": (content.check_safety, lambda i: {"pairs": i.pairs}),
        "category_coverage": (content.check_category_coverage, lambda i: {"pairs": i.pairs}),
        "answer_leakage": (content.check_answer_leakage, lambda i: {"pairs": i.pairs}),
        "label_direction": (direction.check_label_direction, lambda i: {"pairs": i.pairs, "verdicts": i.verdicts}),
        "split_isolation": (isolation.check_split_isolation, train_and_eval),
        "min_size": (structure.check_min_size, lambda i: {"pairs": i.pairs}),
        "sft_subset": (structure.check_sft_subset, lambda i: {"pairs": i.pairs, "sft": i.sft}),
        "annotation_guidelines": (structure.check_annotation_guidelines, lambda i: {"card_text": i.card_text}),
        "exact_duplicates": (dedup.check_exact_duplicates, lambda i: {"pairs": i.pairs}),
        "near_duplicates": (dedup.check_near_duplicates, lambda i: {"pairs": i.pairs}),
        "degenerate_pairs": (structure.check_degenerate_pairs, lambda i: {"pairs": i.pairs, "comparisons": i.comparisons}),
        "gx": (gx_suite.run_expectations, lambda i: {"pairs": i.pairs, "docs_dir": i.docs_dir}),
    }


def default_config() -> dict[str, Any]:
    return yaml.safe_load(resources.files("prefdata.checks").joinpath("checklist.yaml").read_text())


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """The default checklist with a user's YAML laid over it; unknown checks or parameters are errors."""
    config = default_config()
    if path is None:
        return config
    try:
        user = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UnusableInput(f"{path}: cannot read the checklist config ({exc})".replace("\n", " ")) from None
    if not isinstance(user, dict) or not isinstance(user.get("checks", {}), dict):
        raise UnusableInput(f"{path}: expected a mapping with 'checks:' (see checks/checklist.yaml)")
    unknown = set(user) - {"strict", "checks"}
    if unknown:
        raise UnusableInput(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; use 'strict' and 'checks'")
    registry = _registry()
    for check_id, params in (user.get("checks") or {}).items():
        if check_id not in registry:
            raise UnusableInput(f"{path}: unknown check {check_id!r}; known: {', '.join(registry)}")
        params = params or {}
        defaults = _parameters(registry[check_id][0])
        bad = set(params) - set(defaults) - {"waive"}
        if bad:
            raise UnusableInput(f"{path}: check {check_id!r} has no parameter {', '.join(sorted(bad))}; "
                                f"it takes {', '.join(sorted(defaults))} (or waive)")
        for name, value in params.items():
            _check_type(path, check_id, name, value, defaults.get(name))
        config["checks"][check_id] = {**config["checks"].get(check_id, {}), **params}
    if "strict" in user:
        config["strict"] = bool(user["strict"])
    return config


def _parameters(function: Callable[..., Any]) -> dict[str, Any]:
    """The tunable parameters of a check (those with defaults), with their defaults."""
    return {n: p.default for n, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


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


def run_checklist(inputs: CheckInputs, config: dict[str, Any] | None = None,
                  only: list[str] | None = None) -> list[CheckResult]:
    config = config or default_config()
    results: list[CheckResult] = []
    for check_id, (function, bind) in _registry().items():
        if only is not None and check_id not in only:
            continue
        params = dict(config["checks"].get(check_id) or {})
        reason = params.pop("waive", None)
        if reason:
            results.append(CheckResult(check_id, "skip", message=f"waived: {reason}", details={"waived": True}))
            continue
        started = time.perf_counter()
        try:
            produced = function(**bind(inputs), **params)
        except Exception as exc:  # one broken check reports an error; the others still run
            produced = CheckResult(check_id, "error", message=f"{type(exc).__name__}: {exc}".splitlines()[0])
        seconds = round(time.perf_counter() - started, 3)
        for result in produced if isinstance(produced, list) else [produced]:
            result.details.setdefault("seconds", seconds)
            results.append(result)
    return results


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
