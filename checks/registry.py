"""The one registry of the checklist's checks: CHECKS, check id -> Check, in the order results come in.

A Check holds the check's function, how its arguments bind to what a run has (CheckInputs), the
ranges and choices of its parameters, and the traits the three runners read:

    row_local    its verdict on a row depends on that row alone (`merge` given), so it can run on
                 parts of the rows: shard by shard (batched.py), partition by partition (distributed.py)
    merge        how the parts' results combine: offending ids concatenated in row order, counts
                 summed, then the check's own `derive` and `message` (batched.py `combine`)
    needs_text   it reads the responses' text, which a sharded run's thin frame lacks: batched.py runs
                 it over the shards (row-local ones shard by shard, the others on an engine of their own)
    needs        the inputs besides the pairs it cannot judge without (it skips): a Dask run has the
                 pairs alone, so it runs the row-local checks that need nothing else
    reads        which part of a conversation it reads, said by `check --list-checks` and README: the
                 whole conversation (`prompt`, every turn), the final replies (`chosen`, `rejected`),
                 or the user's turns alone (bound by `_user_turns`: the assistant's earlier turns are
                 no leak, no benchmark prompt and no harmful request)
    engines      where it runs: IN_MEMORY (always), SHARDS (a sharded run: checks/batched.py), DASK
                 (checks/distributed.py); a runner gives a check it may not run one line (a skip)
    shard_engine its own code over the shards ("module:function", imported when a sharded run needs
                 it) when it needs the text and is not row-local (row-local ones run shard by shard)
    dask_engine  its own code on Dask ("module:function": dask loads only then) when it is not a
                 row-local check that needs nothing else (those run partition by partition)
    background   run on a thread beside the others (its time spent in Python, theirs in polars)
    run_first    run before the others: it leaves in CheckInputs.derived what a later one reuses

checklist.py runs the checks in memory, batched.py and distributed.py pick from them by these traits;
none keeps a list of its own (tests/test_registry.py). Parameter defaults of the built-in checks live
in checks/checklist.yaml (base.default).

CHECKS is the built-in checks (BUILT_IN) and, after them, the checks registered from outside: the
generic registry's kind "check" (prefdata/base/registry.py: the entry-point group `prefdata.checks`
and the `[checks]` table of the file PREFDATA_REGISTRY names), each entry naming a `Check` object.
A plugin cannot edit checklist.yaml, so its defaults are its function's keyword defaults
(`plugin_defaults`, which checklist.py's default config adds). They load on first use, not at import
(a plugin's module imports this one), once per registry file.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.data.records import with_user_turns

from . import agreement, content, dedup, direction, gx_suite, isolation, structure, template_fit


@dataclass
class CheckInputs:
    pairs: pl.DataFrame                         # every split of the dataset under check
    comparisons: pl.DataFrame | None = None     # all comparisons with their labels (ties too)
    votes: pl.DataFrame | None = None           # long votes: pair_id (= pairs.id), annotator, vote
    eval_pairs: pl.DataFrame | None = None      # a separate eval set (--eval)
    reference_prompts: pl.Series | None = None  # production prompts (--reference-prompts)
    benchmarks: dict[str, pl.DataFrame] | None = None  # benchmark name -> its items: item, prompt (--benchmark)
    card_text: str | None = None                # the dataset card / guideline document
    sft: pl.DataFrame | None = None             # the version's chosen-only SFT subset
    lineage: dict[str, Any] | None = None
    verdicts: pl.DataFrame | None = None        # an independent scorer's verdicts: id, preferred
    docs_dir: Path | None = None                # where GX writes its Data Docs
    lost: pl.DataFrame | None = None            # rows reading a data file (and --votes) left out: id, reason
    rows_read: int | None = None                # rows read from them (default: the pairs given)
    tokenizer: Any = None                       # the trainer's tokenizer, loaded (--tokenizer): template_fit
    rendering: Any = None                       # how template_fit renders the pairs (prefdata.models.chat.Rendering)
    # pairs too big for memory (checks/batched.py): their Parquet shards (checks/shards.py Shards); `pairs`
    # is then the thin frame (no responses: their lengths and the chosen text's hash), `sft` thinned too
    shards: Any = None
    # what one check computes from `pairs` and another reuses (the normalised texts' row hashes:
    # checks/dedup.py EXACT_KEYS); filled during a run, keyed by what made it, never read by the gate
    derived: dict[str, Any] = field(default_factory=dict)
    # a growing version's parent's row-local results per data file (prefdata.gate.runner, a validated
    # parent's signed artifacts): file sha256 -> check id -> {params, rows, result}. A row-local check of
    # a sharded run takes a file's stored result instead of reading the file (checks/batched.py)
    reuse: dict[str, dict[str, Any]] | None = None
    part_keys: list[str] | None = None          # the data files' sha256, in row order (a store version)


def lost_for(inputs: CheckInputs, check_id: str) -> pl.DataFrame | None:
    """The rows lost at read that count in `check_id`: degenerate ones (identical sides, an empty
    text) in degenerate_pairs, every other one in unreadable_rows, so each counts once."""
    if inputs.lost is None or inputs.lost.height == 0:
        return None
    reasons = inputs.lost["reason"].to_list()
    degenerate = pl.Series([structure.degenerate_at_read(r) is not None for r in reasons], dtype=pl.Boolean)
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


@dataclass(frozen=True)
class Merge:
    """How a row-local check's results on parts of the rows become its result on all of them
    (batched.py `combine`): offending ids concatenated in row order, metric = offending / rows,
    counts summed, examples cut, parameters the first part's; then `derive` recomputes what does not
    sum (length_ratio's bias), and `message(details, offending, rows, threshold)` is the check's own."""
    message: Callable[[dict[str, Any], int, int, float], str]
    derive: Callable[[dict[str, Any]], dict[str, Any]] | None = None


# the engines a check may run on (Check.engines)
IN_MEMORY, SHARDS, DASK = "memory", "shards", "dask"
ENGINES = (IN_MEMORY, SHARDS, DASK)
EVERYWHERE = ENGINES
NOT_ON_DASK = (IN_MEMORY, SHARDS)


@dataclass(frozen=True)
class Check:
    function: Callable[..., Any]
    bind: Callable[[CheckInputs], dict[str, Any]]  # its data arguments from a run's inputs
    # the range of every numeric parameter a config may set (load_config refuses values outside it:
    # a negative min_pairs used to make min_size pass), the allowed values of a text parameter
    ranges: dict[str, Range] = field(default_factory=dict)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    merge: Merge | None = None                     # given for the row-local checks, and only for them
    needs_text: bool = False
    needs: tuple[str, ...] = ()                    # CheckInputs fields
    # the parameters whose value at one end of its range lets every row pass ("low" or "high" end; "empty"
    # for a list): such a value turns the check off, which is a waiver, and load_config asks for one
    off_at: dict[str, str] = field(default_factory=dict)
    reads: str = ""
    # where it runs (module docstring); a check from outside runs in memory unless it says more
    engines: tuple[str, ...] = (IN_MEMORY,)
    shard_engine: str | None = None  # "module:function", called (inputs: CheckInputs, **params)
    dask_engine: str | None = None   # "module:function", called (run: distributed.DaskRun, **params)
    background: bool = False
    run_first: bool = False

    def runs_on(self, engine: str) -> bool:
        return engine in self.engines

    def code(self, target: str) -> Callable[..., Any]:
        """An engine's "module:function" (this check's shard_engine or dask_engine), imported now."""
        import importlib

        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)

    def problems(self) -> list[str]:
        """What makes these traits contradict each other (a plugin with any is refused)."""
        found = [f"unknown engine {e!r} (use {', '.join(ENGINES)})" for e in self.engines if e not in ENGINES]
        if IN_MEMORY not in self.engines:
            found.append(f"every check runs {IN_MEMORY!r}")
        if self.runs_on(SHARDS) and self.needs_text and not self.row_local and not self.shard_engine:
            found.append(f"it needs the responses' text and is not row-local: {SHARDS!r} needs a shard_engine")
        if self.runs_on(DASK) and not (self.row_local and not self.needs) and not self.dask_engine:
            found.append(f"only a row-local check that needs nothing else runs on {DASK!r} without a dask_engine")
        found += [f"{name} {target!r} is not module:function" for name, target in
                  (("shard_engine", self.shard_engine), ("dask_engine", self.dask_engine))
                  if target is not None and target.count(":") != 1]
        if not callable(self.function) or not callable(self.bind):
            found.append("its function and bind must be callables")
        return found

    def turns_off(self, name: str, value: Any) -> bool:
        end = self.off_at.get(name)
        if end == "empty":
            return isinstance(value, (list, tuple)) and not value
        span = self.ranges.get(name)
        if end is None or span is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return value <= span.low if end == "low" else span.high is not None and value >= span.high

    @property
    def row_local(self) -> bool:
        return self.merge is not None


def _pairs(i: CheckInputs) -> dict[str, Any]:
    return {"pairs": i.pairs}


def _user_turns(i: CheckInputs) -> dict[str, Any]:
    """The pairs with `prompt` as the user's turns (records.with_user_turns: as they are for text prompts)."""
    return {"pairs": with_user_turns(i.pairs)}


def _train_and_eval(i: CheckInputs) -> dict[str, Any]:
    train, held_out = isolation.split_train_eval(i.pairs)
    return {"train": train, "eval_pairs": i.eval_pairs if i.eval_pairs is not None else held_out, "votes": i.votes}


BUILT_IN: dict[str, Check] = {
    "prompt_distribution": Check(
        content.check_prompt_distribution,
        lambda i: {"prompts": isolation.split_train_eval(i.pairs)[0]["prompt"], "reference": i.reference_prompts},
        ranges={"alpha": P_VALUE, "max_samples": POSITIVE, "seed": COUNT, "n_permutations": POSITIVE},
        needs=("reference_prompts",),
        reads="the whole conversation (prompt) of the train split", engines=NOT_ON_DASK),
    "same_policy": Check(structure.check_same_policy,
                         lambda i: {"pairs": i.pairs, "comparisons": i.comparisons, "lineage": i.lineage},
                         reads="the models recorded for each reply (no text)", engines=NOT_ON_DASK),
    "length_ratio": Check(structure.check_length_ratio, _pairs,
                          ranges={"max_ratio": LENGTH_RATIO, "max_violation_share": SHARE},
                          off_at={"max_violation_share": "high"},
                          merge=Merge(structure.length_ratio_message, structure.length_ratio_merged),
                          reads="the final replies", engines=EVERYWHERE),
    "agreement": Check(
        agreement.check_agreement, lambda i: {"votes": i.votes},
        ranges={"threshold": Range(-1, 1),  # Krippendorff's alpha: 1 perfect, 0 chance, < 0 worse
                "max_quality_gap": SHARE, "min_annotator_quality": SHARE,  # Dawid-Skene qualities are accuracies
                "min_annotator_votes": COUNT},
        choices={"level": agreement.LEVELS}, needs=("votes",), off_at={"threshold": "low"},
        reads="the annotators' votes (no text)", engines=EVERYWHERE,
        dask_engine="prefdata.checks.distributed:agreement_on"),
    # no result unless the votes carry the dataset's labels (a label audit): never a skip
    "label_audit": Check(agreement.check_label_audit, lambda i: {"votes": i.votes},
                         ranges={"min_agreement": SHARE}, needs=("votes",), off_at={"min_agreement": "low"},
                         reads="the audit's votes and the dataset's labels (no text)", engines=NOT_ON_DASK),
    "safety": Check(content.check_safety, _user_turns,
                    ranges={"max_flagged_share": SHARE, "score_threshold": SHARE},  # a classifier's score
                    off_at={"max_flagged_share": "high", "fail_on": "empty", "score_threshold": "high"},
                    merge=Merge(content.safety_message), needs_text=True,
                    reads="the user turns and the chosen reply", engines=EVERYWHERE),
    "category_coverage": Check(content.check_category_coverage, _pairs, ranges={"min_share": SHARE},
                               off_at={"min_share": "low"},
                               reads="the category column, else the whole conversation (keyword tagger)",
                               engines=NOT_ON_DASK),
    "answer_leakage": Check(content.check_answer_leakage, _user_turns,
                            ranges={"ngram": POSITIVE, "max_overlap": Range(0, 1, high_open=True), "min_chars": COUNT},
                            merge=Merge(content.leakage_message), needs_text=True,
                            reads="the user turns, for the chosen reply (or a reference answer)", engines=EVERYWHERE),
    "label_direction": Check(direction.check_label_direction, lambda i: {"pairs": i.pairs, "verdicts": i.verdicts},
                             ranges={"min_agreement": SHARE}, needs=("verdicts",), off_at={"min_agreement": "low"},
                             reads="the scorer's verdicts; a judge sees the whole conversation and both final replies",
                             engines=NOT_ON_DASK),
    "split_isolation": Check(isolation.check_split_isolation, _train_and_eval, ranges={"near_threshold": SIMILARITY},
                             reads="the whole conversation (prompt), annotators and sources", engines=EVERYWHERE,
                             dask_engine="prefdata.checks.distributed:split_isolation_on"),
    # reads the prompts only (and their messages), which a sharded run's thin frame has: it runs there unchanged
    "decontamination": Check(isolation.check_decontamination,
                             lambda i: {"pairs": with_user_turns(i.pairs), "benchmarks": i.benchmarks},
                             ranges={"ngram": POSITIVE, "max_overlap": Range(0, 1, high_open=True),
                                     "max_contaminated_share": SHARE},
                             needs=("benchmarks",), off_at={"max_contaminated_share": "high"},
                             reads="the user turns", engines=NOT_ON_DASK),
    "min_size": Check(structure.check_min_size, _pairs, ranges={"min_pairs": COUNT, "min_pairs_hard": COUNT},
                      choices={"kind": structure.SIZE_KINDS}, off_at={"min_pairs": "low", "min_pairs_hard": "low"},
                      reads="the row count", engines=NOT_ON_DASK),
    "sft_subset": Check(structure.check_sft_subset, lambda i: {"pairs": i.pairs, "sft": i.sft},
                        ranges={"min_ratio": Range(0)}, off_at={"min_ratio": "low"},  # SFT rows / train pairs
                        reads="the chosen replies and the SFT subset", engines=NOT_ON_DASK),
    "annotation_guidelines": Check(structure.check_annotation_guidelines, lambda i: {"card_text": i.card_text},
                                   ranges={"min_chars": COUNT},  # no card is a failure, not a skip
                                   reads="the dataset card", engines=NOT_ON_DASK),
    "exact_duplicates": Check(dedup.check_exact_duplicates, lambda i: {"pairs": i.pairs, "derived": i.derived},
                              ranges={"max_share": SHARE}, needs_text=True, off_at={"max_share": "high"},
                              reads="the whole conversation and both final replies", engines=EVERYWHERE,
                              shard_engine="prefdata.checks.batched:exact_duplicates",
                              dask_engine="prefdata.checks.distributed:exact_duplicates_on"),
    "near_duplicates": Check(dedup.check_near_duplicates, lambda i: {"pairs": i.pairs, "derived": i.derived},
                             ranges={"threshold": SIMILARITY, "num_perm": POSITIVE, "ngram": POSITIVE,
                                     "max_share": SHARE, "seed": COUNT},
                             choices={"scope": ("pair", "prompt")}, needs_text=True, off_at={"max_share": "high"},
                             reads="the whole conversation and both final replies (scope prompt: the conversation)",
                             engines=EVERYWHERE, shard_engine="prefdata.checks.batched:near_duplicates",
                             dask_engine="prefdata.checks.distributed:near_duplicates_on",
                             # it hashes the normalised texts for exact_duplicates in the pass it makes anyway
                             run_first=True),
    "degenerate_pairs": Check(structure.check_degenerate_pairs,
                              lambda i: {"pairs": i.pairs, "comparisons": i.comparisons,
                                         "lost": lost_for(i, "degenerate_pairs")},
                              merge=Merge(structure.degenerate_message), needs_text=True,
                              reads="the final replies, and the comparisons' labels", engines=EVERYWHERE),
    "unreadable_rows": Check(structure.check_unreadable_rows,
                             lambda i: {"lost": lost_for(i, "unreadable_rows"),
                                        "n_read": i.rows_read if i.rows_read is not None else i.pairs.height},
                             ranges={"max_share": SHARE}, off_at={"max_share": "high"},
                             reads="the rows left out at read", engines=NOT_ON_DASK),
    "gx": Check(gx_suite.run_expectations, lambda i: {"pairs": i.pairs, "docs_dir": i.docs_dir},
                ranges={"max_length_ratio": LENGTH_RATIO, "max_text_chars": POSITIVE, "min_rows": COUNT},
                reads="the whole conversation (prompt) and the final replies: nulls, lengths, ids", engines=NOT_ON_DASK,
                # great_expectations spends its time in its own Python (its import alone 3-6 s), the other
                # checks theirs in polars and numpy, which release the GIL: on two cores they overlap
                background=True),
    "template_fit": Check(template_fit.check_template_fit, lambda i: {"pairs": i.pairs, "tokenizer": i.tokenizer,
                                                                           "rendering": i.rendering},
                          ranges={"max_length": POSITIVE, "max_offending_share": SHARE},
                          off_at={"max_offending_share": "high"},
                          merge=Merge(template_fit.fit_message), needs_text=True, needs=("tokenizer",),
                          reads="the whole conversation with each final reply, rendered as the trainer renders it",
                          engines=NOT_ON_DASK),  # a Dask run has no tokenizer
}


# -- every check: the built-ins, then those registered from outside ----------------------------------


def _registered() -> dict[str, Check]:
    """The checks of the generic registry's kind "check", each entry's `Check` loaded; one line
    (UnusableInput) for an entry that names no usable Check or takes a built-in's name."""
    from prefdata.base.errors import UnusableInput
    from prefdata.base.registry import entries, load

    found: dict[str, Check] = {}
    for name, entry in entries("check").items():
        where = f"check {name!r} ({entry.source}: {entry.target})"
        if name in BUILT_IN:
            raise UnusableInput(f"{where}: {name!r} is a built-in check's name; register it under another name")
        check = load("check", name, "check")
        if not isinstance(check, Check):
            raise UnusableInput(f"{where} is a {type(check).__name__}, not a prefdata.checks.registry.Check; "
                                "point the entry at a Check(...) object")
        problems = check.problems()
        if problems:
            raise UnusableInput(f"{where}: its traits do not hold: {'; '.join(problems)}")
        found[name] = check
    return found


class _Checks(Mapping[str, Check]):
    """BUILT_IN, then the registered checks, loaded on first use (a plugin's module imports this one,
    so not at import) and again when PREFDATA_REGISTRY names another file or its file changed."""

    def __init__(self) -> None:
        self._loaded: tuple[Any, dict[str, Check]] | None = None

    def _all(self) -> dict[str, Check]:
        from prefdata.base.registry import FILE_ENV

        path = os.environ.get(FILE_ENV)
        try:  # the file as it is now: another file, or this one edited, is read again
            stat = os.stat(path) if path else None
            key = (path, stat.st_mtime_ns, stat.st_size) if stat else path
        except OSError:
            key = path  # base.registry says in one line that it is missing
        if self._loaded is None or self._loaded[0] != key:
            self._loaded = (key, {**BUILT_IN, **_registered()})
        return self._loaded[1]

    def __getitem__(self, check_id: str) -> Check:
        return self._all()[check_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


CHECKS: Mapping[str, Check] = _Checks()


def plugin_defaults() -> dict[str, dict[str, Any]]:
    """check id -> its parameters' defaults, for each check registered from outside: its function's
    keyword defaults (a plugin cannot edit checklist.yaml; its Check's function declares them)."""
    return {check_id: {name: list(p.default) if isinstance(p.default, tuple) else p.default
                       for name, p in inspect.signature(check.function).parameters.items()
                       if name not in BOUND and _plain(p.default)}
            for check_id, check in CHECKS.items() if check_id not in BUILT_IN}


def _plain(value: Any) -> bool:
    """A default a config can write (YAML's and the report's JSON's values); others stay the function's."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


# Data arguments with a default that are not tunable: the runner binds them, a config may not set them.
BOUND = ("derived",)
