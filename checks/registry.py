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

checklist.py runs CHECKS in memory, batched.py and distributed.py pick from them by these traits;
none keeps a list of its own. Parameter defaults live in checks/checklist.yaml (base.default).
"""

from __future__ import annotations

from collections.abc import Callable
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


CHECKS: dict[str, Check] = {
    "prompt_distribution": Check(
        content.check_prompt_distribution,
        lambda i: {"prompts": isolation.split_train_eval(i.pairs)[0]["prompt"], "reference": i.reference_prompts},
        ranges={"alpha": P_VALUE, "max_samples": POSITIVE, "seed": COUNT, "n_permutations": POSITIVE},
        needs=("reference_prompts",),
        reads="the whole conversation (prompt) of the train split"),
    "same_policy": Check(structure.check_same_policy,
                         lambda i: {"pairs": i.pairs, "comparisons": i.comparisons, "lineage": i.lineage},
                         reads="the models recorded for each reply (no text)"),
    "length_ratio": Check(structure.check_length_ratio, _pairs,
                          ranges={"max_ratio": LENGTH_RATIO, "max_violation_share": SHARE},
                          off_at={"max_violation_share": "high"},
                          merge=Merge(structure.length_ratio_message, structure.length_ratio_merged),
                          reads="the final replies"),
    "agreement": Check(
        agreement.check_agreement, lambda i: {"votes": i.votes},
        ranges={"threshold": Range(-1, 1),  # Krippendorff's alpha: 1 perfect, 0 chance, < 0 worse
                "max_quality_gap": SHARE, "min_annotator_quality": SHARE,  # Dawid-Skene qualities are accuracies
                "min_annotator_votes": COUNT},
        choices={"level": agreement.LEVELS}, needs=("votes",), off_at={"threshold": "low"},
        reads="the annotators' votes (no text)"),
    # no result unless the votes carry the dataset's labels (a label audit): never a skip
    "label_audit": Check(agreement.check_label_audit, lambda i: {"votes": i.votes},
                         ranges={"min_agreement": SHARE}, needs=("votes",), off_at={"min_agreement": "low"},
                         reads="the audit's votes and the dataset's labels (no text)"),
    "safety": Check(content.check_safety, _user_turns,
                    ranges={"max_flagged_share": SHARE, "score_threshold": SHARE},  # a classifier's score
                    off_at={"max_flagged_share": "high", "fail_on": "empty", "score_threshold": "high"},
                    merge=Merge(content.safety_message), needs_text=True,
                    reads="the user turns and the chosen reply"),
    "category_coverage": Check(content.check_category_coverage, _pairs, ranges={"min_share": SHARE},
                               off_at={"min_share": "low"},
                               reads="the category column, else the whole conversation (keyword tagger)"),
    "answer_leakage": Check(content.check_answer_leakage, _user_turns,
                            ranges={"ngram": POSITIVE, "max_overlap": Range(0, 1, high_open=True), "min_chars": COUNT},
                            merge=Merge(content.leakage_message), needs_text=True,
                            reads="the user turns, for the chosen reply (or a reference answer)"),
    "label_direction": Check(direction.check_label_direction, lambda i: {"pairs": i.pairs, "verdicts": i.verdicts},
                             ranges={"min_agreement": SHARE}, needs=("verdicts",), off_at={"min_agreement": "low"},
                             reads="the scorer's verdicts; a judge sees the whole conversation and both final replies"),
    "split_isolation": Check(isolation.check_split_isolation, _train_and_eval, ranges={"near_threshold": SIMILARITY},
                             reads="the whole conversation (prompt), annotators and sources"),
    # reads the prompts only (and their messages), which a sharded run's thin frame has: it runs there unchanged
    "decontamination": Check(isolation.check_decontamination,
                             lambda i: {"pairs": with_user_turns(i.pairs), "benchmarks": i.benchmarks},
                             ranges={"ngram": POSITIVE, "max_overlap": Range(0, 1, high_open=True),
                                     "max_contaminated_share": SHARE},
                             needs=("benchmarks",), off_at={"max_contaminated_share": "high"},
                             reads="the user turns"),
    "min_size": Check(structure.check_min_size, _pairs, ranges={"min_pairs": COUNT, "min_pairs_hard": COUNT},
                      choices={"kind": structure.SIZE_KINDS}, off_at={"min_pairs": "low", "min_pairs_hard": "low"},
                      reads="the row count"),
    "sft_subset": Check(structure.check_sft_subset, lambda i: {"pairs": i.pairs, "sft": i.sft},
                        ranges={"min_ratio": Range(0)}, off_at={"min_ratio": "low"},  # SFT rows / train pairs
                        reads="the chosen replies and the SFT subset"),
    "annotation_guidelines": Check(structure.check_annotation_guidelines, lambda i: {"card_text": i.card_text},
                                   ranges={"min_chars": COUNT},  # no card is a failure, not a skip
                                   reads="the dataset card"),
    "exact_duplicates": Check(dedup.check_exact_duplicates, lambda i: {"pairs": i.pairs, "derived": i.derived},
                              ranges={"max_share": SHARE}, needs_text=True, off_at={"max_share": "high"},
                              reads="the whole conversation and both final replies"),
    "near_duplicates": Check(dedup.check_near_duplicates, lambda i: {"pairs": i.pairs, "derived": i.derived},
                             ranges={"threshold": SIMILARITY, "num_perm": POSITIVE, "ngram": POSITIVE,
                                     "max_share": SHARE, "seed": COUNT},
                             choices={"scope": ("pair", "prompt")}, needs_text=True, off_at={"max_share": "high"},
                             reads="the whole conversation and both final replies (scope prompt: the conversation)"),
    "degenerate_pairs": Check(structure.check_degenerate_pairs,
                              lambda i: {"pairs": i.pairs, "comparisons": i.comparisons,
                                         "lost": lost_for(i, "degenerate_pairs")},
                              merge=Merge(structure.degenerate_message), needs_text=True,
                              reads="the final replies, and the comparisons' labels"),
    "unreadable_rows": Check(structure.check_unreadable_rows,
                             lambda i: {"lost": lost_for(i, "unreadable_rows"),
                                        "n_read": i.rows_read if i.rows_read is not None else i.pairs.height},
                             ranges={"max_share": SHARE}, off_at={"max_share": "high"},
                             reads="the rows left out at read"),
    "gx": Check(gx_suite.run_expectations, lambda i: {"pairs": i.pairs, "docs_dir": i.docs_dir},
                ranges={"max_length_ratio": LENGTH_RATIO, "max_text_chars": POSITIVE, "min_rows": COUNT},
                reads="the whole conversation (prompt) and the final replies: nulls, lengths, ids"),
    "template_fit": Check(template_fit.check_template_fit, lambda i: {"pairs": i.pairs, "tokenizer": i.tokenizer,
                                                                           "rendering": i.rendering},
                          ranges={"max_length": POSITIVE, "max_offending_share": SHARE},
                          off_at={"max_offending_share": "high"},
                          merge=Merge(template_fit.fit_message), needs_text=True, needs=("tokenizer",),
                          reads="the whole conversation with each final reply, rendered as the trainer renders it"),
}
