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

A conversation (HH-RLHF's transcripts, TRL's conversational rows, prompts sampled as messages) keeps
its turns: `prompt_messages` holds the JSON of the prompt's {role, content} messages (the last one the
user's), `prompt` their text (`render_turns`: the whole conversation), chosen and rejected the final
replies. Each check reads one part of it (checks/registry.py `reads`): the whole conversation
(`prompt`), the final replies, or the user turns alone (`user_turns_expr`).

Optional columns are kept when the source has them (OPTIONAL_COLUMNS). Comparisons that did not
resolve to a preference (ties, no majority) live in a separate frame with `response_a`,
`response_b` and `label`; annotator votes live in a long frame `pair_id, annotator, vote`.
Re-importing the same data never mints new ids.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

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
# nothing (zero width space and joiners, the soft hyphen, word joiner, variation selectors, tags) and
# the bidi controls (U+061C, U+200E-200F, U+202A-202E, U+2066-2069). Python's unicodedata lacks the
# property, so it is listed here (tests/test_normalise.py checks it against the `regex` module). The
# Hangul fillers in it (U+115F, U+1160, U+3164, U+FFA0) are drawn as a blank cell: they are BLANK_EXTRA.
DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
# Not default-ignorable nor a format character, yet drawn as nothing: MUSICAL SYMBOL NULL NOTEHEAD (So).
DRAWN_AS_NOTHING = (0x1D159,)
# Blank, but not whitespace to str.split() nor regex \s: the Hangul fillers and BRAILLE PATTERN BLANK.
BLANK_EXTRA = (0x115F, 0x1160, 0x2800, 0x3164, 0xFFA0)


@functools.cache
def invisible_and_blank() -> tuple[frozenset[int], frozenset[int]]:
    """(invisible, blank): the code points `normalise_text` removes, and those it turns into a space.

    A text and its copy with invisible code points inserted, or blank ones for spaces, look the same,
    so they compare the same. Invisible: DEFAULT_IGNORABLE, every format character (Cf: also the
    interlinear annotation and Egyptian hieroglyph format controls), every control (Cc) that is not
    whitespace to str.split() (tab to carriage return, U+001C-001F and U+0085 stay: whitespace
    collapsing makes them a space), and DRAWN_AS_NOTHING. Blank: the Unicode spaces (Zs) but " "
    itself, and BLANK_EXTRA. From Python's Unicode database over the whole range, once (~0.3 s, hence
    cached rather than at import); private-use and unassigned code points are left alone (but the
    unassigned ones in DEFAULT_IGNORABLE). No other code point turns into an invisible or a non-space
    blank one under NFKC or case folding (tests/test_normalise.py).
    """
    invisible = {code for a, b in DEFAULT_IGNORABLE for code in range(a, b + 1)} | set(DRAWN_AS_NOTHING)
    blank = set(BLANK_EXTRA)
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:  # surrogates: in neither a str nor a regex class
            continue
        char = chr(code)
        category = unicodedata.category(char)
        if category == "Zs" and char != " ":
            blank.add(code)
        elif category == "Cf" or (category == "Cc" and not char.isspace()):
            invisible.add(code)
    return frozenset(invisible - blank), frozenset(blank)


def _char_class(codes: Iterable[int]) -> str:
    """A regex character class of `codes` in \\UXXXXXXXX escapes, which Python's re and polars'
    (Rust) regex both read, so both engines use the very same set."""
    ranges: list[list[int]] = []
    for code in sorted(codes):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(f"\\U{a:08X}" + (f"-\\U{b:08X}" if b > a else "") for a, b in ranges) + "]"


@functools.cache
def character_classes() -> tuple[str, str]:
    """`invisible_and_blank()` as two regex character classes: (invisible, blank)."""
    return tuple(_char_class(codes) for codes in invisible_and_blank())


@functools.cache
def _ascii_invisible() -> list[int]:
    """The invisible ASCII code points: C0 controls but whitespace, and DEL. The only ones ASCII
    text can hold (no ASCII code point is blank but the space), so the fast paths look for these."""
    return sorted(code for code in invisible_and_blank()[0] if code < 0x80)


@functools.cache
def _ascii_invisible_classes() -> tuple[str, ...]:
    """_ascii_invisible in classes of at most 10 code points: the Rust regex crate finds those with a
    SIMD literal search, ~30x faster than one class of all 24 (measured on bench/realistic.py's text)."""
    codes = _ascii_invisible()
    return tuple(_char_class(codes[i:i + 10]) for i in range(0, len(codes), 10))


@functools.cache
def _compiled_classes() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """Python's (invisible, blank, invisible ASCII) patterns."""
    return (*(re.compile(c) for c in character_classes()), re.compile(_char_class(_ascii_invisible())))


def normalise_text(text: str) -> str:
    """The form two texts are compared in: invisible code points removed and blank ones made a space
    (see `invisible_and_blank`), NFKC, then Unicode full case folding, then whitespace runs collapsed
    to one space and stripped.

    NFKC makes full-width letters, ligatures, compatibility forms and composed vs combining accents
    one text, and turns no-break and other Unicode spaces into plain ones; `str.casefold` is
    language-neutral full folding ("ß", "ẞ" and "SS" -> "ss", "İ" -> "i" + U+0307, final "ς" -> "σ";
    a dotless "ı" stays itself); whitespace is what `str.split()` splits at.
    """
    invisible, blank, ascii_invisible = _compiled_classes()
    if text.isascii():  # the same result, faster: Python's re tries the whole class on every character
        visible = ascii_invisible.sub("", text)
    else:  # before NFKC: an invisible code point would block a composition
        visible = blank.sub(" ", invisible.sub("", text))
    return " ".join(unicodedata.normalize("NFKC", visible).casefold().split())


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
    nfkc = _visible(expr.cast(pl.String).fill_null("")).str.normalize("NFKC")
    return _fold_and_collapse(nfkc) if fold_case else _collapse(nfkc)


def normalise_series(texts: pl.Series) -> pl.Series:
    """`normalise_expr` over a Series, running NFKC (the costly step: most of the time on real
    text) and the invisible and blank code points' removal only on rows that need them: rows with
    non-ASCII bytes or an invisible ASCII control. It leaves the other rows unchanged."""
    import polars as pl

    s = texts.cast(pl.String).fill_null("")
    slow = s.str.len_bytes() != s.str.len_chars()
    for ascii_invisible in _ascii_invisible_classes():  # three fast scans, rarely a match
        slow |= s.str.contains(ascii_invisible)
    # ASCII text only needs lower-casing: the fold table's keys are all non-ASCII, so running it on
    # every row (most of the time on real text) would change nothing.
    folded = s.str.to_lowercase()
    if slow.any():
        rows = slow.arg_true()
        keys, fixes = _case_fold_fixes()
        nfkc = _visible(s.gather(rows)).str.normalize("NFKC")
        folded = folded.scatter(rows, nfkc.str.to_lowercase().str.replace_many(keys, fixes))
    return folded.to_frame("t").select(_collapse(pl.col("t"))).to_series().alias(texts.name)


def _visible(text: pl.Expr | pl.Series) -> pl.Expr | pl.Series:
    """Invisible code points removed, blank ones made a space (before NFKC, as normalise_text)."""
    invisible, blank = character_classes()
    return text.str.replace_all(invisible, "").str.replace_all(blank, " ")


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


def render_turns(messages: list[dict[str, str]]) -> str:
    """A conversation's text, as a record's `prompt` keeps it beside its `prompt_messages`: one message
    as its content (a single-turn prompt's text, so its pair id is a `trl` row's), several as
    "Role: content" blocks, so that the whole conversation is in the text dedup and the judge read."""
    if len(messages) == 1:
        return messages[0]["content"]
    return "".join(f"\n\n{m['role'].capitalize()}: {m['content']}" for m in messages).lstrip("\n")


def messages_json(messages: list[dict[str, str]]) -> str:
    """A record's `prompt_messages`: the turns' role and content, as JSON (UTF-8 kept as it is)."""
    return json.dumps([{"role": m["role"], "content": m["content"]} for m in messages], ensure_ascii=False)


USER_TURNS_SEPARATOR = "\n\n"


def user_turns(prompt: str, prompt_messages: str | None) -> str:
    """The user's turns of a prompt, joined by a blank line: its messages' user contents when it has
    messages, else the prompt (a single-turn prompt is all the user's)."""
    if prompt_messages is None:
        return prompt
    return USER_TURNS_SEPARATOR.join(m["content"] for m in json.loads(prompt_messages) if m["role"] == "user")


def user_turns_expr() -> pl.Expr:
    """user_turns as a polars expression over `prompt` and `prompt_messages`, named `prompt`."""
    import polars as pl

    turns = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
    users = (pl.col("prompt_messages").str.json_decode(turns)
             .list.eval(pl.element().filter(pl.element().struct.field("role") == "user").struct.field("content"))
             .list.join(USER_TURNS_SEPARATOR))
    return pl.when(pl.col("prompt_messages").is_null()).then(pl.col("prompt")).otherwise(users).alias("prompt")


def with_user_turns(pairs: pl.DataFrame) -> pl.DataFrame:
    """`pairs` whose `prompt` is the user's turns (the same frame when no row has messages)."""
    if "prompt_messages" not in pairs.columns or "prompt" not in pairs.columns \
            or pairs["prompt_messages"].null_count() == pairs.height:
        return pairs
    return pairs.with_columns(user_turns_expr())


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
