"""Structural checks on a preference dataset: checklist items 2, 3, 10, 11, 12, degenerate pairs and
rows lost at read (`check_unreadable_rows`).

Every check is a pure function (frames and thresholds in, `CheckResult` out, no I/O), vectorised
in polars: on a million ~400-character pairs (2 CPU cores) every check takes about a second or
less; `check_degenerate_pairs` avoids normalising most texts in full (see
`identical_after_normalisation`), the one costly step.

Conventions shared by every check here:

* `metric` and `threshold` are in the same units; the docstring of each check says which way the
  comparison goes. Other numbers go in `details`, which always carries `n_offending`.
* `offending` lists the `id` of each offending row, in row order (the full list; `to_json` caps
  what it writes). `check_annotation_guidelines` is the exception: its offenders are section titles.
* A check that cannot run because a column or input is absent returns `skip(...)` whose message
  says what to provide. `check_sft_subset` is the exception: an absent SFT subset is the failure.

The seed checklist (dpo-ppo-grpo-compare.zh, "偏好数据 Checklist(12 项)") gives the defaults;
each default below cites its item.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import polars as pl

from prefdata.data.card import GUIDELINE_SECTIONS, PLACEHOLDER, sections, strip_front_matter
from prefdata.data.records import normalise_expr, normalise_series

from .base import CheckResult, default, skip
from .frames import has_text, ids, text_chars

# Defaults are set in checks/checklist.yaml (base.default); why each is what it is:
# Item 3: "chosen / rejected 长度比 ≤ 2" -- the longer side at most twice the shorter.
DEFAULT_MAX_LENGTH_RATIO = default("length_ratio", "max_ratio")
# Item 3 states a hard bound, so by default no pair may exceed it.
DEFAULT_MAX_LENGTH_VIOLATION_SHARE = default("length_ratio", "max_violation_share")
# Item 10: "训练集 ≥ 10k(下限),推理 / 安全场景 ≥ 50k".
DEFAULT_MIN_PAIRS = default("min_size", "min_pairs")  # item 10: general lower bound (10k)
DEFAULT_MIN_PAIRS_HARD = default("min_size", "min_pairs_hard")  # item 10: reasoning / safety (50k)
SIZE_KINDS = ("general", "reasoning", "safety")
DEFAULT_SIZE_KIND = default("min_size", "kind")
DEFAULT_FOLD_CASE = default("degenerate_pairs", "fold_case")  # false for data about case ("in capitals")
# Item 11 asks for a chosen-only SFT subset mixed into training (against the alignment tax) but
# names no size; 0.2 x the train pairs is this project's default, not the seed's.
DEFAULT_MIN_SFT_RATIO = default("sft_subset", "min_ratio")
# Item 12: annotation guidelines / rubric / edge cases recorded in the README. The seed gives no
# length; 40 characters is about one real sentence, enough to tell text from a stub (checklist.yaml).
DEFAULT_MIN_GUIDELINE_CHARS = default("annotation_guidelines", "min_chars")
TOP_MODEL_PAIRS = 20
EXAMPLES_PER_REASON = 5
DEGENERATE_REASONS = ("identical", "empty_chosen", "empty_rejected", "tie_label", "tied_scores")

_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_WS = re.compile(r"\s+")


# -- helpers --------------------------------------------------------------------------------


def _train(frame: pl.DataFrame) -> pl.DataFrame:
    """The train split: rows whose `split` is "train" or null; every row without a split column."""
    if "split" not in frame.columns:
        return frame
    return frame.filter(pl.col("split").is_null() | (pl.col("split").cast(pl.String) == "train"))


def _blank(column: str) -> pl.Expr:
    """Null, empty, or nothing but whitespace, blanks (U+2800 used as a space) and invisible characters
    (a lone zero-width space): the texts normalising (prefdata.data.records) turns into nothing. One
    anchored match, which stops at the first visible character, without a normalised copy."""
    from prefdata.data.records import character_classes

    invisible, blank = character_classes()
    return pl.col(column).cast(pl.String).fill_null("").str.contains(rf"^(?:\s|[\x1c-\x1f]|{invisible}|{blank})*$")


# Prefix lengths compared before normalising in full: a short, cheap one on every row, then a
# longer one on the rows that survive it.
PREFIX_TIERS = (16, 128)
# Characters that NFKC and case folding leave alone whatever surrounds them: printable ASCII but
# the space, Latin-1 letters but "ß", basic Cyrillic, common dashes and curly quotes, CJK
# punctuation 、。「」『』, CJK unified ideographs, hiragana, katakana and Hangul syllables. Checked
# over every code point: each is NFKC-stable, not combining, never the second half of a
# composition, and lower-cases to one character the same way that upper- then lower-casing does.
# A run of them with single spaces between is also left alone by the whitespace collapsing.
_STABLE = (r"[!-~\x{C0}-\x{DE}\x{E0}-\x{FF}\x{400}-\x{45F}\x{2010}\x{2013}\x{2014}\x{2018}-\x{201D}"
           r"\x{3001}\x{3002}\x{300C}-\x{300F}\x{4E00}-\x{9FFF}\x{3041}-\x{3096}\x{30A1}-\x{30FA}"
           r"\x{AC00}-\x{D7A3}]")
_STABLE_RUN = rf"^(?:{_STABLE}| {_STABLE})*"


def _safe_prefix_keys(pairs: pl.DataFrame, columns: Sequence[str], chars: int) -> pl.DataFrame:
    """One String column per input column: a prefix of `normalise_expr(column)`, found cheaply.

    Take the first `chars` characters, stripped at the start (and at the end when that is the
    whole text), and keep their leading `_STABLE_RUN`. Unless the run is the whole text, drop its
    last character too (the character after it may be a combining mark that composes with it).
    What is left normalises to itself lower-cased, whatever follows, so it is exactly a prefix of
    the normalised text: two rows whose keys differ on their common length cannot be equal after
    normalisation. A key can be empty (text starting with another character): it rules nothing out.
    Built in stages of one lazy query: the columns run in parallel and nothing is computed twice.
    """
    def text(c):
        return pl.col(c).cast(pl.String).fill_null("")

    def pre(c):
        head = pl.col(f"{c}_head")
        return (pl.when(f"{c}_truncated").then(head.str.strip_chars_start())
                .otherwise(head.str.strip_chars()).alias(f"{c}_pre"))

    def key(c):
        run = pl.col(f"{c}_run")
        whole = ~pl.col(f"{c}_truncated") & (run.str.len_bytes() == pl.col(f"{c}_pre").str.len_bytes())
        n = run.str.len_chars().cast(pl.Int64) - pl.when(whole).then(0).otherwise(1)
        return run.str.head(n.clip(lower_bound=0)).str.to_lowercase().alias(c)

    return (
        pairs.lazy()
        .select(*[(text(c).str.len_chars() > chars).alias(f"{c}_truncated") for c in columns],
                *[text(c).str.head(chars).alias(f"{c}_head") for c in columns])
        .with_columns([pre(c) for c in columns])
        .with_columns([pl.col(f"{c}_pre").str.extract(_STABLE_RUN, 0).fill_null("").alias(f"{c}_run")
                       for c in columns])
        .select([key(c) for c in columns])
        .collect()
    )


# Text that is printable ASCII words with single spaces between and nothing around them normalises
# to itself lower-cased: NFKC and the invisible and blank classes leave printable ASCII alone, case
# folding only lower-cases it, and the whitespace collapsing has nothing to collapse or strip.
# A text that matches this is not such text (an empty text is not either).
_NOT_PLAIN = r"[^!-~ ]|  |^ | $|^$"


def _equal_normalised(rest: pl.DataFrame, a: str, b: str) -> pl.Series:
    """Per row of `rest`: `normalise_expr(a) == normalise_expr(b)` (case folded), without normalising
    the rows whose two texts are both plain (_NOT_PLAIN): those are equal when their lengths are and
    they are equal lower-cased. The other rows go through `normalise_series` (NFKC only where a text
    needs it; the same results as normalise_expr), the two columns on two threads."""
    from concurrent.futures import ThreadPoolExecutor

    def text(c: str) -> pl.Expr:
        return pl.col(c).cast(pl.String).fill_null("")

    flags = rest.select(plain=~text(a).str.contains(_NOT_PLAIN) & ~text(b).str.contains(_NOT_PLAIN),
                        same_length=text(a).str.len_bytes() == text(b).str.len_bytes())
    plain, same_length = flags["plain"], flags["same_length"]
    equal = pl.repeat(False, rest.height, dtype=pl.Boolean, eager=True)
    rows = pl.int_range(rest.height, eager=True, dtype=pl.UInt32)
    compare = rows.filter(plain & same_length)
    if compare.len():
        pick = rest[compare]
        equal = equal.scatter(compare, pick.select(text(a).str.to_lowercase() == text(b).str.to_lowercase()).to_series())
    other = rows.filter(~plain)
    if other.len():
        pick = rest[other]
        with ThreadPoolExecutor(2) as pool:
            na, nb = pool.map(normalise_series, [pick[a], pick[b]])
        equal = equal.scatter(other, (na == nb).fill_null(False))
    return equal


def identical_after_normalisation(pairs: pl.DataFrame, a: str = "chosen", b: str = "rejected",
                                  fold_case: bool = True) -> pl.Series:
    """Per row: `normalise_expr(a, fold_case) == normalise_expr(b, fold_case)` (prefdata.data.records,
    the one normaliser), as a Boolean Series named "identical".

    Normalising long texts is the slow part (NFKC and the whitespace regex cost seconds per million
    texts), so rows are first compared on `_safe_prefix_keys` of PREFIX_TIERS lengths, which rule
    out exactly almost every pair whose texts differ early on; the rest are compared by
    `_equal_normalised` (sampled replies that start alike pass the prefixes: 60% of the rows of
    bench/realistic.py's pairs shaped like real collections).
    """
    rest = pairs.select(a, b)
    rows = pl.int_range(pairs.height, eager=True, dtype=pl.UInt32)
    for chars in PREFIX_TIERS:
        if rest.height == 0:
            break
        keys = _safe_prefix_keys(rest, (a, b), chars)
        common = pl.min_horizontal(pl.col(a).str.len_chars(), pl.col(b).str.len_chars())
        maybe = keys.select(pl.col(a).str.head(common) == pl.col(b).str.head(common)).to_series()
        rest, rows = rest.filter(maybe), rows.filter(maybe)
    equal = _equal_normalised(rest, a, b)
    if not fold_case:  # equal when folded is necessary, so only those few rows are compared again
        rest, rows = rest.filter(equal), rows.filter(equal)
        equal = rest.select(normalise_expr(a, fold_case=False) == normalise_expr(b, fold_case=False)).to_series()
    identical = pl.repeat(False, pairs.height, dtype=pl.Boolean, eager=True).alias("identical")
    return identical.scatter(rows.filter(equal), True)


def _status(failed: bool) -> str:
    return "fail" if failed else "pass"


# -- item 3: length ratio ---------------------------------------------------------------------


def _side_lengths(pairs: pl.DataFrame, lengths: tuple[pl.Series, pl.Series] | None) -> tuple[pl.Series, pl.Series]:
    if lengths is not None:
        chosen, rejected = lengths
        if len(chosen) != pairs.height or len(rejected) != pairs.height:
            raise ValueError(
                f"lengths must have one value per pair ({pairs.height}), got {len(chosen)} and {len(rejected)}"
            )
        return (pl.Series("chosen_len", chosen, dtype=pl.Float64, strict=False),
                pl.Series("rejected_len", rejected, dtype=pl.Float64, strict=False))
    out = pairs.select(
        text_chars(pairs, "chosen").cast(pl.Float64).alias("chosen_len"),
        text_chars(pairs, "rejected").cast(pl.Float64).alias("rejected_len"),
    )
    return out["chosen_len"], out["rejected_len"]


def length_ratios(pairs: pl.DataFrame, lengths: tuple[pl.Series, pl.Series] | None = None) -> pl.Series:
    """max(len) / min(len) of chosen vs rejected per pair, in characters unless `lengths` gives
    (chosen, rejected) counts computed elsewhere (e.g. tokens). A side that is empty (or null) gives
    +inf, with no division by zero. Named "length_ratio", Float64, one value per row of `pairs`."""
    chosen, rejected = _side_lengths(pairs, lengths)
    frame = pl.DataFrame({"c": chosen.fill_null(0.0), "r": rejected.fill_null(0.0)})
    return frame.select(
        pl.when(pl.min_horizontal("c", "r") > 0)
        .then(pl.max_horizontal("c", "r") / pl.min_horizontal("c", "r"))
        .otherwise(float("inf"))
        .alias("length_ratio")
    ).to_series()


def check_length_ratio(
    pairs: pl.DataFrame,
    max_ratio: float = DEFAULT_MAX_LENGTH_RATIO,
    max_violation_share: float = DEFAULT_MAX_LENGTH_VIOLATION_SHARE,
    lengths: tuple[pl.Series, pl.Series] | None = None,
) -> CheckResult:
    """Checklist item 3: the longer of chosen/rejected at most `max_ratio` x the shorter.

    A pair is offending when its ratio is strictly above `max_ratio` (the seed says "≤ 2"); an empty
    side makes the ratio infinite, so it is always offending. Metric: share of offending pairs;
    fails when it is above `max_violation_share`.

    details: `length_bias` is the share of pairs where chosen is longer, among pairs whose two sides
    differ in length (equal lengths are left out of the denominator and counted in `n_equal_length`);
    None when every pair has equal sides. A bias far from 0.5 means a reward model or DPO can learn
    "longer wins". `median_ratio` / `p95_ratio` are over the finite ratios (linear interpolation);
    infinite ones are counted in `n_infinite`. `unit` is "chars", or "given" when `lengths` is passed.
    """
    check_id = "length_ratio"
    if lengths is None and not (has_text(pairs, "chosen") and has_text(pairs, "rejected")):
        return skip(check_id, "pairs need `chosen` and `rejected` columns (or pass lengths=(chosen, rejected))",
                    max_violation_share)
    if pairs.height == 0:
        return skip(check_id, "no pairs to check", max_violation_share)
    chosen, rejected = _side_lengths(pairs, lengths)
    ratio = length_ratios(pairs, (chosen, rejected))
    stats = pl.DataFrame({"ratio": ratio, "c": chosen.fill_null(0.0), "r": rejected.fill_null(0.0)}).select(
        offending=pl.col("ratio") > max_ratio,
        chosen_longer=(pl.col("c") > pl.col("r")).sum(),
        rejected_longer=(pl.col("r") > pl.col("c")).sum(),
        n_infinite=pl.col("ratio").is_infinite().sum(),
        median=pl.col("ratio").filter(pl.col("ratio").is_finite()).median(),
        p95=pl.col("ratio").filter(pl.col("ratio").is_finite()).quantile(0.95, "linear"),
    )
    mask = stats["offending"]
    offending = ids(pairs, mask)
    n = pairs.height
    longer_c, longer_r = int(stats["chosen_longer"][0]), int(stats["rejected_longer"][0])
    metric = len(offending) / n
    median, p95 = stats["median"][0], stats["p95"][0]
    status = _status(metric > max_violation_share)
    unit = "chars" if lengths is None else "given"
    details = {
        "max_ratio": max_ratio,
        "unit": unit,
        "length_bias": _length_bias(longer_c, longer_r),
        "n_chosen_longer": longer_c,
        "n_rejected_longer": longer_r,
        "n_equal_length": n - longer_c - longer_r,
        "median_ratio": None if median is None else float(median),
        "p95_ratio": None if p95 is None else float(p95),
        "n_infinite": int(stats["n_infinite"][0]),
        "n_pairs": n,
        "n_offending": len(offending),
    }
    return CheckResult(
        check_id, status, metric=metric, threshold=max_violation_share, offending=offending,
        message=length_ratio_message(details, len(offending), n, max_violation_share), details=details,
    )


def _length_bias(n_chosen_longer: int, n_rejected_longer: int) -> float | None:
    """Share of pairs whose chosen side is longer, among those whose sides differ; None if none do."""
    unequal = n_chosen_longer + n_rejected_longer
    return n_chosen_longer / unequal if unequal else None


def length_ratio_message(details: dict[str, Any], n_offending: int, n_rows: int, threshold: float) -> str:
    """`check_length_ratio`'s message from its details (`max_ratio`, `n_chosen_longer`,
    `n_rejected_longer`), the number of offending pairs and of pairs, and `max_violation_share`.
    The length bias is recomputed from the two counts (not read from `length_bias`), so the message
    is a pure function of counts that sum over parts (checks/distributed.py builds it from the
    partitions' merged details)."""
    share = n_offending / n_rows if n_rows else 0.0
    bias = _length_bias(details["n_chosen_longer"], details["n_rejected_longer"])
    return (
        f"{n_offending} of {n_rows} pairs ({share:.1%}) have a chosen/rejected length ratio above "
        f"{details['max_ratio']:g} (allowed share {threshold:g}); chosen is longer in "
        + (f"{bias:.1%}" if bias is not None else "no") + " of pairs with unequal lengths"
    )


def length_ratio_merged(details: dict[str, Any]) -> dict[str, Any]:
    """`check_length_ratio`'s details merged over parts of the pairs (counts summed): `length_bias`
    recomputed from the summed counts, and `median_ratio` / `p95_ratio` left out (quantiles of the
    parts do not give the quantiles of the whole; the part-wise runs bring back no ratios)."""
    merged = {k: v for k, v in details.items() if k not in ("median_ratio", "p95_ratio")}
    merged["length_bias"] = _length_bias(details["n_chosen_longer"], details["n_rejected_longer"])
    return merged


# -- degenerate pairs ---------------------------------------------------------------------------


def _numeric(column: str, dtype: pl.DataType) -> pl.Expr:
    expr = pl.col(column)
    if dtype == pl.String:
        expr = expr.str.strip_chars()
    elif not (dtype.is_numeric() or dtype == pl.Null):
        expr = expr.cast(pl.String)
    return expr.cast(pl.Float64, strict=False).fill_nan(None)


def degenerate_at_read(reason: str) -> str | None:
    """The degenerate reason a row left out at read counts under (its sides identical, a text
    empty), from the importer's quarantine reason; None for the others (`check_unreadable_rows`)."""
    if reason == "identical_responses":
        return "identical"
    if reason.startswith("empty_text:"):
        return "empty_" + reason.split(":", 1)[1]
    return None


def check_degenerate_pairs(pairs: pl.DataFrame, comparisons: pl.DataFrame | None = None,
                           lost: pl.DataFrame | None = None, fold_case: bool = DEFAULT_FOLD_CASE) -> CheckResult:
    """Pairs that teach nothing or teach noise; any one fails the check (threshold 0.0).

    Reasons (a row may have several; `details["reasons"]` counts each):
      identical       chosen equals rejected after NFKC, case folding and whitespace collapsing
                      (`prefdata.data.records.normalise_text`); two empty sides count here too.
                      `fold_case: false` keeps case: for data about case constraints ("answer in
                      capitals"), where a reply and its capitalised copy are the preference
      empty_chosen    chosen is null, empty or whitespace only
      empty_rejected  the same for rejected
      tie_label       the row's `id` is a comparison labelled "tie" in `comparisons`: a tie was
                      emitted as a preference
      tied_scores     `score_chosen` == `score_rejected` (numbers or numeric strings; rows where
                      either is missing or not a number are not compared). This is the distilabel
                      failure where every rating ties and a pair is still emitted.
    The tie reasons run only when their input is there; `details["checked"]` says which ran.
    `lost`: rows of the source the import left out for one of these (`id`, `reason` columns; see
    `degenerate_at_read`): each is an offending pair under its reason and counts among the pairs,
    so a file's identical pair fails here whether the importer or this check found it.
    Metric: share of rows with at least one reason.
    """
    check_id = "degenerate_pairs"
    if not {"chosen", "rejected"} <= set(pairs.columns):
        return skip(check_id, "pairs need `chosen` and `rejected` columns", 0.0)
    lost = lost if lost is not None else pl.DataFrame(schema={"id": pl.String, "reason": pl.String})
    if pairs.height == 0 and lost.height == 0:
        return skip(check_id, "no pairs to check", 0.0)
    identical = identical_after_normalisation(pairs, fold_case=fold_case)
    exprs: dict[str, pl.Expr] = {
        "empty_chosen": _blank("chosen"),
        "empty_rejected": _blank("rejected"),
    }
    checked = {"comparisons": False, "scores": False}
    if (comparisons is not None and {"id", "label"} <= set(comparisons.columns)
            and "id" in pairs.columns):
        tie_ids = comparisons.filter(pl.col("label").cast(pl.String) == "tie")["id"].cast(pl.String).unique()
        exprs["tie_label"] = pl.col("id").cast(pl.String).is_in(tie_ids.implode())
        checked["comparisons"] = True
    if {"score_chosen", "score_rejected"} <= set(pairs.columns):
        sc = _numeric("score_chosen", pairs.schema["score_chosen"])
        sr = _numeric("score_rejected", pairs.schema["score_rejected"])
        exprs["tied_scores"] = (sc == sr).fill_null(False)
        checked["scores"] = True
    # the identical flags join afterwards: a literal Series in the same select makes polars
    # materialise the whole stripped text of both columns (~2x their size) instead of streaming it
    flags = pairs.select(**{k: v.fill_null(False) for k, v in exprs.items()}).insert_column(
        0, identical.fill_null(False).alias("identical"))
    mask = flags.select(pl.any_horizontal(pl.all())).to_series()
    offending = ids(pairs, mask)
    reasons = {k: int(flags[k].sum()) for k in DEGENERATE_REASONS if k in flags.columns}
    examples = {k: list(ids(pairs, flags[k], EXAMPLES_PER_REASON)) for k, n in reasons.items() if n}
    for row_id, reason in lost.select(pl.col("id").cast(pl.String), "reason").iter_rows():
        kind = degenerate_at_read(reason) or reason
        reasons[kind] = reasons.get(kind, 0) + 1
        if len(examples.setdefault(kind, [])) < EXAMPLES_PER_REASON:
            examples[kind].append(row_id)
    offending += tuple(lost["id"].cast(pl.String).to_list())
    n = pairs.height + lost.height
    metric = len(offending) / n
    details = {"reasons": reasons, "examples": examples, "checked": checked,
               "n_pairs": n, "n_offending": len(offending), "lost_at_read": lost.height}
    return CheckResult(check_id, _status(metric > 0.0), metric=metric, threshold=0.0, offending=offending,
                       message=degenerate_message(details, len(offending), n, 0.0), details=details)


def degenerate_message(details: dict[str, Any], n_offending: int, n_rows: int, threshold: float) -> str:
    """`check_degenerate_pairs`' message from its details (`reasons`, `lost_at_read`, `checked`),
    the number of degenerate pairs and of pairs (`threshold` is always 0.0 and not shown). A pure
    function of counts, so the shard-by-shard run (checks/batched.py) builds it from merged details."""
    listed = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in details["reasons"].items() if v) or "none"
    checked = details["checked"]
    not_run = [what for what, ran in (("tie labels (pass comparisons with id and label)", checked["comparisons"]),
                                      ("tied scores (score_chosen/score_rejected columns)", checked["scores"]))
               if not ran]
    message = f"{n_offending} of {n_rows} pairs are degenerate ({listed})"
    if details["lost_at_read"]:
        message += f"; {details['lost_at_read']} of them left out at read"
    if not_run:
        message += "; not checked: " + ", ".join(not_run)
    return message


def check_unreadable_rows(lost: pl.DataFrame | None, n_read: int,
                          max_share: float = default("unreadable_rows", "max_share")) -> CheckResult:
    """Rows of the input that reading it left out, for a reason no other check counts (a broken
    line, a missing or wrong-typed field, a vote for an unknown pair...): `lost` has their `id`
    (the row's own id, else FILE:ROW) and `reason`; `n_read` is the number of rows read. Nothing is
    dropped silently: any lost row fails the check by default. Metric: lost / read; fails above
    `max_share`. Reading a store version loses nothing (its import's quarantine is in the version).
    """
    check_id = "unreadable_rows"
    lost = lost if lost is not None else pl.DataFrame(schema={"id": pl.String, "reason": pl.String})
    if n_read <= 0:
        return skip(check_id, "no rows read", max_share)
    counts = Counter(lost["reason"].cast(pl.String).to_list())
    reasons = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    metric = lost.height / n_read
    listed = ", ".join(f"{n} {r}" for r, n in reasons.items())
    message = f"{lost.height} of {n_read} rows read were left out" + (f" ({listed})" if listed else "")
    return CheckResult(
        check_id, _status(metric > max_share), metric=metric, threshold=max_share,
        offending=tuple(lost["id"].cast(pl.String).to_list()), message=message,
        details={"reasons": reasons, "n_read": n_read, "n_offending": lost.height},
    )


# -- item 2: same policy -----------------------------------------------------------------------


def _clean(expr: pl.Expr) -> pl.Expr:
    """Model name as text, stripped; empty becomes null."""
    text = expr.cast(pl.String).str.strip_chars()
    return pl.when(text.str.len_bytes() > 0).then(text)


def _cmp_key_models(expr: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """A cmp_key "modelA_modelB" split in two; null unless it has exactly two non-empty parts."""
    parts = expr.cast(pl.String).str.split("_")
    two = parts.list.len() == 2
    return (_clean(pl.when(two).then(parts.list.get(0, null_on_oob=True))),
            _clean(pl.when(two).then(parts.list.get(1, null_on_oob=True))))


def _sampler_models(lineage: dict | None) -> tuple[list[str], int]:
    """Distinct sampler models named by lineage["components"]["sampler"], and the number of
    distinct sampler settings (a dict, a list of dicts, or a bare model name)."""
    if not lineage:
        return [], 0
    sampler = (lineage.get("components") or {}).get("sampler")
    if sampler is None:
        return [], 0
    samplers = sampler if isinstance(sampler, list) else [sampler]
    models: list[str] = []
    settings: set[str] = set()
    for entry in samplers:
        model = entry.get("model") if isinstance(entry, dict) else entry if isinstance(entry, str) else None
        if isinstance(entry, dict):
            settings.add(repr(sorted((str(k), repr(v)) for k, v in entry.items())))
        if model is not None and str(model).strip() and str(model).strip() not in models:
            models.append(str(model).strip())
    return models, len(settings)


def check_same_policy(
    pairs: pl.DataFrame, comparisons: pl.DataFrame | None = None, lineage: dict | None = None
) -> CheckResult:
    """Checklist item 2: chosen and rejected sampled from the same SFT model and sampling setup.

    The two models of each pair come from the first evidence present for that row, in order:
      1. `chosen_model` / `rejected_model` columns
      2. `model_a` / `model_b` columns
      3. `cmp_key` naming two models joined by "_" (PandaLM: "bloom-7b_llama-7b"); a key that does
         not split into exactly two non-empty parts is no evidence
      4. the same three from `comparisons`, joined on `id`
      5. `lineage["components"]["sampler"]`: a dict with a "model" key, or a list of them. With
         exactly one distinct model every row without row evidence gets it for both sides (pass);
         with several, those rows cannot be attributed and are offending (`n_undetermined`).
    Models are compared stripped and case-insensitively. Rows with no evidence at all are left out
    (`n_without_evidence`); skip when no row has any. Metric: share of offending pairs (different
    models, plus undetermined) among the rows with evidence; threshold 0.0.
    details["model_pairs"]: the (unordered) model pairs seen, most common first, top 20.
    """
    check_id = "same_policy"
    if pairs.height == 0:
        return skip(check_id, "no pairs to check", 0.0)
    frame, candidates = _model_evidence_sources(pairs, comparisons)
    models, n_settings = _sampler_models(lineage)
    if not candidates and not models:
        return skip(
            check_id,
            "no model evidence: provide chosen_model/rejected_model (or model_a/model_b, or a cmp_key "
            "'modelA_modelB') columns, comparisons with them, or lineage components.sampler with a model",
            0.0,
        )
    ev = _models_per_row(frame, candidates, models)
    with_evidence = ev["source"].is_not_null()
    n_evidence = int(with_evidence.sum())
    if n_evidence == 0:
        return skip(
            check_id,
            "no row names its models: fill chosen_model/rejected_model, model_a/model_b or cmp_key, "
            "or give lineage components.sampler with a model",
            0.0,
        )
    offending = ids(pairs, ev["different"] | ev["undetermined"].fill_null(False))
    n_different = int(ev["different"].sum())
    n_undetermined = int(ev["undetermined"].fill_null(False).sum())
    metric = len(offending) / n_evidence
    sources = dict(ev.filter(with_evidence).group_by("source").len().sort("source").iter_rows())
    n = pairs.height
    parts = [f"{len(offending)} of {n_evidence} pairs with model evidence do not come from one policy"]
    if n_different:
        parts.append(f"{n_different} pairs have chosen and rejected from different models")
    if n_undetermined:
        parts.append(f"{n_undetermined} rely on a lineage naming {len(models)} sampler models ({', '.join(models)})")
    if n - n_evidence:
        parts.append(f"{n - n_evidence} pairs have no model evidence and were not checked")
    if len(models) == 1 and n_settings > 1:
        parts.append(f"lineage lists {n_settings} sampler settings for model {models[0]}: check they are one sampling setup")
    return CheckResult(
        check_id, _status(metric > 0.0), metric=metric, threshold=0.0, offending=offending,
        message="; ".join(parts),
        details={
            "model_pairs": _model_pairs_seen(ev),
            "evidence": {str(k): int(v) for k, v in sources.items()},
            "lineage_models": models,
            "lineage_sampler_settings": n_settings,
            "n_different_models": n_different,
            "n_undetermined": n_undetermined,
            "n_without_evidence": n - n_evidence,
            "n_pairs": n,
            "n_offending": len(offending),
        },
    )


def _model_evidence_sources(pairs: pl.DataFrame, comparisons: pl.DataFrame | None
                            ) -> tuple[pl.DataFrame, list[tuple[str, pl.Expr, pl.Expr]]]:
    """The frame to read model evidence from (pairs, joined on `id` to the comparisons' model
    columns when they have some) and each source of evidence, in order of precedence:
    (name, first model, second model)."""
    frame = pairs
    candidates: list[tuple[str, pl.Expr, pl.Expr]] = []

    def add_sources(columns: Sequence[str], prefix: str, label_prefix: str) -> None:
        if {f"{prefix}chosen_model", f"{prefix}rejected_model"} <= set(columns):
            candidates.append((f"{label_prefix}chosen_model/rejected_model",
                               _clean(pl.col(f"{prefix}chosen_model")), _clean(pl.col(f"{prefix}rejected_model"))))
        if {f"{prefix}model_a", f"{prefix}model_b"} <= set(columns):
            candidates.append((f"{label_prefix}model_a/model_b",
                               _clean(pl.col(f"{prefix}model_a")), _clean(pl.col(f"{prefix}model_b"))))
        if f"{prefix}cmp_key" in columns:
            candidates.append((f"{label_prefix}cmp_key", *_cmp_key_models(pl.col(f"{prefix}cmp_key"))))

    add_sources(pairs.columns, "", "")
    if comparisons is not None and "id" in comparisons.columns and "id" in pairs.columns:
        wanted = [c for c in ("chosen_model", "rejected_model", "model_a", "model_b", "cmp_key") if c in comparisons.columns]
        if wanted:
            extra = (comparisons.select(pl.col("id").cast(pl.String), *wanted)
                     .unique("id", keep="first", maintain_order=True)
                     .rename({c: f"__cmp_{c}" for c in wanted}))
            frame = pairs.with_columns(pl.col("id").cast(pl.String).alias("__id")).join(
                extra, left_on="__id", right_on="id", how="left", maintain_order="left")
            add_sources(frame.columns, "__cmp_", "comparisons.")
    return frame, candidates


def _models_per_row(frame: pl.DataFrame, candidates: list[tuple[str, pl.Expr, pl.Expr]], models: list[str]) -> pl.DataFrame:
    """Per row: its two models `a`, `b` from the first source that names both, the `source` used
    (null without evidence), whether the models differ, and whether the row is `undetermined`
    (only a lineage naming several sampler models speaks for it)."""
    none = pl.repeat(None, pl.len(), dtype=pl.String)  # a column, so a frame without evidence keeps its height
    first, second, source = none, none, none
    for name, a, b in reversed(candidates):  # the earliest source wins: it is applied last
        found = a.is_not_null() & b.is_not_null()
        first = pl.when(found).then(a).otherwise(first)
        second = pl.when(found).then(b).otherwise(second)
        source = pl.when(found).then(pl.lit(name)).otherwise(source)
    if len(models) == 1:
        fallback = "lineage"
        first, second = first.fill_null(pl.lit(models[0])), second.fill_null(pl.lit(models[0]))
    else:
        fallback = "undetermined" if models else None
    source = source.fill_null(pl.lit(fallback, pl.String))
    ev = frame.select(first.alias("a"), second.alias("b"), source.alias("source"))
    return ev.with_columns(
        different=(pl.col("a").str.to_lowercase() != pl.col("b").str.to_lowercase()).fill_null(False),
        undetermined=pl.col("source") == "undetermined",
    )


def _model_pairs_seen(ev: pl.DataFrame) -> list[dict]:
    """The (unordered) model pairs seen, most common first, top TOP_MODEL_PAIRS."""
    seen = (
        ev.filter(pl.col("a").is_not_null() & pl.col("b").is_not_null())
        .select(lo=pl.min_horizontal("a", "b"), hi=pl.max_horizontal("a", "b"), different="different")
        .group_by("lo", "hi", "different").len()
        .sort(["len", "lo", "hi"], descending=[True, False, False])
        .head(TOP_MODEL_PAIRS)
    )
    return [{"models": [r["lo"], r["hi"]], "n": int(r["len"]), "same": not r["different"]}
            for r in seen.iter_rows(named=True)]


# -- item 10: size -------------------------------------------------------------------------------


def check_min_size(
    pairs: pl.DataFrame,
    min_pairs: int = DEFAULT_MIN_PAIRS,
    min_pairs_hard: int = DEFAULT_MIN_PAIRS_HARD,
    kind: str = DEFAULT_SIZE_KIND,
) -> CheckResult:
    """Checklist item 10: at least `min_pairs` train pairs, `min_pairs_hard` for reasoning or safety
    data. Counts rows whose `split` is "train" or null (all rows without a split column).
    Metric: that count; fails below the bound. No row is offending."""
    check_id = "min_size"
    if kind not in SIZE_KINDS:
        raise ValueError(f"kind must be one of {SIZE_KINDS}, got {kind!r}")
    bound = min_pairs if kind == "general" else min_pairs_hard
    n_train = _train(pairs).height
    status = _status(n_train < bound)
    message = (f"{n_train} train pairs, {'below' if status == 'fail' else 'at or above'} the "
               f"{bound} needed for {kind} data")
    return CheckResult(
        check_id, status, metric=float(n_train), threshold=float(bound), message=message,
        details={"kind": kind, "n_train": n_train, "n_rows": pairs.height,
                 "has_split_column": "split" in pairs.columns, "n_offending": 0},
    )


# -- item 11: chosen-only SFT subset ------------------------------------------------------------


def check_sft_subset(
    pairs: pl.DataFrame, sft: pl.DataFrame | None, min_ratio: float = DEFAULT_MIN_SFT_RATIO
) -> CheckResult:
    """Checklist item 11: the version ships a chosen-only SFT subset (`prompt`, `completion`) to mix
    into training, with at least `min_ratio` x as many usable rows as there are train pairs.

    Usable rows have a non-empty `completion` (train split or no split column, as for pairs); the
    others are offending (their `id`). An absent subset (None) fails with metric 0.0, it does not
    skip. Metric: usable SFT rows / train pairs; fails below `min_ratio`. Skips only when there are
    no train pairs to compare with. details["n_not_chosen"] counts usable completions that are not
    the chosen response of any train pair (informational: item 11 wants chosen-only rows; compared
    by 64-bit hash).
    """
    check_id = "sft_subset"
    n_train = _train(pairs).height
    if n_train == 0:
        return skip(check_id, "no train pairs (split 'train' or null) to size the SFT subset against", min_ratio)
    if sft is None:
        return CheckResult(
            check_id, "fail", metric=0.0, threshold=min_ratio,
            message="no chosen-only SFT subset: `prefdata import --name` ships one with each version "
                    f"with at least {min_ratio:g} x {n_train} rows",
            details={"n_train_pairs": n_train, "n_sft_rows": 0, "n_usable": 0, "n_offending": 0},
        )
    rows = _train(sft)
    # a batched run's thin frames (checks/batched.py) carry blank flags and hashes, not the texts
    thin_sft = "completion" not in rows.columns and "completion_blank" in rows.columns
    if "completion" not in rows.columns and not thin_sft:
        return CheckResult(
            check_id, "fail", metric=0.0, threshold=min_ratio,
            message=f"the SFT subset has no `completion` column (columns: {', '.join(rows.columns)})",
            details={"n_train_pairs": n_train, "n_sft_rows": rows.height, "n_usable": 0, "n_offending": 0},
        )
    empty = rows.select(pl.col("completion_blank") if thin_sft else _blank("completion")).to_series()
    offending = ids(rows, empty)
    n_usable = rows.height - int(empty.sum())
    details: dict[str, Any] = {"n_train_pairs": n_train, "n_sft_rows": rows.height, "n_usable": n_usable,
                               "n_empty_completion": len(offending), "n_offending": len(offending)}
    if "chosen" in pairs.columns or "chosen_hash" in pairs.columns:  # by 64-bit hash: is_in over long texts is slow
        chosen_hash = pl.col("chosen_hash") if "chosen" not in pairs.columns else pl.col("chosen").cast(pl.String).hash()
        completion_hash = pl.col("completion_hash") if thin_sft else pl.col("completion").cast(pl.String).hash()
        chosen = _train(pairs).select(chosen_hash.unique().implode()).to_series()
        details["n_not_chosen"] = int(rows.select((~empty & ~completion_hash.is_in(chosen)).sum()).item())
    metric = n_usable / n_train
    status = _status(metric < min_ratio)
    message = (f"SFT subset: {n_usable} usable rows for {n_train} train pairs (ratio {metric:.2f}, "
               f"{'below' if status == 'fail' else 'at or above'} {min_ratio:g})")
    if offending:
        message += f"; {len(offending)} rows have an empty completion"
    return CheckResult(check_id, status, metric=metric, threshold=min_ratio, offending=offending,
                       message=message, details=details)


# -- item 12: annotation guidelines in the card ------------------------------------------------


def _real_text(body: str) -> str:
    body = _HTML_COMMENT.sub(" ", body).replace(PLACEHOLDER, " ")
    return _WS.sub(" ", body).strip()


def _title_key(title: str) -> str:
    return _WS.sub(" ", title).strip().rstrip(":").strip().casefold()


def check_annotation_guidelines(
    card_text: str | None,
    required: Sequence[str] = GUIDELINE_SECTIONS,
    min_chars: int = DEFAULT_MIN_GUIDELINE_CHARS,
) -> CheckResult:
    """Checklist item 12: the card (README.md) documents the annotation guidelines, rubric and edge
    cases, each as a level-2 section ("## Title") with real content.

    A YAML front matter is ignored. Titles match case-insensitively (a trailing ":" ignored). A
    section counts as documented when its body, without the placeholder text (`PLACEHOLDER`),
    HTML comments and runs of whitespace, has at least `min_chars` characters. Metric: share of
    required sections documented; fails below 1.0. `offending` holds the titles of the sections
    missing or not documented -- section titles, not row ids. Fails when there is no card.
    """
    check_id = "annotation_guidelines"
    required = tuple(required)
    if card_text is None:
        return CheckResult(
            check_id, "fail", metric=0.0, threshold=1.0, offending=required,
            message="no dataset card: pass --card FILE (for a stored version, `prefdata import ... --card FILE`), a "
                    "Markdown document with sections " + ", ".join(f"'## {t}'" for t in required),
            details={"sections": {t: "missing" for t in required}, "n_offending": len(required)},
        )
    found = {_title_key(t): body for t, body in sections(strip_front_matter(card_text)).items()}
    state: dict[str, str] = {}
    chars: dict[str, int] = {}
    for title in required:
        body = found.get(_title_key(title))
        if body is None:
            state[title] = "missing"
            continue
        chars[title] = len(_real_text(body))
        state[title] = ("documented" if chars[title] >= min_chars
                        else "placeholder" if chars[title] == 0 else "too_short")
    offending = tuple(t for t in required if state[t] != "documented")
    metric = (len(required) - len(offending)) / len(required) if required else 1.0
    status = _status(metric < 1.0)
    if offending:
        message = ("sections not documented (offending lists section titles, not row ids): "
                   + ", ".join(f"'{t}' ({state[t].replace('_', ' ')})" for t in offending)
                   + f"; each needs a '## Title' section with at least {min_chars} characters of text")
    else:
        message = f"all {len(required)} guideline sections documented"
    return CheckResult(check_id, status, metric=metric, threshold=1.0, offending=offending, message=message,
                       details={"sections": state, "chars": chars, "min_chars": min_chars,
                                "n_offending": len(offending)})
