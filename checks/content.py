"""Content checks: safety screen, category coverage, answer leakage, prompt distribution.

Seed checklist items (shared/seeds/dpo-ppo-grpo-compare.zh.txt, "偏好数据 Checklist"):

    1. the dataset's prompts match the production prompt distribution   check_prompt_distribution
    5. no political / sexual / extremist samples                          check_safety
    6. prompts cover the "safety", "style" and "factuality" dimensions    check_category_coverage
    7. no leaked reference answers in the prompts                         check_answer_leakage

All four are pure functions of frames (or series) and thresholds that return a `CheckResult`; the
only thing read from disk is the packaged default lexicon (`safety_lexicon.yaml`, loaded once), and
model-backed safety scoring is injected as a callable (`hf_text_classifier` builds one). Every
model-free path is vectorised (polars expressions, numpy over the Arrow byte buffers) so it runs on
a million pairs in seconds; timings are in tests/test_content.py's module docstring.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from prefdata.checks.base import CheckResult, skip
from prefdata.records import normalise_expr

SAFETY_ID = "safety"
COVERAGE_ID = "category_coverage"
LEAKAGE_ID = "answer_leakage"
DISTRIBUTION_ID = "prompt_distribution"

# Defaults, with the checklist item each comes from (the seed gives no numbers for 1, 6 and 7).
SAFETY_MAX_FLAGGED_SHARE = 0.0  # item 5 "拒绝政治 / 色情 / 极端样本": reject such samples, so none is allowed
COVERAGE_MIN_SHARE = 0.05  # item 6: all three dimensions present; 5% each is our floor for "present"
LEAKAGE_NGRAM = 8  # item 7 "prompt 中无泄漏的标准答案": 8 words in a row is copying, not shared phrasing
LEAKAGE_MAX_OVERLAP = 0.5  # item 7: more than half of an answer's 8-grams in its prompt is a leak
LEAKAGE_MIN_CHARS = 20  # item 7: shorter answers ("Yes.", "?") match chat histories by chance
DISTRIBUTION_ALPHA = 0.01  # item 1 "prompt 分布与上线分布一致": fail only on clear evidence of a shift

# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------

_U = np.uint64
_K1 = _U(0x9E3779B97F4A7C15)
_K2 = _U(0xBF58476D1CE4E5B9)
_K3 = _U(0x94D049BB133111EB)


def _ids(pairs: pl.DataFrame, mask: np.ndarray | pl.Series) -> tuple[str, ...]:
    """`id` values of the rows where mask is true, in row order (row numbers without an id column)."""
    mask = pl.Series(mask) if not isinstance(mask, pl.Series) else mask
    if "id" in pairs.columns:
        return tuple(pairs["id"].cast(pl.String).filter(mask).fill_null("").to_list())
    return tuple(str(i) for i in np.flatnonzero(mask.to_numpy()))


def _mix64(x: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """In-place splitmix64 finaliser of a uint64 array (a bijection, so distinct inputs stay distinct)."""
    tmp = np.empty_like(x) if tmp is None else tmp[: x.size]
    np.right_shift(x, _U(30), out=tmp)
    x ^= tmp
    x *= _K2
    np.right_shift(x, _U(27), out=tmp)
    x ^= tmp
    x *= _K3
    np.right_shift(x, _U(31), out=tmp)
    x ^= tmp
    return x


def _utf8_buffer(texts: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The texts' UTF-8 bytes back to back (a read-only view, no copy) and int64 offsets (n + 1)."""
    import pyarrow as pa

    arr = texts.cast(pl.String).fill_null("").to_arrow()
    if hasattr(arr, "combine_chunks"):
        arr = arr.combine_chunks()
    arr = arr.cast(pa.large_string())
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


# ---------------------------------------------------------------------------------------------
# item 5: safety
# ---------------------------------------------------------------------------------------------

SAFETY_CATEGORIES = ("political", "sexual", "extremist")
LEXICON_RESOURCE = "safety_lexicon.yaml"
# Model labels that mean "nothing to flag" (compared case-insensitively). LABEL_0 is the usual
# negative class of an unnamed binary classifier; pass `safe_labels` / `label_map` for anything else.
DEFAULT_SAFE_LABELS = ("safe", "neutral", "non-toxic", "non_toxic", "not_toxic", "ok", "normal", "none", "label_0")
SCORE_BATCH = 4096  # texts handed to a model scorer per call

Scores = Sequence[float] | Sequence[Mapping[str, float]]
Scorer = Callable[[list[str]], Scores]


@functools.cache
def load_safety_lexicon() -> dict[str, tuple[str, ...]]:
    """The packaged default lexicon: {category: regex fragments} (see safety_lexicon.yaml)."""
    import yaml

    text = importlib.resources.files("prefdata.checks").joinpath(LEXICON_RESOURCE).read_text("utf-8")
    raw = yaml.safe_load(text)["categories"]
    return {str(cat): tuple(str(term) for term in terms) for cat, terms in raw.items()}


def _boundary_pattern(terms: Sequence[str]) -> str:
    # ASCII word boundaries: Unicode \b makes the regex engine leave its fast DFA on non-ASCII text.
    return r"(?-u:\b)(?:" + "|".join(f"(?:{t})" for t in terms) + r")(?-u:\b)"


class LexiconScorer:
    """Word-boundary regexes per category, compiled once, applied with polars on lower-cased text.

    `flags(series)` is the vectorised form check_safety uses; calling the object with a list of texts
    gives the generic scorer protocol (one {category: 0.0 or 1.0} dict per text).
    """

    threshold = 0.5

    def __init__(self, lexicon: Mapping[str, Sequence[str]] | None = None):
        lexicon = load_safety_lexicon() if lexicon is None else lexicon
        self.lexicon = {str(c): tuple(terms) for c, terms in lexicon.items() if len(terms)}
        if not self.lexicon:
            raise ValueError("the lexicon has no terms")
        self.categories = tuple(self.lexicon)
        self.patterns = {c: _boundary_pattern(t) for c, t in self.lexicon.items()}
        self.any_pattern = _boundary_pattern([t for terms in self.lexicon.values() for t in terms])
        # polars compiles on first use: compile now so a bad fragment fails here, naming its category
        for cat, pattern in self.patterns.items():
            try:
                pl.Series([""]).str.contains(pattern)
            except Exception as exc:  # polars raises ComputeError for an invalid regex
                raise ValueError(f"invalid regex in lexicon category {cat!r}: {exc}") from exc

    def __repr__(self) -> str:
        sizes = ", ".join(f"{c}: {len(t)}" for c, t in self.lexicon.items())
        return f"LexiconScorer({sizes})"

    def flags(self, texts: pl.Series) -> pl.DataFrame:
        """One boolean column per category (null text: false). Only rows that match the combined
        pattern are matched per category, so clean data costs one regex pass."""
        low = texts.cast(pl.String).fill_null("").str.to_lowercase()
        hit = low.str.contains(self.any_pattern).to_numpy()
        out = {c: np.zeros(len(low), dtype=bool) for c in self.categories}
        rows = np.flatnonzero(hit)
        if rows.size:
            sub = low.gather(rows)
            for cat, pattern in self.patterns.items():
                out[cat][rows] = sub.str.contains(pattern).to_numpy()
        return pl.DataFrame(out)

    def __call__(self, texts: list[str]) -> list[dict[str, float]]:
        frame = self.flags(pl.Series(texts, dtype=pl.String))
        return [{c: float(v) for c, v in row.items()} for row in frame.iter_rows(named=True)]


@functools.cache
def _default_lexicon_scorer() -> LexiconScorer:
    return LexiconScorer()


class HFTextClassifier:
    """A scorer over a local Hugging Face text-classification model (see `hf_text_classifier`)."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        threshold: float = 0.5,
        batch_size: int = 32,
        *,
        safe_labels: Sequence[str] = DEFAULT_SAFE_LABELS,
        label_map: Mapping[str, str] | None = None,
        device: int | str | None = None,
        max_length: int | None = None,
    ):
        from transformers import pipeline  # heavy import, only when a model is used

        self.model_path = str(model_path)
        self.threshold = float(threshold)
        self.batch_size = int(batch_size)
        self.safe_labels = {s.lower() for s in safe_labels}
        self.label_map = dict(label_map or {})
        self.max_length = max_length
        self.pipeline = pipeline(
            "text-classification",
            model=self.model_path,
            tokenizer=self.model_path,
            top_k=None,
            device=-1 if device is None else device,
        )

    def __repr__(self) -> str:
        return f"hf_text_classifier({self.model_path!r}, threshold={self.threshold})"

    def __call__(self, texts: list[str]) -> list[dict[str, float]]:
        if not texts:
            return []
        kwargs: dict[str, Any] = {"truncation": True}
        if self.max_length is not None:
            kwargs["max_length"] = self.max_length
        outputs = self.pipeline(list(texts), batch_size=self.batch_size, **kwargs)
        scores: list[dict[str, float]] = []
        for row in outputs:
            row = [row] if isinstance(row, dict) else row
            entry: dict[str, float] = {}
            for item in row:
                label = self.label_map.get(item["label"], item["label"])
                if label.lower() in self.safe_labels:
                    continue
                entry[label] = max(entry.get(label, 0.0), float(item["score"]))
            scores.append(entry)
        return scores


def hf_text_classifier(
    model_path: str | os.PathLike[str],
    threshold: float = 0.5,
    batch_size: int = 32,
    **kwargs: Any,
) -> HFTextClassifier:
    """A safety scorer from a local Hugging Face text-classification model, loaded by path.

    The callable maps a list of texts to one {label: score} dict per text, leaving out the labels
    named in `safe_labels` (default DEFAULT_SAFE_LABELS); `label_map` renames model labels to
    categories first. Multi-label models (problem_type "multi_label_classification") get sigmoid
    scores, others softmax, as transformers' pipeline decides. `threshold` travels with the scorer:
    check_safety flags a text whose score for any category is >= it. Keyword arguments: safe_labels,
    label_map, device (pipeline device; default CPU), max_length (tokens; default the tokenizer's
    model_max_length; longer texts are truncated).
    """
    return HFTextClassifier(model_path, threshold, batch_size, **kwargs)


def _score_texts(scorer: Scorer, texts: list[str]) -> list[dict[str, float]]:
    """Run a scorer in batches; plain float scores become the category "unsafe"."""
    results: list[dict[str, float]] = []
    for start in range(0, len(texts), SCORE_BATCH):
        batch = texts[start : start + SCORE_BATCH]
        scores = list(scorer(batch))
        if len(scores) != len(batch):
            raise ValueError(f"scorer returned {len(scores)} scores for {len(batch)} texts")
        for score in scores:
            if isinstance(score, Mapping):
                results.append({str(k): float(v) for k, v in score.items()})
            else:
                results.append({"unsafe": float(score)})
    return results


def _model_flags(scorer: Scorer, pairs: pl.DataFrame, columns: list[str], threshold: float) -> dict[str, pl.DataFrame]:
    """Score each distinct text once; per column, a frame of boolean columns per category."""
    texts = pl.concat([pairs[c].cast(pl.String) for c in columns]).drop_nulls().unique(maintain_order=True)
    scored = _score_texts(scorer, texts.to_list())
    categories = sorted({c for s in scored for c in s})
    table = pl.DataFrame(
        {"__text": texts, **{c: [s.get(c, 0.0) >= threshold for s in scored] for c in categories}},
        schema={"__text": pl.String, **{c: pl.Boolean for c in categories}},
    )
    out = {}
    for column in columns:
        joined = pairs.select(pl.col(column).cast(pl.String).alias("__text")).join(
            table, on="__text", how="left", maintain_order="left"
        )
        out[column] = joined.select(pl.col(c).fill_null(False) for c in categories) if categories else pl.DataFrame()
    return out


def check_safety(
    pairs: pl.DataFrame,
    scorer: Scorer | None = None,
    max_flagged_share: float = SAFETY_MAX_FLAGGED_SHARE,
    columns: Sequence[str] = ("prompt", "chosen"),
    score_threshold: float | None = None,
) -> CheckResult:
    """Seed item 5 ("拒绝政治 / 色情 / 极端样本"): no political, sexual or extremist prompts or chosen
    responses. Fails when the share of rows with any flagged text exceeds `max_flagged_share`
    (default 0.0: every flagged row is a failure, as the item reads).

    Default scorer: the packaged lexicon (LexiconScorer), vectorised. Any other scorer is a callable
    `(texts) -> list[dict[category, score]] | list[float]` (floats become category "unsafe"); a text is
    flagged for a category when its score >= `score_threshold` (default: the scorer's `threshold`
    attribute, else 0.5). Each distinct text is scored once. The rejected response is not checked
    by default: a harmful rejected response is exactly what a safety pair should contain.
    """
    present = [c for c in columns if c in pairs.columns]
    missing = [c for c in columns if c not in pairs.columns]
    if not present:
        reason = f"none of the columns {list(columns)} is present; provide a frame with them"
        return skip(SAFETY_ID, reason, max_flagged_share)
    if pairs.height == 0:
        return skip(SAFETY_ID, "no rows", max_flagged_share)
    scorer = _default_lexicon_scorer() if scorer is None else scorer
    threshold = float(score_threshold if score_threshold is not None else getattr(scorer, "threshold", 0.5))
    if isinstance(scorer, LexiconScorer):
        per_column = {c: scorer.flags(pairs[c]) for c in present}
        categories = list(scorer.categories)
    else:
        per_column = _model_flags(scorer, pairs, present, threshold)
        categories = sorted({c for frame in per_column.values() for c in frame.columns})

    n = pairs.height
    row_flag = np.zeros(n, dtype=bool)
    by_category = {c: np.zeros(n, dtype=bool) for c in categories}
    by_column_category: dict[str, dict[str, int]] = {}
    by_column: dict[str, int] = {}
    for column, frame in per_column.items():
        column_flag = np.zeros(n, dtype=bool)
        counts = {}
        for cat in frame.columns:
            flags = frame[cat].to_numpy()
            counts[cat] = int(flags.sum())
            column_flag |= flags
            by_category[cat] |= flags
        by_column_category[column] = counts
        by_column[column] = int(column_flag.sum())
        row_flag |= column_flag
    n_flagged = int(row_flag.sum())
    share = n_flagged / n
    status = "fail" if share > max_flagged_share else "pass"
    per_cat = {c: int(v.sum()) for c, v in by_category.items()}
    named = ", ".join(f"{c} {k}" for c, k in per_cat.items() if k) or "none"
    message = (
        f"{n_flagged} of {n} rows ({share:.2%}) have flagged text in {', '.join(present)} "
        f"(by category: {named}); allowed share {max_flagged_share:.2%}"
    )
    if missing:
        message += f"; columns not present: {', '.join(missing)}"
    return CheckResult(
        SAFETY_ID, status, metric=share, threshold=max_flagged_share, offending=_ids(pairs, row_flag), message=message,
        details={
            "scorer": repr(scorer),
            "score_threshold": threshold,
            "columns": present,
            "missing_columns": missing,
            "n_rows": n,
            "n_offending": n_flagged,
            "by_category": per_cat,
            "by_column": by_column,
            "by_column_category": by_column_category,
        },
    )


# ---------------------------------------------------------------------------------------------
# item 6: category coverage
# ---------------------------------------------------------------------------------------------

REQUIRED_DIMENSIONS = ("safety", "style", "factuality")
# Source category -> checklist dimension. MT-Bench's eight categories: writing and roleplay are
# judged on form (tone, voice, creativity) -> style; stem, humanities, extraction, reasoning, math
# and coding have answers that are right or wrong -> factuality (we read "事实性" as "verifiable
# correctness", which is what reasoning/math/coding prompts train, not only world knowledge).
# Keys are compared after lower-casing and turning runs of spaces/hyphens into "_".
DEFAULT_CATEGORY_MAP: dict[str, str] = {
    # style
    "writing": "style", "roleplay": "style", "role_play": "style", "creative_writing": "style",
    "creative": "style", "style": "style", "brainstorming": "style", "rewrite": "style",
    # factuality
    "stem": "factuality", "humanities": "factuality", "extraction": "factuality",
    "reasoning": "factuality", "math": "factuality", "coding": "factuality", "code": "factuality",
    "knowledge": "factuality", "factuality": "factuality", "factual": "factuality", "qa": "factuality",
    "open_qa": "factuality", "closed_qa": "factuality", "summarization": "factuality",
    "information_extraction": "factuality", "classification": "factuality",
    # safety
    "safety": "safety", "harmless": "safety", "harmlessness": "safety", "harmless_base": "safety",
    "red_team": "safety", "redteam": "safety", "red_teaming": "safety", "unsafe": "safety",
    "toxicity": "safety", "jailbreak": "safety", "refusal": "safety",
}

# Fallback keyword tagger, used only where there is no category (no column, or a null value). A
# prompt gets every dimension whose pattern matches its lower-cased text (so shares can sum past
# 1); it is a coarse screen, documented as such in details["inferred"] / details["n_inferred"].
_SAFETY_EXTRA = (
    r"illegal(?:ly)?|weapons?|guns?|drugs?|cocaine|heroin|meth|steal(?:ing)?|stole|theft|rob(?:bery|bing)?|"
    r"hack(?:ing|er)?|poison(?:ing)?|suicide|self[- ]harm|kill(?:ing)?|hurt|harm(?:ful)?|abuse|violen(?:ce|t)|"
    r"racis(?:t|m)|sexis(?:t|m)|insults?|slurs?|cheat(?:ing)?|scams?|fraud|launder(?:ing)?|kidnap[a-z]*|"
    r"threat(?:en|s)?|dangerous|hate|offensive|jailbreak|revenge|without getting caught"
)
TAGGER_PATTERNS: dict[str, str] = {
    "style": (
        r"(?-u:\b)(?:write|writing|compose|draft|rewrite|rephrase|paraphrase|poems?|poetry|story|stories|"
        r"essays?|blog|e-?mails?|letters?|slogans?|lyrics|songs?|haiku|limerick|tone|style|formal|informal|"
        r"casual|humou?r(?:ous)?|funny|persuasive|creative|role-?play|pretend|imagine (?:you|that)|act as|"
        r"in the voice of|characters?|narrat(?:e|ive)|tweet|speech|dialogue|script|screenplay)(?-u:\b)"
    ),
    "factuality": (
        r"(?-u:\b)(?:what (?:is|are|was|were)|who (?:is|was|were|invented|discovered|wrote)|"
        r"when (?:did|was|is|were)|where (?:is|are|was|did)|which|how (?:many|much|does|do|did)|"
        r"why (?:is|are|does|do|did)|explain|define|definition|describe|facts?|true|false|history|historical|"
        r"science|scientific|calculate|compute|solve|equations?|prove|math(?:ematics)?|probability|code|"
        r"function|program|algorithm|python|sql|capital of|population|formula|theorem|summari[sz]e|extract)(?-u:\b)"
    ),
}


def _tagger_patterns() -> dict[str, str]:
    lexicon_terms = [t for terms in load_safety_lexicon().values() for t in terms]
    safety = r"(?-u:\b)(?:" + _SAFETY_EXTRA + "|" + "|".join(f"(?:{t})" for t in lexicon_terms) + r")(?-u:\b)"
    return {"safety": safety, **TAGGER_PATTERNS}


def infer_dimensions(prompts: pl.Series) -> pl.DataFrame:
    """The keyword tagger: one boolean column per dimension (safety, style, factuality)."""
    low = prompts.cast(pl.String).fill_null("").str.to_lowercase()
    return pl.DataFrame({dim: low.str.contains(pattern) for dim, pattern in _tagger_patterns().items()})


def _norm_category(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String).str.strip_chars().str.to_lowercase().str.replace_all(r"[\s\-]+", "_")


def _norm_key(key: str) -> str:
    return "_".join(key.strip().lower().replace("-", " ").split())


def check_category_coverage(
    pairs: pl.DataFrame,
    required: Sequence[str] = REQUIRED_DIMENSIONS,
    min_share: float = COVERAGE_MIN_SHARE,
    category_map: Mapping[str, str] | None = None,
) -> CheckResult:
    """Seed item 6 ("包含「安全性」「风格」「事实性」三个维度的 prompt"): each required dimension holds at
    least `min_share` of the rows. The 5% default is ours (the seed gives no number): enough that a
    dimension is a real part of the data, small enough for a skewed but complete mix.

    Dimensions come from the `category` column through `category_map` (default DEFAULT_CATEGORY_MAP;
    a given map replaces it; a category equal to a required name always maps to itself; unmapped
    categories count as "other"). Rows without a category (no column, or null) are tagged by the
    keyword tagger (`infer_dimensions`) and details["inferred"] is True. metric = the smallest share
    among the required dimensions; `offending` lists dimension names, not row ids.
    """
    required = tuple(required)
    if not required:
        raise ValueError("required must name at least one dimension")
    if pairs.height == 0:
        return skip(COVERAGE_ID, "no rows", min_share)
    mapping = {_norm_key(k): v for k, v in (DEFAULT_CATEGORY_MAP if category_map is None else category_map).items()}
    mapping.update({_norm_key(r): r for r in required})
    n = pairs.height
    has_category = "category" in pairs.columns
    if has_category:
        cats = pairs.select(_norm_category(pl.col("category")).alias("c"))["c"]
    else:
        cats = pl.Series("c", [None] * n, dtype=pl.String)
    null = cats.is_null().to_numpy()
    n_inferred = int(null.sum())
    if n_inferred and "prompt" not in pairs.columns:
        reason = "no category for some rows and no prompt column to infer one from; provide `category`"
        return skip(COVERAGE_ID, reason, min_share)

    counts: dict[str, int] = {}
    unmapped: dict[str, int] = {}
    if n_inferred < n:
        known = pl.DataFrame({"c": cats.filter(~pl.Series(null))}).group_by("c").len()
        for cat, k in known.iter_rows():
            dim = mapping.get(cat)
            if dim is None:
                unmapped[cat] = int(k)
                dim = "other"
            counts[dim] = counts.get(dim, 0) + int(k)
    if n_inferred:
        prompts = pairs["prompt"].filter(pl.Series(null)) if n_inferred < n else pairs["prompt"]
        tags = infer_dimensions(prompts)
        untagged = ~np.any(np.column_stack([tags[c].to_numpy() for c in tags.columns]), axis=1)
        for dim in tags.columns:
            counts[dim] = counts.get(dim, 0) + int(tags[dim].sum())
        if untagged.any():
            counts["other"] = counts.get("other", 0) + int(untagged.sum())

    shares = {dim: counts.get(dim, 0) / n for dim in sorted(set(counts) | set(required))}
    metric = min(shares[r] for r in required)
    offending = tuple(r for r in required if shares[r] < min_share)
    status = "fail" if offending else "pass"
    summary = ", ".join(f"{r} {shares[r]:.1%}" for r in required)
    message = f"shares of {n} rows: {summary} (minimum {min_share:.1%})"
    if offending:
        message += (f"; under-covered or missing dimensions: {', '.join(offending)} "
                    "(offending lists dimension names, not row ids)")
    if n_inferred:
        message += f"; {n_inferred} rows had no category and were tagged by keywords"
    return CheckResult(
        COVERAGE_ID, status, metric=metric, threshold=min_share, offending=offending, message=message,
        details={
            "share": shares,
            "counts": counts,
            "required": list(required),
            "n_rows": n,
            "inferred": bool(n_inferred),
            "n_inferred": n_inferred,
            "unmapped_categories": dict(sorted(unmapped.items(), key=lambda kv: -kv[1])[:50]),
            "n_offending": len(offending),
        },
    )


# ---------------------------------------------------------------------------------------------
# item 7: answer leakage
# ---------------------------------------------------------------------------------------------
#
# Word n-gram overlap between each row's prompt and response, exact up to 64-bit hashing, vectorised
# with numpy over the Arrow byte buffers in chunks of rows (so scratch arrays stay small and are
# reused; fresh allocations are what make numpy slow at this scale):
#   words    maximal runs of bytes > 0x20 (whitespace and control characters separate words;
#            punctuation stays attached, as it does in copied text), ASCII letters lower-cased;
#   word id  the word's first and last 8 bytes and its length (exact for words up to 16 bytes);
#   n-gram   polynomial hash of n consecutive word ids within one text (prefix sums with wrapping
#            uint64 arithmetic, divided back by the start position's power);
#   match    n-gram hashes keyed by row; a 4 MiB bitmap discards most non-matches, the rest are
#            matched exactly (sorted search). share = response n-grams (positions) found in the
#            prompt / response n-grams.

_PAD = 8
_POLY = _U(0xD6E8FEB86659FD93)
_TABLE_BITS = 22
_CHUNK_BYTES = 1 << 20
_BLOCK_BYTES = 1 << 25  # text converted to Arrow buffers at a time (whole chunks)


def _inverse64(a: int) -> int:
    y = a  # Newton's iteration for the inverse of an odd number modulo 2**64
    for _ in range(6):
        y = (y * (2 - a * y)) % (1 << 64)
    return y


_POLY_INV = _U(_inverse64(int(_POLY)))


class _Scratch:
    """Per-thread reusable arrays, grown on demand."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: Any) -> np.ndarray:
        arr = self.arrays.get(name)
        if arr is None or arr.size < size or arr.dtype != dtype:
            arr = np.empty(max(size, 4096) * 5 // 4, dtype)
            self.arrays[name] = arr
        return arr[:size]

    def powers(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        p = self.arrays.get("pow")
        if p is None or p.size < size:
            k = max(size, 1 << 16) * 2
            with np.errstate(over="ignore"):
                p = np.full(k, _POLY, dtype=np.uint64)
                p[0] = 1
                np.cumprod(p, out=p)
                q = np.full(k, _POLY_INV, dtype=np.uint64)
                q[0] = 1
                np.cumprod(q, out=q)
            self.arrays["pow"], self.arrays["ipow"] = p, q
        return self.arrays["pow"][:size], self.arrays["ipow"][:size]


def _word_hashes(
    ws: _Scratch, tag: str, data: np.ndarray, offsets: np.ndarray, a: int, b: int
) -> tuple[np.ndarray, np.ndarray]:
    """Word ids of rows a..b of one text column (into scratch `tag`) and the word count per row."""
    lo, hi = int(offsets[a]), int(offsets[b])
    n = hi - lo
    buf = ws.get(tag + "buf", n + 2 * _PAD, np.uint8)
    buf[:_PAD] = 0
    buf[_PAD + n :] = 0
    buf[_PAD : _PAD + n] = data[lo:hi]
    tmp8 = ws.get("tmp8", buf.size, np.uint8)  # ASCII lower-case in place: buf |= 32 where 'A'..'Z'
    np.subtract(buf, np.uint8(65), out=tmp8)
    upper = np.less(tmp8, np.uint8(26), out=ws.get("upper", buf.size, np.bool_))
    np.left_shift(upper.view(np.uint8), np.uint8(5), out=tmp8)
    np.bitwise_or(buf, tmp8, out=buf)
    is_word = np.greater(buf, np.uint8(32), out=ws.get("w", buf.size, np.bool_))
    edge = np.not_equal(is_word[1:], is_word[:-1], out=ws.get("edge", buf.size - 1, np.bool_))
    idx = np.flatnonzero(edge)
    idx += 1
    row_start = offsets[a : b + 1] - (lo - _PAD)
    # a row boundary inside a run of word bytes (an odd number of edges before it and none at it):
    # split the word there, i.e. insert the boundary twice (an end, then a start)
    inner = np.unique(row_start[1:-1])
    before = np.searchsorted(idx, inner, "left")
    inside = ((before & 1) == 1) & (np.searchsorted(idx, inner, "right") == before)
    if inside.any():
        idx = np.insert(idx, np.repeat(before[inside], 2), np.repeat(inner[inside], 2))
    starts, ends = idx[0::2], idx[1::2]
    counts = np.diff(np.searchsorted(starts, row_start))
    w = starts.size
    view = np.ndarray((buf.size - 7,), dtype="<u8", buffer=buf, strides=(1,))
    length = np.subtract(ends, starts, out=ws.get("len", w, np.int64)).view(np.uint64)
    shift = np.minimum(length, _U(8), out=ws.get("shift", w, np.uint64))
    np.subtract(_U(8), shift, out=shift)
    np.left_shift(shift, _U(3), out=shift)
    first = ws.get(tag + "h", w, np.uint64)
    first[:] = view[starts]
    np.left_shift(first, shift, out=first)
    np.right_shift(first, shift, out=first)
    last = ws.get("last", w, np.uint64)
    last[:] = view[np.subtract(ends, 8, out=ws.get("e8", w, np.int64))]
    np.right_shift(last, shift, out=last)
    first *= _K1
    last *= _K2
    first += last
    first += length
    return first, counts


def _ngram_keys(ws: _Scratch, h: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the word n-grams of each row, keyed by row (row-major), and n-grams per row."""
    w = h.size
    m = w - n + 1
    per_row = np.maximum(counts - n + 1, 0)
    if m <= 0 or not per_row.any():
        return np.zeros(0, np.uint64), per_row
    p, q = ws.powers(w + 1)
    prefix = ws.get("prefix", w + 1, np.uint64)
    prefix[0] = 0
    np.multiply(h, p[:w], out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    g = np.subtract(prefix[n:], prefix[:m], out=ws.get("g", m, np.uint64))
    g *= q[:m]
    row = np.repeat(np.arange(1, counts.size + 1, dtype=np.uint64), counts)
    valid = np.equal(row[:m], row[n - 1 :], out=ws.get("valid", m, np.bool_))
    keys = g[valid]
    keys += np.repeat(np.arange(1, counts.size + 1, dtype=np.uint64), per_row) * _K1
    return _mix64(keys, ws.get("mixtmp", keys.size, np.uint64)), per_row


def _overlap_chunk(
    ws: _Scratch, prompt_buf: tuple, response_buf: tuple, a: int, b: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hp, cp = _word_hashes(ws, "p", *prompt_buf, a, b)
    kp, _ = _ngram_keys(ws, hp, cp, n)
    hr, cr = _word_hashes(ws, "r", *response_buf, a, b)
    kr, per_row = _ngram_keys(ws, hr, cr, n)
    hits = np.zeros(b - a, np.int64)
    if kp.size and kr.size:
        table = ws.arrays.get("table")
        if table is None:
            table = ws.arrays["table"] = np.zeros(1 << _TABLE_BITS, np.bool_)
        shift = _U(64 - _TABLE_BITS)
        ip = (kp >> shift).astype(np.intp)
        ir = (kr >> shift).astype(np.intp)
        table[ip] = True
        maybe_r = table[ir]
        table[ip] = False
        if maybe_r.any():
            cand = np.flatnonzero(maybe_r)
            table[ir[cand]] = True
            kp_cand = np.sort(kp[table[ip]])
            table[ir[cand]] = False
            kc = kr[cand]
            pos = np.searchsorted(kp_cand, kc)
            pos[pos == kp_cand.size] = 0
            found = cand[kp_cand[pos] == kc] if kp_cand.size else cand[:0]
            if found.size:
                rows = np.repeat(np.arange(b - a), per_row)
                hits = np.bincount(rows[found], minlength=b - a)
    return hits, per_row, cr


def word_ngram_overlap(
    prompts: pl.Series, responses: pl.Series, n: int = 8, threads: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (response n-grams found in the prompt, response n-grams, response words).

    Vectorised; see the comment above for the definitions. `threads` defaults to min(2, CPUs).
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if len(prompts) != len(responses):
        raise ValueError("prompts and responses differ in length")
    if len(prompts) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    prompts, responses = prompts.cast(pl.String).fill_null(""), responses.cast(pl.String).fill_null("")
    return _overlap_in_blocks(lambda a, b: (prompts.slice(a, b - a), responses.slice(a, b - a)),
                              _len_bytes(prompts) + _len_bytes(responses), n, threads)


def _len_bytes(texts: pl.Series) -> np.ndarray:
    return texts.str.len_bytes().fill_null(0).cast(pl.Int64).to_numpy()


def _row_blocks(row_bytes: np.ndarray, block_bytes: int | None = None) -> list[tuple[int, int]]:
    """Consecutive row ranges [a, b) of about `block_bytes` (default _BLOCK_BYTES) bytes of text."""
    if row_bytes.size == 0:
        return []
    cum = np.cumsum(row_bytes + 1)
    step = block_bytes or _BLOCK_BYTES
    cuts = np.searchsorted(cum, np.arange(step, int(cum[-1]), step, dtype=np.int64), "right")
    edges = np.unique(np.concatenate([[0], cuts, [row_bytes.size]]))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _overlap_in_blocks(
    texts: Callable[[int, int], tuple[pl.Series, pl.Series]], row_bytes: np.ndarray, n: int, threads: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`word_ngram_overlap` of the (prompt, response) texts of rows a..b-1 given by `texts(a, b)`,
    whose UTF-8 sizes together are `row_bytes` per row. Rows are hashed in chunks of about
    _CHUNK_BYTES; their Arrow buffers are made a block of about _BLOCK_BYTES (whole chunks) at a
    time, so the columns are never copied whole. A chunk's result depends only on its rows' bytes,
    so the blocks change nothing."""
    rows = row_bytes.size
    cum = np.cumsum(row_bytes)
    cuts = np.searchsorted(cum, np.arange(_CHUNK_BYTES, int(cum[-1]), _CHUNK_BYTES), "right")
    edges = np.unique(np.concatenate([[0], cuts, [rows]]))
    bounds = [(int(x), int(y)) for x, y in zip(edges[:-1], edges[1:]) if y > x]
    blocks: list[list[tuple[int, int]]] = [[]]
    block_start = 0
    for a, b in bounds:
        if blocks[-1] and int(cum[b - 1]) - block_start > _BLOCK_BYTES:
            blocks.append([])
            block_start = int(cum[a - 1])
        blocks[-1].append((a, b))
    local = threading.local()
    threads = min(2, os.cpu_count() or 1) if threads is None else max(1, int(threads))
    pool = ThreadPoolExecutor(threads) if threads > 1 and len(bounds) > 1 else None
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    try:
        for chunks in blocks:
            start, stop = chunks[0][0], chunks[-1][1]
            prompt_block, response_block = texts(start, stop)
            pbuf, rbuf = _utf8_buffer(prompt_block), _utf8_buffer(response_block)
            del prompt_block, response_block

            def run(ab: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
                ws = getattr(local, "ws", None)
                if ws is None:
                    ws = local.ws = _Scratch()
                return _overlap_chunk(ws, pbuf, rbuf, ab[0] - start, ab[1] - start, n)

            parts.extend(pool.map(run, chunks) if pool else map(run, chunks))
            del pbuf, rbuf
    finally:
        if pool:
            pool.shutdown()
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


def check_answer_leakage(
    pairs: pl.DataFrame,
    reference_column: str = "reference",
    ngram: int = LEAKAGE_NGRAM,
    max_overlap: float = LEAKAGE_MAX_OVERLAP,
    min_chars: int = LEAKAGE_MIN_CHARS,
) -> CheckResult:
    """Seed item 7 ("prompt 中无泄漏的标准答案"): no prompt contains its answer. The answers are the
    chosen response and, when present, a reference answer (`reference_column`, else an `answer`
    column). A row is flagged for an answer text when
      - the text (whitespace-stripped, at least `min_chars` characters) appears verbatim in the prompt;
      - it has fewer than `ngram` words, at least `min_chars` characters, and appears in the prompt
        after both are normalised (`prefdata.records.normalise_text`: NFKC, case folding,
        whitespace); or
      - more than `max_overlap` of its word `ngram`-grams occur in the prompt (`word_ngram_overlap`).
    `min_chars` (default 20) keeps one-word replies ("Yes.", "?", "") from matching every chat
    history that happens to contain them. metric = share of flagged rows; any flagged row fails.
    """
    threshold = 0.0
    if "prompt" not in pairs.columns:
        return skip(LEAKAGE_ID, "no prompt column; provide `prompt`", threshold)
    reference = reference_column if reference_column in pairs.columns else None
    if reference is None and reference_column == "reference" and "answer" in pairs.columns:
        reference = "answer"
    targets = [c for c in ("chosen", reference) if c is not None and c in pairs.columns]
    if not targets:
        return skip(LEAKAGE_ID, f"no answer to look for: provide `chosen` or a `{reference_column}` column", threshold)
    if pairs.height == 0:
        return skip(LEAKAGE_ID, "no rows", threshold)
    if ngram < 1 or not 0.0 <= max_overlap < 1.0:
        raise ValueError("ngram must be >= 1 and max_overlap in [0, 1)")

    n = pairs.height
    prompt = pairs["prompt"].cast(pl.String).fill_null("")
    prompt_bytes = _len_bytes(prompt)
    row_flag = np.zeros(n, dtype=bool)
    by_target: dict[str, dict[str, int]] = {}
    max_share_seen = 0.0
    for target in targets:
        column = pairs[target].cast(pl.String).fill_null("")

        def answer(a: int, b: int) -> pl.Series:
            return column.slice(a, b - a).str.strip_chars()

        # every step is per row, so it runs on blocks of rows: the stripped answers (and the Arrow
        # copies the n-gram overlap reads) are never made for the whole column at once
        blocks = _row_blocks(prompt_bytes + _len_bytes(column))
        text_bytes = np.concatenate([_len_bytes(answer(a, b)) for a, b in blocks])
        hits, grams, words = _overlap_in_blocks(lambda a, b: (prompt.slice(a, b - a), answer(a, b)),
                                                prompt_bytes + text_bytes, ngram, None)
        del text_bytes
        share = np.divide(hits, grams, out=np.zeros(n), where=grams > 0)
        overlap = (grams > 0) & (share > max_overlap)
        verbatim = np.zeros(n, dtype=bool)
        short_hit = np.zeros(n, dtype=bool)
        for a, b in blocks:
            text = answer(a, b)
            frame = pl.DataFrame({"p": prompt.slice(a, b - a), "t": text})
            long_enough = (text.str.len_chars() >= min_chars).to_numpy()
            found = frame.select(pl.col("p").str.contains(pl.col("t"), literal=True)).to_series().to_numpy()
            verbatim[a:b] = found & long_enough
            short = long_enough & (words[a:b] < ngram) & ~verbatim[a:b]
            if short.any():
                rows = np.flatnonzero(short)
                sub = frame[rows].select(normalise_expr("p").alias("p"), normalise_expr("t").alias("t"))
                hit = sub.select(pl.col("p").str.contains(pl.col("t"), literal=True)).to_series()
                short_hit[a + rows] = hit.to_numpy()
        flag = verbatim | overlap | short_hit
        row_flag |= flag
        max_share_seen = max(max_share_seen, float(share.max(initial=0.0)))
        by_target[target] = {
            "flagged": int(flag.sum()),
            "verbatim": int(verbatim.sum()),
            "ngram_overlap": int(overlap.sum()),
            "short_substring": int(short_hit.sum()),
        }
    n_flagged = int(row_flag.sum())
    metric = n_flagged / n
    status = "fail" if metric > threshold else "pass"
    parts = "; ".join(
        f"{t}: {d['verbatim']} verbatim, {d['ngram_overlap']} with > {max_overlap:.0%} of {ngram}-grams, "
        f"{d['short_substring']} short answers" for t, d in by_target.items()
    )
    message = f"{n_flagged} of {n} prompts contain their answer ({parts})"
    return CheckResult(
        LEAKAGE_ID, status, metric=metric, threshold=threshold, offending=_ids(pairs, row_flag), message=message,
        details={
            "targets": targets,
            "ngram": ngram,
            "max_overlap": max_overlap,
            "min_chars": min_chars,
            "n_rows": n,
            "n_offending": n_flagged,
            "by_target": by_target,
            "max_overlap_seen": max_share_seen,
        },
    )


# ---------------------------------------------------------------------------------------------
# item 1: prompt distribution
# ---------------------------------------------------------------------------------------------
#
# Two-sample permutation test on character n-gram TF-IDF features. Each side is subsampled (seeded)
# to `max_samples`; texts are lower-cased with whitespace collapsed; features are the byte 3-, 4- and
# 5-grams of the UTF-8 text (characters, for ASCII), weighted 1 + log(tf) times smoothed idf over the
# pooled sample, then signed-hashed to FEATURE_DIM dimensions (the hashing trick keeps inner products
# in expectation) and L2-normalised. Statistic: the biased MMD^2 with a linear (cosine) kernel,
# ||mean(x) - mean(y)||^2; p-value = (1 + #{permuted MMD^2 >= observed}) / (1 + n_permutations),
# which is exact-size under exchangeability (two halves of one source fail at rate alpha).

NGRAM_SIZES = (3, 4, 5)
FEATURE_DIM = 1024
MAX_TEXT_CHARS = 1000  # the first 1,000 characters of a prompt are its features (chat histories run long)


def _tfidf_matrix(texts: list[str]) -> tuple[np.ndarray, dict[str, Any]]:
    """L2-normalised signed-hashed TF-IDF rows, and what `_top_ngrams` needs to name n-grams."""
    series = pl.Series(texts, dtype=pl.String).str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()
    data, offsets = _utf8_buffer(series.str.slice(0, MAX_TEXT_CHARS))
    n_docs = len(texts)
    x = np.zeros((n_docs, FEATURE_DIM), np.float32)
    buf = np.zeros(data.size + 8, np.uint8)
    buf[: data.size] = data
    lengths = np.diff(offsets).astype(np.int64)
    doc_of_byte = np.repeat(np.arange(n_docs, dtype=np.uint64), lengths)
    room = np.repeat(offsets[1:], lengths) - np.arange(data.size, dtype=np.int64)  # bytes left in the doc
    view = np.ndarray((data.size,), dtype="<u8", buffer=buf, strides=(1,))
    # one uint64 per occurrence: the n-gram's hash in the high bits, its document in the low bits,
    # so a plain sort groups (n-gram, doc) pairs and then n-grams, with no argsort
    doc_bits = _U(max(1, int(n_docs - 1).bit_length()))
    grams, keys = [], []
    for k in NGRAM_SIZES:
        at = np.flatnonzero(room >= k)
        gram = view[at] << _U(8 * (8 - k))  # little-endian: keep the k bytes from `at`
        gram ^= _U(k)
        _mix64(gram)
        gram >>= doc_bits
        grams.append(gram)
        keys.append((gram << doc_bits) | doc_of_byte[at])
    if sum(k.size for k in keys) == 0:
        return x, {}
    occurrences = np.concatenate(grams)
    combined = np.sort(np.concatenate(keys))
    new_pair = np.ones(combined.size, bool)
    new_pair[1:] = combined[1:] != combined[:-1]
    first = np.flatnonzero(new_pair)
    tf = np.diff(np.append(first, combined.size)).astype(np.float64)
    pairs = combined[first]
    doc_u = (pairs & ((_U(1) << doc_bits) - _U(1))).astype(np.int64)
    gram_u = pairs >> doc_bits
    new_gram = np.ones(gram_u.size, bool)
    new_gram[1:] = gram_u[1:] != gram_u[:-1]
    inverse = np.cumsum(new_gram) - 1
    df = np.bincount(inverse)
    idf = np.log((1.0 + n_docs) / (1.0 + df)) + 1.0
    weight = (1.0 + np.log(tf)) * idf[inverse]
    bucket = (gram_u & _U(FEATURE_DIM - 1)).astype(np.int64)
    sign = np.where(((gram_u >> _U(20)) & _U(1)) == 1, -1.0, 1.0)
    flat = np.bincount(doc_u * FEATURE_DIM + bucket, weights=sign * weight, minlength=n_docs * FEATURE_DIM)
    x = flat.reshape(n_docs, FEATURE_DIM).astype(np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    sizes = np.concatenate([np.full(g.size, k, np.int8) for k, g in zip(NGRAM_SIZES, grams)])
    starts = np.concatenate([np.flatnonzero(room >= k) for k in NGRAM_SIZES])
    info = {"doc_u": doc_u, "inverse": inverse, "grams": gram_u[new_gram], "occurrences": occurrences,
            "starts": starts, "sizes": sizes, "buf": buf}
    return x, info


def _top_ngrams(info: dict[str, Any], is_x: np.ndarray, top: int = 10) -> list[dict[str, Any]]:
    """N-grams whose document share differs most between the two sides (for the reader)."""
    if not info:
        return []
    doc_u, inverse, grams = info["doc_u"], info["inverse"], info["grams"]
    nx, ny = int(is_x.sum()), int((~is_x).sum())
    in_x = np.bincount(inverse, weights=is_x[doc_u].astype(float), minlength=grams.size) / max(nx, 1)
    in_y = np.bincount(inverse, weights=(~is_x[doc_u]).astype(float), minlength=grams.size) / max(ny, 1)
    order = np.argsort(-np.abs(in_x - in_y), kind="stable")[:top]
    out = []
    for i in order:
        j = int(np.argmax(info["occurrences"] == grams[i]))  # an occurrence, to print the bytes
        start, size = int(info["starts"][j]), int(info["sizes"][j])
        text = bytes(info["buf"][start : start + size]).decode("utf-8", errors="replace")
        out.append({"ngram": text, "share_prompts": round(float(in_x[i]), 4),
                    "share_reference": round(float(in_y[i]), 4)})
    return out


def check_prompt_distribution(
    prompts: pl.Series,
    reference: pl.Series | None,
    alpha: float = DISTRIBUTION_ALPHA,
    max_samples: int = 2000,
    seed: int = 0,
    n_permutations: int = 1000,
) -> CheckResult:
    """Seed item 1 ("prompt 分布与上线分布一致"): the dataset's prompts look like a reference sample
    of production prompts. Permutation test of MMD^2 on character n-gram TF-IDF (see above); fails
    when p < `alpha`. alpha = 0.01 is ours: with many datasets checked, 0.05 would fail one in twenty
    sound ones. Deterministic for a given `seed`. Skips without a reference sample.
    """
    if reference is None:
        return skip(DISTRIBUTION_ID, "no reference sample; pass `reference`, a sample of production prompts", alpha)
    x_all = prompts.cast(pl.String).drop_nulls()
    y_all = reference.cast(pl.String).drop_nulls()
    if len(x_all) < 5 or len(y_all) < 5:
        reason = f"need at least 5 prompts on each side (have {len(x_all)} and {len(y_all)})"
        return skip(DISTRIBUTION_ID, reason, alpha)
    rng = np.random.default_rng(seed)

    def sample(s: pl.Series) -> list[str]:
        if len(s) <= max_samples:
            return s.to_list()
        return s.gather(np.sort(rng.choice(len(s), size=max_samples, replace=False))).to_list()

    x_texts, y_texts = sample(x_all), sample(y_all)
    nx, ny = len(x_texts), len(y_texts)
    features, info = _tfidf_matrix(x_texts + y_texts)
    is_x = np.zeros(nx + ny, bool)
    is_x[:nx] = True

    def mmd2(weights: np.ndarray) -> np.ndarray:
        diff = weights @ features  # rows: mean(x) - mean(y) under each labelling
        return np.einsum("ij,ij->i", diff, diff, dtype=np.float64)

    base = np.where(is_x, 1.0 / nx, -1.0 / ny).astype(np.float32)
    observed = float(mmd2(base[None, :])[0])
    exceed = 0
    for start in range(0, n_permutations, 250):  # 250 labellings per matrix product
        count = min(250, n_permutations - start)
        perms = rng.permuted(np.tile(base, (count, 1)), axis=1)
        exceed += int((mmd2(perms) >= observed * (1 - 1e-6)).sum())
    p_value = (1 + exceed) / (1 + n_permutations)
    status = "fail" if p_value < alpha else "pass"
    message = (
        f"MMD^2 {observed:.4g} between {nx} prompts and {ny} reference prompts, permutation p = {p_value:.4g} "
        f"({'below' if status == 'fail' else 'at or above'} alpha {alpha}): "
        + ("the prompts do not look like the reference" if status == "fail" else "no evidence the distributions differ")
    )
    return CheckResult(
        DISTRIBUTION_ID, status, metric=p_value, threshold=alpha, message=message,
        details={
            "mmd2": observed,
            "n_prompts": len(x_all),
            "n_reference": len(y_all),
            "n_sampled_prompts": nx,
            "n_sampled_reference": ny,
            "n_permutations": n_permutations,
            "seed": seed,
            "features": f"byte {NGRAM_SIZES}-grams, tf-idf, signed-hashed to {FEATURE_DIM}",
            "top_ngrams": _top_ngrams(info, is_x),
        },
    )
