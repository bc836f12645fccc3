"""The one record shape prefdata works with, and ids derived from content.

A preference pair is a row of a polars frame with the TRL "standard" columns plus ids:

    id          the row's identity: the source's own `id` when it has one, else `pair_id`
    pair_id     sha256(prompt_id, both responses in sorted order)[:16]; independent of which
                side won, so the same two responses to the same prompt always share one id
    prompt_id   sha256(normalised prompt)[:16]
    prompt, chosen, rejected

Optional columns are kept when the source has them (OPTIONAL_COLUMNS). Comparisons that did not
resolve to a preference (ties, no majority) live in a separate frame with `response_a`,
`response_b` and `label`; annotator votes live in a long frame `pair_id, annotator, vote`.
Re-importing the same data never mints new ids.
"""

from __future__ import annotations

import hashlib
import unicodedata

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

def normalise_text(text: str) -> str:
    """Case-, whitespace- and unicode-insensitive form used for ids and exact-duplicate checks."""
    return " ".join(unicodedata.normalize("NFKC", text).split()).casefold()


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
    """pair_id from an already computed prompt_id."""
    first, second = sorted((response_1, response_2))
    return _digest(prompt_key, first, second)
