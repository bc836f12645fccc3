"""Run the whole checklist: bind each check to its inputs and its configured thresholds.

Checks are pure functions; this module is the one place that knows which input each needs, turns
a crash inside one check into an `error` result (never a crashed run), and decides the gate.
Results always come in registry order, whatever order the checks run in: the GX suite runs on a
thread beside the others (BACKGROUND), near_duplicates before exact_duplicates (RUN_FIRST), which
reuses the row hashes it leaves in CheckInputs.derived.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from prefdata.checks.base import CheckResult
from prefdata.base.errors import UnusableInput


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
    lost: pl.DataFrame | None = None            # rows reading a data file (and --votes) left out: id, reason
    rows_read: int | None = None                # rows read from them (default: the pairs given)
    tokenizer: Any = None                       # the trainer's tokenizer, loaded (--tokenizer): template_fit
    # pairs too big for memory (checks/batched.py): their Parquet shards (checks/shards.py Shards); `pairs`
    # is then the thin frame (no responses: their lengths and the chosen text's hash), `sft` thinned too
    shards: Any = None
    # what one check computes from `pairs` and another reuses (the normalised texts' row hashes:
    # checks/dedup.py EXACT_KEYS); filled during a run, keyed by what made it, never read by the gate
    derived: dict[str, Any] = field(default_factory=dict)


def lost_for(inputs: CheckInputs, check_id: str) -> pl.DataFrame | None:
    """The rows lost at read that count in `check_id`: degenerate ones (identical sides, an empty
    text) in degenerate_pairs, every other one in unreadable_rows, so each counts once."""
    from prefdata.checks.structure import degenerate_at_read

    if inputs.lost is None or inputs.lost.height == 0:
        return None
    reasons = inputs.lost["reason"].to_list()
    degenerate = pl.Series([degenerate_at_read(r) is not None for r in reasons], dtype=pl.Boolean)
    return inputs.lost.filter(degenerate if check_id == "degenerate_pairs" else ~degenerate)


@dataclass(frozen=True)
class Range:
    """The values a numeric parameter may take: bounds (None: unbounded), open or closed."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def admits(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if value != value:  # NaN
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        kind = "an integer " if self.integer else ""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{kind}in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"{kind}{'>' if self.low_open else '>='} {self.low:g}"
        return f"{kind}{'<' if self.high_open else '<='} {self.high:g}"


SHARE = Range(0, 1)                               # a fraction of rows
P_VALUE = Range(0, 1, low_open=True, high_open=True)
SIMILARITY = Range(0, 1, low_open=True)           # a Jaccard threshold: 0 would join everything
LENGTH_RATIO = Range(1)                           # longer / shorter is never below 1
COUNT = Range(0, integer=True)
POSITIVE = Range(1, integer=True)                 # sizes and n-gram lengths that 0 would break

# The range of every numeric parameter a config may set; load_config refuses values outside it
# (a negative min_pairs used to make min_size pass). tests/test_checklist.py checks that every
# numeric parameter has one and that the defaults lie in it.
RANGES: dict[tuple[str, str], Range] = {
    ("prompt_distribution", "alpha"): P_VALUE,
    ("prompt_distribution", "max_samples"): POSITIVE,
    ("prompt_distribution", "seed"): COUNT,
    ("prompt_distribution", "n_permutations"): POSITIVE,
    ("length_ratio", "max_ratio"): LENGTH_RATIO,
    ("length_ratio", "max_violation_share"): SHARE,
    ("agreement", "threshold"): Range(-1, 1),     # Krippendorff's alpha: 1 perfect, 0 chance, < 0 worse
    ("agreement", "max_quality_gap"): SHARE,      # Dawid-Skene qualities are accuracies
    ("agreement", "min_annotator_quality"): SHARE,
    ("agreement", "min_annotator_votes"): COUNT,
    ("safety", "max_flagged_share"): SHARE,
    ("safety", "score_threshold"): SHARE,         # a classifier's score
    ("category_coverage", "min_share"): SHARE,
    ("answer_leakage", "ngram"): POSITIVE,
    ("answer_leakage", "max_overlap"): Range(0, 1, high_open=True),
    ("answer_leakage", "min_chars"): COUNT,
    ("label_direction", "min_agreement"): SHARE,
    ("label_audit", "min_agreement"): SHARE,
    ("split_isolation", "near_threshold"): SIMILARITY,
    ("min_size", "min_pairs"): COUNT,
    ("min_size", "min_pairs_hard"): COUNT,
    ("sft_subset", "min_ratio"): Range(0),        # SFT rows / train pairs
    ("annotation_guidelines", "min_chars"): COUNT,
    ("exact_duplicates", "max_share"): SHARE,
    ("near_duplicates", "threshold"): SIMILARITY,
    ("near_duplicates", "num_perm"): POSITIVE,
    ("near_duplicates", "ngram"): POSITIVE,
    ("near_duplicates", "max_share"): SHARE,
    ("near_duplicates", "seed"): COUNT,
    ("gx", "max_length_ratio"): LENGTH_RATIO,
    ("gx", "max_text_chars"): POSITIVE,
    ("gx", "min_rows"): COUNT,
    ("unreadable_rows", "max_share"): SHARE,
    ("template_fit", "max_length"): POSITIVE,
    ("template_fit", "max_offending_share"): SHARE,
}


def _choices() -> dict[tuple[str, str], tuple[str, ...]]:
    """The values a text parameter may take, from the checks that define them."""
    from prefdata.checks import agreement, structure

    return {("agreement", "level"): agreement.LEVELS, ("min_size", "kind"): structure.SIZE_KINDS,
            ("near_duplicates", "scope"): ("pair", "prompt")}


def _registry() -> dict[str, tuple[Callable[..., Any], Callable[[CheckInputs], dict[str, Any]]]]:
    """check id -> (function, how to bind its data arguments). Imported here, not at module load."""
    from prefdata.checks import agreement, content, dedup, direction, gx_suite, isolation, structure, template_fit

    def train_and_eval(i: CheckInputs) -> dict[str, Any]:
        train, held_out = isolation.split_train_eval(i.pairs)
        return {"train": train, "eval_pairs": i.eval_pairs if i.eval_pairs is not None else held_out, "votes": i.votes}

    return {
        "prompt_distribution": (content.check_prompt_distribution,
                                lambda i: {"prompts": isolation.split_train_eval(i.pairs)[0]["prompt"], "reference": i.reference_prompts}),
        "same_policy": (structure.check_same_policy, lambda i: {"pairs": i.pairs, "comparisons": i.comparisons, "lineage": i.lineage}),
        "length_ratio": (structure.check_length_ratio, lambda i: {"pairs": i.pairs}),
        "agreement": (agreement.check_agreement, lambda i: {"votes": i.votes}),
        # no result unless the votes carry the dataset's labels (a label audit): never a skip
        "label_audit": (agreement.check_label_audit, lambda i: {"votes": i.votes}),
        "safety": (content.check_safety, lambda i: {"pairs": i.pairs}),
        "category_coverage": (content.check_category_coverage, lambda i: {"pairs": i.pairs}),
        "answer_leakage": (content.check_answer_leakage, lambda i: {"pairs": i.pairs}),
        "label_direction": (direction.check_label_direction, lambda i: {"pairs": i.pairs, "verdicts": i.verdicts}),
        "split_isolation": (isolation.check_split_isolation, train_and_eval),
        "min_size": (structure.check_min_size, lambda i: {"pairs": i.pairs}),
        "sft_subset": (structure.check_sft_subset, lambda i: {"pairs": i.pairs, "sft": i.sft}),
        "annotation_guidelines": (structure.check_annotation_guidelines, lambda i: {"card_text": i.card_text}),
        "exact_duplicates": (dedup.check_exact_duplicates, lambda i: {"pairs": i.pairs, "derived": i.derived}),
        "near_duplicates": (dedup.check_near_duplicates, lambda i: {"pairs": i.pairs, "derived": i.derived}),
        "degenerate_pairs": (structure.check_degenerate_pairs,
                             lambda i: {"pairs": i.pairs, "comparisons": i.comparisons,
                                        "lost": lost_for(i, "degenerate_pairs")}),
        "unreadable_rows": (structure.check_unreadable_rows,
                            lambda i: {"lost": lost_for(i, "unreadable_rows"),
                                       "n_read": i.rows_read if i.rows_read is not None else i.pairs.height}),
        "gx": (gx_suite.run_expectations, lambda i: {"pairs": i.pairs, "docs_dir": i.docs_dir}),
        "template_fit": (template_fit.check_template_fit, lambda i: {"pairs": i.pairs, "tokenizer": i.tokenizer}),
    }


def default_config() -> dict[str, Any]:
    return yaml.safe_load(resources.files("prefdata.checks").joinpath("checklist.yaml").read_text())


# Configs that ship with prefdata, named instead of a path (`--config small-data`).
PRESETS = ("small-data",)


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """The default checklist with a user's YAML laid over it (a file, or a shipped preset's name);
    unknown checks or parameters are errors."""
    config = default_config()
    if path is None:
        return config
    try:
        if str(path) in PRESETS and not Path(path).exists():
            text = resources.files("prefdata.checks").joinpath(f"{path}.yaml").read_text()
        else:
            text = Path(path).read_text()
        user = yaml.safe_load(text) or {}
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
            _check_range(path, check_id, name, value)
        config["checks"][check_id] = {**config["checks"].get(check_id, {}), **params}
    if "strict" in user:
        if not isinstance(user["strict"], bool):  # YAML reads `maybe` or `"no"` as text, which bool() takes as true
            raise UnusableInput(f"{path}: strict must be true or false, not {user['strict']!r}")
        config["strict"] = user["strict"]
    return config


# Data arguments with a default that are not tunable: the runner binds them, a config may not set them.
BOUND = ("derived",)


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
    """A value of the right type must also lie in its parameter's range (RANGES) or choices."""
    where = f"{path}: {check_id}.{name} = {value!r}"
    allowed = RANGES.get((check_id, name))
    if allowed is not None and value is not None and not allowed.admits(value):
        raise UnusableInput(f"{where} is out of range; allowed: {allowed}")
    choices = _choices().get((check_id, name))
    if choices is not None and value not in choices:
        raise UnusableInput(f"{where} is not allowed; choose one of {', '.join(choices)}")


# Checks run on a thread beside the others. The GX suite spends its time in great_expectations'
# own Python (its import alone is 3-6 s, its checkpoint a few more) while the other checks spend
# theirs in polars and numpy, which release the GIL: on two cores the two overlap almost fully.
BACKGROUND = ("gx",)
# Checks run before the others (results still come in registry order): near_duplicates hashes the
# normalised texts for exact_duplicates in the pass it makes anyway (CheckInputs.derived).
RUN_FIRST = ("near_duplicates",)


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
                  only: list[str] | None = None, background: tuple[str, ...] = BACKGROUND) -> list[CheckResult]:
    """Every check (or those in `only`) in registry order; the checks in `background` run on one
    thread beside the others (same results, same order: tests/test_checklist.py)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    config = config or default_config()
    registry = _registry()
    if inputs.shards is not None:  # the checks that read the responses run over the shards
        from prefdata.checks import batched

        registry.update({c: (_defaults_of(registry[c][0], f), lambda i: {"inputs": i})
                         for c, f in batched.registry().items()})
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
            elif check_id in background:
                pool = pool or ThreadPoolExecutor(1, thread_name_prefix="checklist")
                planned.append(pool.submit(_run_one, check_id, function, bind, params, inputs))
            else:  # run below, once every background check has started
                planned.append((check_id, function, bind, params))
        waiting = [k for k, item in enumerate(planned) if isinstance(item, tuple)]
        for k in sorted(waiting, key=lambda k: planned[k][0] not in RUN_FIRST):  # stable: registry order
            planned[k] = _run_one(*planned[k], inputs)
        results: list[CheckResult] = []
        for item in planned:
            results.extend(item.result() if isinstance(item, Future) else item)
        return results
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


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
