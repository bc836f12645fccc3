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
a million pairs in seconds; timings are in tests/test_content.py's module docstring. The engines
live apart: word n-gram overlap in checks/ngrams.py, TF-IDF features in checks/tfidf.py, frame
helpers in checks/frames.py.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from prefdata.checks.base import CheckResult, default, skip
from prefdata.checks.frames import ids, len_bytes, per_distinct, row_blocks
from prefdata.checks.ngrams import overlap_in_blocks, word_ngram_overlap  # noqa: F401 - word_ngram_overlap: public here too
from prefdata.checks.tfidf import FEATURE_DIM, NGRAM_SIZES, tfidf_matrix, top_ngrams
from prefdata.data.records import normalise_expr

SAFETY_ID = "safety"
COVERAGE_ID = "category_coverage"
LEAKAGE_ID = "answer_leakage"
DISTRIBUTION_ID = "prompt_distribution"

# Defaults, with the checklist item each comes from (the seed gives no numbers for 1, 6 and 7); those
# checks/checklist.yaml names are set there (base.default).
SAFETY_MAX_FLAGGED_SHARE = default("safety", "max_flagged_share")  # item 5 "拒绝政治 / 色情 / 极端样本": reject such samples, so no counted row (0)
COVERAGE_MIN_SHARE = default("category_coverage", "min_share")  # item 6: all three dimensions present; 5% each is our floor for "present"
LEAKAGE_REFERENCE_COLUMN = default("answer_leakage", "reference_column")  # item 7 "prompt 中无泄漏的标准答案"
LEAKAGE_NGRAM = default("answer_leakage", "ngram")  # item 7: 8 words in a row is copying, not shared phrasing
LEAKAGE_MAX_OVERLAP = default("answer_leakage", "max_overlap")  # item 7: over half of an answer's 8-grams
LEAKAGE_MIN_CHARS = default("answer_leakage", "min_chars")  # item 7: "Yes.", "?" match chat histories by chance
DISTRIBUTION_ALPHA = default("prompt_distribution", "alpha")  # item 1 "prompt 分布与上线分布一致": fail only on clear evidence of a shift (0.01)
DISTRIBUTION_MAX_SAMPLES = default("prompt_distribution", "max_samples")
DISTRIBUTION_PERMUTATIONS = default("prompt_distribution", "n_permutations")
DISTRIBUTION_SEED = default("prompt_distribution", "seed")

# ---------------------------------------------------------------------------------------------
# item 5: safety
# ---------------------------------------------------------------------------------------------

SAFETY_SEVERITIES = ("unsafe", "sensitive")  # most to least severe; a lexicon category names one
# item 5 read as "harmful samples": a geography answer naming a parliament, a question about a
# religion or a sexual-health word is a topic, not harm, so only `unsafe` rows count by default.
SAFETY_FAIL_ON = tuple(default("safety", "fail_on"))  # ("unsafe",)
LEXICON_RESOURCE = "safety_lexicon.yaml"
# Model labels that mean "nothing to flag" (compared case-insensitively). LABEL_0 is the usual
# negative class of an unnamed binary classifier; pass `safe_labels` / `label_map` for anything else.
DEFAULT_SAFE_LABELS = ("safe", "neutral", "non-toxic", "non_toxic", "not_toxic", "ok", "normal", "none", "label_0")
SCORE_BATCH = 4096  # texts handed to a model scorer per call

Scores = Sequence[float] | Sequence[Mapping[str, float]]
Scorer = Callable[[list[str]], Scores]


@dataclass(frozen=True)
class LexiconCategory:
    """One category of a safety lexicon: its severity, its regex fragments (defines expanded) and the
    contexts that clear a hit in the same sentence (`unless`)."""

    severity: str
    terms: tuple[str, ...]
    unless: tuple[str, ...] = ()


def _expand(fragment: str, defines: Mapping[str, str]) -> str:
    # `<name>` -> the define's fragment; anything else in angle brackets is left to the regex
    return re.sub(r"<(\w+)>", lambda m: f"(?:{defines[m[1]]})" if m[1] in defines else m[0], fragment)


def parse_lexicon(raw: Mapping[str, Any]) -> dict[str, LexiconCategory]:
    """A lexicon file's content as {category: LexiconCategory}. Version 2 (safety_lexicon.yaml):
    `define` and, per category, `severity`, `terms` and `unless`; a category that is a plain list of
    terms (version 1) is `unsafe` with no `unless`, so an old lexicon keeps failing on every hit."""
    defines: dict[str, str] = {}
    for name, value in (raw.get("define") or {}).items():
        alternatives = [value] if isinstance(value, str) else list(value)
        defines[str(name)] = "|".join(_expand(str(v), defines) for v in alternatives)
    out = {}
    for cat, spec in raw["categories"].items():
        if isinstance(spec, LexiconCategory):
            out[str(cat)] = spec
            continue
        if not isinstance(spec, Mapping):
            spec = {"terms": spec}
        severity = str(spec.get("severity", "unsafe"))
        if severity not in SAFETY_SEVERITIES:
            raise ValueError(f"lexicon category {cat!r}: severity {severity!r} is not one of "
                             f"{', '.join(SAFETY_SEVERITIES)}")
        terms, unless = ([_expand(str(x), defines) for x in spec.get(key) or ()] for key in ("terms", "unless"))
        out[str(cat)] = LexiconCategory(severity, tuple(terms), tuple(unless))
    return out


@functools.cache
def load_safety_lexicon(path: str | None = None) -> dict[str, LexiconCategory]:
    """A lexicon file (default: the packaged safety_lexicon.yaml) as {category: LexiconCategory}."""
    from prefdata.base.yamlkeys import load_yaml

    source = importlib.resources.files("prefdata.checks").joinpath(LEXICON_RESOURCE) if path is None else Path(path)
    return parse_lexicon(load_yaml(source.read_text("utf-8"), str(path or LEXICON_RESOURCE)))


def _boundary_pattern(terms: Sequence[str]) -> str:
    # ASCII word boundaries: Unicode \b makes the regex engine leave its fast DFA on non-ASCII text.
    return r"(?-u:\b)(?:" + "|".join(f"(?:{t})" for t in terms) + r")(?-u:\b)"


def _sentences_with(terms: Sequence[str]) -> str:
    """A sentence (up to . ! ? or a line break) that holds one of `terms`: what `unless` clears."""
    return r"[^.!?\n]*" + _boundary_pattern(terms) + r"[^.!?\n]*"


class LexiconScorer:
    """Word-boundary regexes per category, compiled once, applied with polars on lower-cased text.

    `lexicon`: {category: LexiconCategory | {severity, terms, unless} | [terms]} (a plain list is
    `unsafe`); default the packaged lexicon. `severities` maps each category to its severity.
    `flags(series)` is the vectorised form check_safety uses; calling the object with a list of texts
    gives the generic scorer protocol (one {category: 0.0 or 1.0} dict per text).
    """

    threshold = 0.5

    def __init__(self, lexicon: Mapping[str, Any] | None = None):
        lexicon = load_safety_lexicon() if lexicon is None else parse_lexicon({"categories": lexicon})
        self.lexicon = {c: spec for c, spec in lexicon.items() if len(spec.terms)}
        if not self.lexicon:
            raise ValueError("the lexicon has no terms")
        self.categories = tuple(self.lexicon)
        self.severities = {c: spec.severity for c, spec in self.lexicon.items()}
        self.patterns = {c: _boundary_pattern(spec.terms) for c, spec in self.lexicon.items()}
        self.unless = {c: _sentences_with(spec.unless) for c, spec in self.lexicon.items() if spec.unless}
        self.any_pattern = _boundary_pattern([t for spec in self.lexicon.values() for t in spec.terms])
        # polars compiles on first use: compile now so a bad fragment fails here, naming its category
        for cat in self.categories:
            for pattern in (self.patterns[cat], self.unless.get(cat, "")):
                try:
                    pl.Series([""]).str.contains(pattern)
                except Exception as exc:  # polars raises ComputeError for an invalid regex
                    raise ValueError(f"invalid regex in lexicon category {cat!r}: {exc}") from exc

    def __repr__(self) -> str:
        sizes = ", ".join(f"{c}: {len(spec.terms)}" for c, spec in self.lexicon.items())
        return f"LexiconScorer({sizes})"

    def flags(self, texts: pl.Series) -> pl.DataFrame:
        """One boolean column per category (null text: false), each distinct text matched once
        (frames.per_distinct). Only rows that match the combined pattern are matched per category,
        so clean data costs one regex pass; a category's hits are matched again with its `unless`
        sentences cut out, and count only if they still match."""
        return per_distinct(texts.cast(pl.String).fill_null(""), self._flags)

    def _flags(self, texts: pl.Series) -> pl.DataFrame:
        low = texts.str.to_lowercase()
        hit = low.str.contains(self.any_pattern).to_numpy()
        out = {c: np.zeros(len(low), dtype=bool) for c in self.categories}
        rows = np.flatnonzero(hit)
        if rows.size:
            sub = low.gather(rows)
            for cat, pattern in self.patterns.items():
                found = sub.str.contains(pattern).to_numpy()
                if cat in self.unless and found.any():
                    at = np.flatnonzero(found)
                    found[at] = sub.gather(at).str.replace_all(self.unless[cat], "").str.contains(pattern).to_numpy()
                out[cat][rows] = found
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
        from prefdata.models.loading import load_text_classifier  # transformers loads only when a model is used

        self.model_path = str(model_path)
        self.threshold = float(threshold)
        self.batch_size = int(batch_size)
        self.safe_labels = {s.lower() for s in safe_labels}
        self.label_map = dict(label_map or {})
        self.max_length = max_length
        # loaded where every model path is (a .gguf file becomes its converted folder there)
        self.pipeline = load_text_classifier(self.model_path, device)

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
    fail_on: Sequence[str] = SAFETY_FAIL_ON,
) -> CheckResult:
    """Seed item 5 ("拒绝政治 / 色情 / 极端样本"): no harmful prompts or chosen responses. Fails when
    the share of rows with flagged text of a severity (or category) in `fail_on` exceeds
    `max_flagged_share` (default 0.0: every such row is a failure, as the item reads).

    Default scorer: the packaged lexicon (LexiconScorer), vectorised; its categories are `unsafe`
    (violence, weapons, self-harm, sexual content with minors, extremist propaganda, hate, crime,
    privacy) or `sensitive` (politics, institutions, religion, sexual words, extremist groups and
    atrocities by name, drugs). Only `unsafe` rows count by default; every category's rows are counted
    in details["by_category"], and `fail_on: [unsafe, sensitive]` (or a category name) counts more.
    Any other scorer is a callable `(texts) -> list[dict[category, score]] | list[float]` (floats
    become category "unsafe"); a text is flagged for a category when its score >= `score_threshold`
    (default: the scorer's `threshold` attribute, else 0.5), and a category the scorer gives no
    severity (its `severities` attribute) is `unsafe`. Each distinct text is scored once. The
    rejected response is not checked by default: a harmful rejected response is exactly what a
    safety pair should contain.
    """
    scorer = _default_lexicon_scorer() if scorer is None else scorer
    severity_of = dict(getattr(scorer, "severities", {}))
    fail_on = [str(x) for x in ([fail_on] if isinstance(fail_on, str) else fail_on)]
    if isinstance(scorer, LexiconScorer):  # a model's categories are known only once it has scored
        unknown = [x for x in fail_on if x not in SAFETY_SEVERITIES and x not in severity_of]
        if unknown:
            raise ValueError(f"fail_on: {', '.join(unknown)} is neither a severity ({', '.join(SAFETY_SEVERITIES)}) "
                             f"nor a lexicon category ({', '.join(severity_of)})")
    present = [c for c in columns if c in pairs.columns]
    missing = [c for c in columns if c not in pairs.columns]
    if not present:
        reason = f"none of the columns {list(columns)} is present; provide a frame with them"
        return skip(SAFETY_ID, reason, max_flagged_share)
    if pairs.height == 0:
        return skip(SAFETY_ID, "no rows", max_flagged_share)
    threshold = float(score_threshold if score_threshold is not None else getattr(scorer, "threshold", 0.5))
    if isinstance(scorer, LexiconScorer):
        per_column = {c: scorer.flags(pairs[c]) for c in present}
        categories = list(scorer.categories)
    else:
        per_column = _model_flags(scorer, pairs, present, threshold)
        categories = sorted({c for frame in per_column.values() for c in frame.columns})
    severities = {c: severity_of.get(c, "unsafe") for c in categories}
    counted = {c for c in categories if c in fail_on or severities[c] in fail_on}

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
            by_category[cat] |= flags
            if cat in counted:
                column_flag |= flags
        by_column_category[column] = counts
        by_column[column] = int(column_flag.sum())
        row_flag |= column_flag
    by_severity = {}
    for severity in dict.fromkeys(severities.values()):
        rows = np.zeros(n, dtype=bool)
        for cat in categories:
            if severities[cat] == severity:
                rows |= by_category[cat]
        by_severity[severity] = int(rows.sum())
    n_flagged = int(row_flag.sum())
    share = n_flagged / n
    status = "fail" if share > max_flagged_share else "pass"
    details = {
        "scorer": repr(scorer),
        "score_threshold": threshold,
        "columns": present,
        "missing_columns": missing,
        "fail_on": fail_on,
        "severities": severities,
        "n_rows": n,
        "n_offending": n_flagged,
        "by_category": {c: int(v.sum()) for c, v in by_category.items()},  # rows, counted or not
        "by_severity": by_severity,
        "by_column": by_column,  # rows with counted text in the column
        "by_column_category": by_column_category,
    }
    return CheckResult(
        SAFETY_ID, status, metric=share, threshold=max_flagged_share, offending=ids(pairs, row_flag),
        message=safety_message(details, n_flagged, n, max_flagged_share), details=details,
    )


def safety_message(details: dict[str, Any], n_offending: int, n_rows: int, threshold: float) -> str:
    """`check_safety`'s message from its details (`columns`, `missing_columns`, `fail_on`,
    `severities`, `by_category`), the number of counted rows and of rows, and `max_flagged_share`. A
    pure function of counts, so the shard-by-shard run (checks/batched.py) and the Dask run
    (checks/distributed.py) build it from merged details."""
    share = n_offending / n_rows if n_rows else 0.0
    fail_on = list(details.get("fail_on", SAFETY_FAIL_ON))
    severities = details.get("severities", {})
    hits = {c: k for c, k in details["by_category"].items() if k}
    counted = {c: k for c, k in hits.items() if c in fail_on or severities.get(c, "unsafe") in fail_on}
    named = ", ".join(f"{c} {k}" for c, k in counted.items()) or "none"
    message = (
        f"{n_offending} of {n_rows} rows ({share:.2%}) have {' / '.join(fail_on) or 'counted'} text in "
        f"{', '.join(details['columns'])} (by category: {named}); allowed share {threshold:.2%}"
    )
    others = {c: k for c, k in hits.items() if c not in counted}
    if others:
        listed = ", ".join(f"{c} {k}" for c, k in others.items())
        kinds = "/".join(dict.fromkeys(severities.get(c, "unsafe") for c in others))
        message += f"; not counted ({kinds}): {listed} (add to fail_on to count them)"
    if details["missing_columns"]:
        message += f"; columns not present: {', '.join(details['missing_columns'])}"
    if share > threshold:
        message += ("; review the offending rows and drop them (`prefdata filter NAME@VERSION --drop safety`), "
                    "or waive the check with its reason for data that is harmful by design (red-team prompts)")
    return message


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
    lexicon_terms = [t for spec in load_safety_lexicon().values() for t in spec.terms]
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

    counts, unmapped = _counts_from_categories(cats.filter(~pl.Series(null)), mapping)
    if n_inferred:
        prompts = pairs["prompt"].filter(pl.Series(null)) if n_inferred < n else pairs["prompt"]
        for dim, k in _counts_from_keywords(prompts).items():
            counts[dim] = counts.get(dim, 0) + k

    shares = {dim: counts.get(dim, 0) / n for dim in sorted(set(counts) | set(required))}
    metric = min(shares[r] for r in required)
    offending = tuple(r for r in required if shares[r] < min_share)
    status = "fail" if offending else "pass"
    message = _coverage_message(shares, required, min_share, offending, n, n_inferred)
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


def _counts_from_categories(categories: pl.Series, mapping: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """Rows per dimension from their (normalised, non-null) categories, and the categories the map
    does not know (counted as "other")."""
    counts: dict[str, int] = {}
    unmapped: dict[str, int] = {}
    for cat, k in pl.DataFrame({"c": categories}).group_by("c").len().iter_rows():
        dim = mapping.get(cat)
        if dim is None:
            unmapped[cat] = int(k)
            dim = "other"
        counts[dim] = counts.get(dim, 0) + int(k)
    return counts, unmapped


def _counts_from_keywords(prompts: pl.Series) -> dict[str, int]:
    """Rows per dimension by the keyword tagger (a prompt may count for several), untagged as "other"."""
    tags = infer_dimensions(prompts)
    counts = {dim: int(tags[dim].sum()) for dim in tags.columns}
    untagged = ~np.any(np.column_stack([tags[c].to_numpy() for c in tags.columns]), axis=1)
    if untagged.any():
        counts["other"] = int(untagged.sum())
    return counts


def _coverage_message(shares: dict[str, float], required: tuple[str, ...], min_share: float,
                      offending: tuple[str, ...], n: int, n_inferred: int) -> str:
    summary = ", ".join(f"{r} {shares[r]:.1%}" for r in required)
    message = f"shares of {n} rows: {summary} (minimum {min_share:.1%})"
    if offending:
        message += (f"; under-covered or missing dimensions: {', '.join(offending)} "
                    "(offending lists dimension names, not row ids)")
    if n_inferred:
        message += f"; {n_inferred} rows had no category and were tagged by keywords"
    return message


# ---------------------------------------------------------------------------------------------
# item 7: answer leakage
# ---------------------------------------------------------------------------------------------
#
# Word n-gram overlap between each row's prompt and response: checks/ngrams.py (word_ngram_overlap).


def _answer_columns(pairs: pl.DataFrame, reference_column: str) -> list[str]:
    """The answers to look for in the prompt: `chosen` and the reference answer (`reference_column`,
    or an `answer` column when the default "reference" is absent), those present."""
    reference = reference_column if reference_column in pairs.columns else None
    if reference is None and reference_column == LEAKAGE_REFERENCE_COLUMN and "answer" in pairs.columns:
        reference = "answer"
    return [c for c in ("chosen", reference) if c is not None and c in pairs.columns]


def _runs(prompt: pl.Series, column: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """Runs of neighbours with the same prompt and answer text (UltraFeedback-binarized's shape:
    three pairs share a prompt and a chosen reply, next to each other): the first row of each run,
    and each row's run number. Equal texts give equal results, so each run is checked once."""
    same = ((prompt == prompt.shift(1)) & (column == column.shift(1))).fill_null(False).to_numpy()
    first = np.flatnonzero(~same)
    run = np.cumsum(~same) - 1
    return first, run


def _answer_in_prompt(prompt: pl.Series, column: pl.Series, ngram: int, max_overlap: float, min_chars: int,
                      rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row (of `rows` when given, else of every row), whether its answer in `column` leaks into its
    prompt: (verbatim, n-gram overlap over `max_overlap`, short answer found after normalising, the
    n-gram share itself)."""
    n = len(prompt) if rows is None else rows.size

    def pick(series: pl.Series, a: int, b: int) -> pl.Series:
        return series.slice(a, b - a) if rows is None else series.gather(rows[a:b])

    verbatim = np.zeros(n, dtype=bool)
    long_enough = np.zeros(n, dtype=bool)

    def texts(a: int, b: int) -> tuple[pl.Series, pl.Series]:
        # every step is per row, so it runs on blocks of rows: the stripped answers (and the Arrow
        # copies the n-gram overlap reads) are never made for the whole column at once; the
        # verbatim test runs here, on the block the n-gram overlap is about to hash
        p, text = pick(prompt, a, b), pick(column, a, b).str.strip_chars()
        long_enough[a:b] = (text.str.len_chars() >= min_chars).to_numpy()
        found = pl.DataFrame({"p": p, "t": text}).select(pl.col("p").str.contains(pl.col("t"), literal=True))
        verbatim[a:b] = found.to_series().to_numpy() & long_enough[a:b]
        return p, text

    # the blocks' sizes only shape the chunks, which change no row's result: the unstripped sizes do
    row_bytes = len_bytes(prompt) + len_bytes(column)
    hits, grams, words = overlap_in_blocks(texts, row_bytes if rows is None else row_bytes[rows], ngram, None)
    share = np.divide(hits, grams, out=np.zeros(n), where=grams > 0)
    overlap = (grams > 0) & (share > max_overlap)
    short_hit = np.zeros(n, dtype=bool)
    short = np.flatnonzero(long_enough & (words < ngram) & ~verbatim)
    if short.size:  # answers too short for n-grams: a substring after normalising both sides
        at = short if rows is None else rows[short]
        for a, b in row_blocks(row_bytes[at]):
            frame = pl.DataFrame({"p": prompt.gather(at[a:b]), "t": column.gather(at[a:b]).str.strip_chars()})
            sub = frame.select(normalise_expr("p").alias("p"), normalise_expr("t").alias("t"))
            hit = sub.select(pl.col("p").str.contains(pl.col("t"), literal=True)).to_series()
            short_hit[short[a:b]] = hit.to_numpy()
    return verbatim, overlap, short_hit, share


# A prompt that states its own answer ("What is 2+2? The answer is 4."): the text after one of these cues,
# to the end of its sentence, is the prompt's stated answer. An answer too short for the substring tests
# (min_chars) is caught here, where the prompt itself says it is the answer.
_ANSWER_CUE = (r"(?i)(?:the\s+(?:correct\s+|right\s+|final\s+)?answer\s+is|answer\s*:|solution\s*:|"
               r"the\s+result\s+is)\s*([^\n?!]+?)\s*(?:[.?!](?:\s|$)|\n|$)")
_QUOTES = " \t\"'`*_"


def _stated_answer(prompt: pl.Series, column: pl.Series) -> np.ndarray:
    """Per row, whether the prompt states, after an answer cue, exactly this answer (case folded,
    quotes and final punctuation aside); an empty answer never matches."""
    stated = prompt.str.extract(_ANSWER_CUE, 1).str.strip_chars(_QUOTES).str.to_lowercase()
    answer = column.str.strip_chars(_QUOTES).str.strip_chars_end(".!").str.strip_chars(_QUOTES).str.to_lowercase()
    return ((stated == answer) & (answer.str.len_chars() > 0)).fill_null(False).to_numpy()


def check_answer_leakage(
    pairs: pl.DataFrame,
    reference_column: str = LEAKAGE_REFERENCE_COLUMN,
    ngram: int = LEAKAGE_NGRAM,
    max_overlap: float = LEAKAGE_MAX_OVERLAP,
    min_chars: int = LEAKAGE_MIN_CHARS,
) -> CheckResult:
    """Seed item 7 ("prompt 中无泄漏的标准答案"): no prompt contains its answer. The answers are the
    chosen response and, when present, a reference answer (`reference_column`, else an `answer`
    column). A row is flagged for an answer text when
      - the text (whitespace-stripped, at least `min_chars` characters) appears verbatim in the prompt;
      - it has fewer than `ngram` words, at least `min_chars` characters, and appears in the prompt
        after both are normalised (`prefdata.data.records.normalise_text`: NFKC, case folding,
        whitespace); or
      - more than `max_overlap` of its word `ngram`-grams occur in the prompt (`word_ngram_overlap`); or
      - the prompt states it as its answer, whatever its length ("What is 2+2? The answer is 4.", chosen
        "4": the text after "the answer is", "answer:", "solution:" or "the result is", to the end of
        its sentence, equals the answer).
    `min_chars` (default 20) keeps one-word replies ("Yes.", "?", "") from matching every chat
    history that happens to contain them. metric = share of flagged rows; any flagged row fails.
    """
    threshold = 0.0
    if "prompt" not in pairs.columns:
        return skip(LEAKAGE_ID, "no prompt column; provide `prompt`", threshold)
    targets = _answer_columns(pairs, reference_column)
    if not targets:
        return skip(LEAKAGE_ID, f"no answer to look for: provide `chosen` or a `{reference_column}` column", threshold)
    if pairs.height == 0:
        return skip(LEAKAGE_ID, "no rows", threshold)
    if ngram < 1 or not 0.0 <= max_overlap < 1.0:
        raise ValueError("ngram must be >= 1 and max_overlap in [0, 1)")

    n = pairs.height
    prompt = pairs["prompt"].cast(pl.String).fill_null("")
    row_flag = np.zeros(n, dtype=bool)
    by_target: dict[str, dict[str, int]] = {}
    max_share_seen = 0.0
    for target in targets:
        column = pairs[target].cast(pl.String).fill_null("")
        first, run = _runs(prompt, column)
        if first.size == n:
            verbatim, overlap, short_hit, share = _answer_in_prompt(prompt, column, ngram, max_overlap, min_chars)
        else:  # each run of equal neighbours checked once, its results given to every row of it
            found = _answer_in_prompt(prompt, column, ngram, max_overlap, min_chars, rows=first)
            verbatim, overlap, short_hit, share = (x[run] for x in found)
        stated = _stated_answer(prompt, column)
        flag = verbatim | overlap | short_hit | stated
        row_flag |= flag
        max_share_seen = max(max_share_seen, float(share.max(initial=0.0)))
        by_target[target] = {
            "flagged": int(flag.sum()),
            "verbatim": int(verbatim.sum()),
            "ngram_overlap": int(overlap.sum()),
            "short_substring": int(short_hit.sum()),
            "stated": int(stated.sum()),
        }
    n_flagged = int(row_flag.sum())
    metric = n_flagged / n
    status = "fail" if metric > threshold else "pass"
    details = {
        "targets": targets,
        "ngram": ngram,
        "max_overlap": max_overlap,
        "min_chars": min_chars,
        "n_rows": n,
        "n_offending": n_flagged,
        "by_target": by_target,
        "max_overlap_seen": max_share_seen,
    }
    return CheckResult(
        LEAKAGE_ID, status, metric=metric, threshold=threshold, offending=ids(pairs, row_flag),
        message=leakage_message(details, n_flagged, n, threshold), details=details,
    )


def leakage_message(details: dict[str, Any], n_offending: int, n_rows: int, threshold: float) -> str:
    """`check_answer_leakage`'s message from its details (`by_target` counts, the `ngram` and
    `max_overlap` parameters) and the number of flagged rows and of rows (`threshold` is always 0.0
    and not shown). A pure function of counts, so the shard-by-shard run (checks/batched.py) builds
    it from merged details."""
    ngram, max_overlap = details["ngram"], details["max_overlap"]
    parts = "; ".join(
        f"{t}: {d['verbatim']} verbatim, {d['ngram_overlap']} with > {max_overlap:.0%} of {ngram}-grams, "
        f"{d['short_substring']} short answers, {d.get('stated', 0)} stated as the answer"
        for t, d in details["by_target"].items()
    )
    return f"{n_offending} of {n_rows} prompts contain their answer ({parts})"


# ---------------------------------------------------------------------------------------------
# item 1: prompt distribution
# ---------------------------------------------------------------------------------------------
#
# Two-sample permutation test of MMD^2 on character n-gram TF-IDF features (checks/tfidf.py): each
# side is subsampled (seeded) to `max_samples`. Statistic: the biased MMD^2 with a linear (cosine)
# kernel, ||mean(x) - mean(y)||^2; p-value = (1 + #{permuted MMD^2 >= observed}) / (1 + n_permutations),
# which is exact-size under exchangeability (two halves of one source fail at rate alpha).


def check_prompt_distribution(
    prompts: pl.Series,
    reference: pl.Series | None,
    alpha: float = DISTRIBUTION_ALPHA,
    max_samples: int = DISTRIBUTION_MAX_SAMPLES,
    seed: int = DISTRIBUTION_SEED,
    n_permutations: int = DISTRIBUTION_PERMUTATIONS,
) -> CheckResult:
    """Seed item 1 ("prompt 分布与上线分布一致"): the dataset's prompts look like a reference sample
    of production prompts. Permutation test of MMD^2 on character n-gram TF-IDF (see above); fails
    when p < `alpha`. alpha = 0.01 is ours: with many datasets checked, 0.05 would fail one in twenty
    sound ones. Deterministic for a given `seed`. Skips without a reference sample.
    """
    if reference is None:
        return skip(DISTRIBUTION_ID, "no reference sample: pass --reference-prompts FILE, a sample of production prompts", alpha)
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
    features, info = tfidf_matrix(x_texts + y_texts)
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
            "top_ngrams": top_ngrams(info, is_x),
        },
    )
