"""The one record shape prefdata works with, and ids derived from content.

A preference pair is a row of a polars frame with the TRL "standard" columns plus ids:

    id          the row's identity: the source's own `id` when it has one, else `pair_id`
    pair_id     sha256(prompt_id, both normalised responses in sorted order)[:16]; independent
                of which side won, so the same two responses to the same prompt always share one id
    prompt_id   sha256(normalised prompt)[:16]
    prompt, chosen, rejected

"Normalised" is `normalise_text`, the one normal form every comparison of texts uses: ids here,
exact and near duplicates, degenerate pairs, split isolation and answer leakage in `checks/`.
`normalise_expr` (and `normalise_series`) is its polars twin for the frame-level checks, with
identical results.

Optional columns are kept when the source has them (OPTIONAL_COLUMNS). Comparisons that did not
resolve to a preference (ties, no majority) live in a separate frame with `response_a`,
`response_b` and `label`; annotator votes live in a long frame `pair_id, annotator, vote`.
Re-importing the same data never mints new ids.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

PAIR_COLUMNS = ("id", "pair_id", "prompt_id", "prompt", "chosen", "rejected")
COMPARISON_COLUMNS = ("id", "pair_id", "prompt_id", "prompt", "response_a", "response_b", "label")
VOTE_COLUMNS = ("pair_id", "annotator", "vote")
VOTE_VALUES = ("a", "b", "tie")
OPTIONAL_COLUMNS = (
    "category",
    "chosen_model",
    "rejected_model",
    "model_a",
    "model_b",
    "cmp_key",  # PandaLM: "modelA_modelB"
    "source",
    "split",
    "annotators",
    "prompt_messages",
    "score_chosen",
    "score_rejected",
)

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): code points a renderer shows as
# nothing (zero width space and joiners, the soft hyphen, word joiner, variation selectors, tags, the
# Hangul fillers) and the bidi controls (U+061C, U+200E-200F, U+202A-202E, U+2066-2069). A text and
# its copy with one of them inserted look the same, so they compare the same: they are removed. No
# code point outside the set turns into one under NFKC or case folding (tests/test_normalise.py).
DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
# one character class, in literal characters, that Python's re and polars' (Rust) regex both read
IGNORABLE_CLASS = "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in DEFAULT_IGNORABLE) + "]"
_IGNORABLE = re.compile(IGNORABLE_CLASS)


def normalise_text(text: str) -> str:
    """The form two texts are compared in: default-ignorable code points removed (invisible: see
    DEFAULT_IGNORABLE), NFKC, then Unicode full case folding, then whitespace runs collapsed to one
    space and stripped.

    NFKC makes full-width letters, ligatures, compatibility forms and composed vs combining accents
    one text, and turns no-break and other Unicode spaces into plain ones; `str.casefold` is
    language-neutral full folding ("ß", "ẞ" and "SS" -> "ss", "İ" -> "i" + U+0307, final "ς" -> "σ";
    a dotless "ı" stays itself); whitespace is what `str.split()` splits at.
    """
    return " ".join(unicodedata.normalize("NFKC", _IGNORABLE.sub("", text)).casefold().split())


# Python's str.split() also splits at the ASCII separators \x1c-\x1f, which the regex class \s
# (Unicode White_Space) lacks. Only runs that are not already one plain space are rewritten.
_WHITESPACE_RUN = r"(?:\s|[\x1c-\x1f]){2,}|[^\S ]|[\x1c-\x1f]"


@functools.cache
def _case_fold_fixes() -> tuple[list[str], list[str]]:
    """Where full case folding differs from lower-casing: (lower-cased character, its folding).

    About 180 characters, all in the Basic Multilingual Plane ("ß" -> "ss", "ς" -> "σ", Cherokee
    small letters -> capitals, Greek iota subscripts, ligatures); tests/test_normalise.py checks
    every code point. Keyed by the lower-cased character because they are applied after polars'
    lower-casing, which (like Python's) is contextual only for the final sigma, folded here too.
    """
    fixes = {}
    for code in range(0x10000):
        char = chr(code)
        lower, folded = char.lower(), char.casefold()
        if lower != folded:
            fixes[lower] = folded
    return list(fixes), list(fixes.values())


def normalise_expr(text: pl.Expr | str, fold_case: bool = True) -> pl.Expr:
    """`normalise_text` as a polars expression (a column name or an expression); nulls become "".
    `fold_case=False` leaves case alone (degenerate_pairs' option for data about case).

    Identical results on every code point Python's Unicode database knows (polars may know newer
    ones, added after `unicodedata.unidata_version`, and normalise them differently).
    """
    import polars as pl

    expr = pl.col(text) if isinstance(text, str) else text
    nfkc = expr.cast(pl.String).fill_null("").str.replace_all(IGNORABLE_CLASS, "").str.normalize("NFKC")
    return _fold_and_collapse(nfkc) if fold_case else _collapse(nfkc)


def normalise_series(texts: pl.Series) -> pl.Series:
    """`normalise_expr` over a Series, running NFKC (the costly step: most of the time on real
    text) only on rows with non-ASCII bytes, which it leaves unchanged otherwise."""
    import polars as pl

    s = texts.cast(pl.String).fill_null("")
    non_ascii = s.str.len_bytes() != s.str.len_chars()
    # ASCII text only needs lower-casing: the fold table's keys are all non-ASCII, so running it on
    # every row (most of the time on real text) would change nothing.
    folded = s.str.to_lowercase()
    if non_ascii.any():
        rows = non_ascii.arg_true()
        keys, fixes = _case_fold_fixes()
        nfkc = s.gather(rows).str.replace_all(IGNORABLE_CLASS, "").str.normalize("NFKC")
        folded = folded.scatter(rows, nfkc.str.to_lowercase().str.replace_many(keys, fixes))
    return folded.to_frame("t").select(_collapse(pl.col("t"))).to_series().alias(texts.name)


def _fold_and_collapse(expr: pl.Expr) -> pl.Expr:
    """Case folding and whitespace, on text already in NFKC."""
    keys, folded = _case_fold_fixes()
    return _collapse(expr.str.to_lowercase().str.replace_many(keys, folded))


def _collapse(expr: pl.Expr) -> pl.Expr:
    """Whitespace runs to one plain space, stripped."""
    return expr.str.replace_all(_WHITESPACE_RUN, " ").str.strip_chars(" ")


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))  # length prefix: ("ab","c") != ("a","bc")
        h.update(data)
    return h.hexdigest()[:16]


def prompt_id(prompt: str) -> str:
    return _digest(normalise_text(prompt))


def pair_id(prompt: str, response_1: str, response_2: str) -> str:
    return pair_id_for(prompt_id(prompt), response_1, response_2)


def pair_id_for(prompt_key: str, response_1: str, response_2: str) -> str:
    """pair_id from an already computed prompt_id. The responses are normalised, as the prompt is,
    so a pair and a copy that differs only in case, width or spacing share one id (and are exact
    duplicates for `checks.dedup`)."""
    first, second = sorted((normalise_text(response_1), normalise_text(response_2)))
    return _digest(prompt_key, first, second)


# A sampled response before it is paired: what prefdata.collect.sampling's backends return and
# prefdata.collect.pairing turns into comparison rows. It carries what the checklist's `same_policy` item
# needs: the model, its revision, the sampling params and the backend.
@dataclass(frozen=True)
class Candidate:
    prompt: str
    text: str
    model: str                   # the path or name the backend loaded
    model_revision: str | None   # hub commit, "sha256:..." of a local checkpoint, or the server's fingerprint
    params: dict                 # SamplingParams.as_dict() of the call
    sampler: str                 # "transformers" | "openai" | "vllm"
    index: int                   # 0..n-1 within its prompt
    finish_reason: str | None = None  # "stop" (eos or stop string) or "length"
    request_seed: int | None = None   # the per-request seed, for backends that take one per request
    prompt_messages: str | None = None  # a prompt given as {role, content} messages: their JSON (`prompt`: its text)

    @property
    def policy(self) -> str:
        return f"{self.model}@{self.model_revision}" if self.model_revision else self.model
