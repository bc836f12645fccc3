"""Turn one source row into a canonical record, or reject it with a reason.

Formats (see README):
  trl          {"prompt", "chosen", "rejected"} strings (TRL "standard" preference rows)
  trl-chat     chosen/rejected as lists of {role, content}; prompt as messages or implicit
               (the shared leading messages of chosen and rejected)
  hh-rlhf      chosen/rejected full "\\n\\nHuman: ... \\n\\nAssistant: ..." transcripts, kept as turns
               (prompt_messages) with the final assistant replies as chosen and rejected
  comparisons  prompt + response_a + response_b (aliases: instruction[+input], response1/2),
               labelled by a `label` column or by annotator votes, wide or long

A converter returns a Converted record or raises RowRejected(reason, detail). Reasons are short
snake_case strings, counted per reason in the import summary.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefdata.data.records import OPTIONAL_COLUMNS, messages_json, pair_id_for, prompt_id, render_turns

FORMATS = ("auto", "trl", "trl-chat", "hh-rlhf", "comparisons")
HH_ASSISTANT = "\n\nAssistant:"
WIDE_VOTE_COLUMN = re.compile(r"^(annotator|rater|labeler|labeller|worker)_?\d+$", re.IGNORECASE)
LABEL_COLUMNS = ("label", "preference", "winner")
_ALIASES = {
    "response_a": ("response_a", "response1", "completion_a", "answer_a"),
    "response_b": ("response_b", "response2", "completion_b", "answer_b"),
}
# Vote codes. Integers follow PandaLM's convention: 0 = tie, 1 = first response, 2 = second.
_VOTES = {
    "a": "a", "response_a": "a", "response1": "a", "1": "a", "model_a": "a",
    "b": "b", "response_b": "b", "response2": "b", "2": "b", "model_b": "b",
    "tie": "tie", "0": "tie", "draw": "tie", "equal": "tie", "tie (bothbad)": "tie",
}


class RowRejected(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Converted:
    kind: str  # "pair" or "comparison"
    record: dict[str, Any]
    votes: list[tuple[str, str]] = field(default_factory=list)  # (annotator, vote) from wide columns


def detect_format(columns: set[str], sample: Mapping[str, Any]) -> str:
    """Guess the format from a first good row; raise ValueError naming what was seen."""
    if _pick(columns, _ALIASES["response_a"]) and _pick(columns, _ALIASES["response_b"]):
        return "comparisons"
    if {"chosen", "rejected"} <= columns:
        if isinstance(sample.get("chosen"), list):
            return "trl-chat"
        if "prompt" in columns:
            return "trl"
        if isinstance(sample.get("chosen"), str) and HH_ASSISTANT in sample["chosen"]:
            return "hh-rlhf"
    raise ValueError(f"cannot detect the format from columns {sorted(columns)}")


def required_columns(fmt: str) -> list[tuple[str, ...]]:
    """Column alternatives each format needs; a file missing one is unusable as a whole."""
    if fmt == "trl":
        return [("prompt",), ("chosen",), ("rejected",)]
    if fmt in ("trl-chat", "hh-rlhf"):
        return [("chosen",), ("rejected",)]
    return [("prompt", "instruction"), _ALIASES["response_a"], _ALIASES["response_b"]]


def parse_vote(value: Any) -> str | None:
    """A vote as a|b|tie, None when missing; RowRejected when it is not a vote."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        raise RowRejected("invalid_vote", f"{value!r} is not a vote (a, b, tie or 0/1/2)")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    key = str(value).strip().lower()
    if key == "":
        return None
    if key not in _VOTES:
        raise RowRejected("invalid_vote", f"{value!r} is not a vote (a, b, tie or 0/1/2)")
    return _VOTES[key]


def majority(votes: list[str]) -> str | None:
    """The label more than half of the votes agree on, else None (no majority)."""
    if not votes:
        return None
    best = max(set(votes), key=votes.count)
    return best if votes.count(best) * 2 > len(votes) else None


AGGREGATES = ("majority", "dawid-skene")


def vote_labels(votes: list[dict[str, Any]], aggregate: str = "majority") -> dict[Any, str | None]:
    """pair_id -> the label its votes give (dicts with pair_id, annotator, vote): "majority", more
    than half agree, else None; "dawid-skene", EM over all the votes given (checks/agreement.py: an
    annotator who votes at random counts for little; every voted pair gets its most probable label)."""
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate {aggregate!r}: choose one of {', '.join(AGGREGATES)}")  # the commands check first
    if aggregate == "dawid-skene":
        from prefdata.data.votes import dawid_skene_labels

        return dawid_skene_labels([{k: v[k] for k in ("pair_id", "annotator", "vote")} for v in votes])
    by_pair: dict[Any, list[str]] = {}
    for v in votes:
        by_pair.setdefault(v["pair_id"], []).append(v["vote"])
    return {pair: majority(pair_votes) for pair, pair_votes in by_pair.items()}


def vote_label_frame(votes: Any, aggregate: str = "majority") -> Any:
    """vote_labels of a votes frame (pair_id, annotator, vote), as a frame: pair_id, label (null where
    the votes give none). For an import too big to hold each vote as a dict: the same rule
    (prefdata.data.votes: more than half agree, or Dawid-Skene over the votes in the same order)."""
    import polars as pl

    from prefdata.data.votes import dawid_skene, majority_labels

    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate {aggregate!r}: choose one of {', '.join(AGGREGATES)}")
    if aggregate == "majority":
        return majority_labels(votes).select("pair_id", "label")
    labels = dawid_skene(votes)["labels"] if votes.height else {}
    return pl.DataFrame({"pair_id": list(labels), "label": list(labels.values())},
                        schema={"pair_id": pl.String, "label": pl.String})


def _pick(columns: set[str] | Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in columns), None)


def _text(row: Mapping[str, Any], name: str, column: str | None = None, allow_empty: bool = False) -> str:
    value = row.get(column or name)
    if value is None:
        raise RowRejected(f"missing_field:{name}")
    if not isinstance(value, str):  # NaN too: a number where text belongs, whatever wrote it
        # Never str() it: a JSON `true` would become "True", 12 would become "12", Infinity "inf".
        # (PandaLM's test set has 6 such rows: `true` where a response's text belongs.)
        raise RowRejected(f"wrong_type:{name}", f"expected text, got {type(value).__name__} {_short(value)}")
    if not allow_empty and not value.strip():
        raise RowRejected(f"empty_text:{name}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


SCORE_COLUMNS = ("score_chosen", "score_rejected")


def parse_score(row: Mapping[str, Any], name: str) -> float | None:
    """A score is a finite number or missing. Numeric text counts (CSV has no types); NaN and empty
    text are missing (pandas' and CSV's way to write it); infinity, booleans or other text are
    wrong_type, never stored."""
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool):
        raise RowRejected(f"wrong_type:{name}", f"expected a number, got {value!r}")
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = float(value)
        except ValueError:
            raise RowRejected(f"wrong_type:{name}", f"expected a number, got {_short(value)}") from None
    if not isinstance(value, (int, float)):
        raise RowRejected(f"wrong_type:{name}", f"expected a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        raise RowRejected(f"wrong_type:{name}", f"expected a finite number, got {value}")
    return value


_SPLIT = re.compile(r"[A-Za-z0-9_]+")  # used with fullmatch: `$` would also allow a final "\n" ("test\n")


def optional_text(value: Any) -> str:
    """An optional column's value as the record keeps it: text as it is, a list or object as JSON,
    anything else as Python writes it (5 -> "5")."""
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _optional(row: Mapping[str, Any]) -> dict[str, Any]:
    split = row.get("split")
    if split is not None and not _SPLIT.fullmatch(str(split)):
        raise RowRejected("invalid_split", f"split {split!r} must be letters, digits or '_' (e.g. train, test)")
    kept: dict[str, Any] = {}
    for name in SCORE_COLUMNS:
        if name in row:
            kept[name] = parse_score(row, name)
    for name in OPTIONAL_COLUMNS:
        value = row.get(name)
        if value is not None and name != "prompt_messages" and name not in SCORE_COLUMNS:
            kept[name] = optional_text(value)
    if "model" in row and row["model"] is not None:  # one model for both sides
        kept.setdefault("chosen_model", str(row["model"]))
        kept.setdefault("rejected_model", str(row["model"]))
    if "policy" in row and row["policy"] is not None:
        kept.setdefault("chosen_model", str(row["policy"]))
        kept.setdefault("rejected_model", str(row["policy"]))
    if "cmp_key" in kept and "model_a" not in kept:  # PandaLM names both models: "bloom-7b_llama-7b"
        parts = kept["cmp_key"].split("_")
        if len(parts) == 2:
            kept["model_a"], kept["model_b"] = parts
    return kept


def _pair(row: Mapping[str, Any], prompt: str, chosen: str, rejected: str, extra: dict | None = None) -> Converted:
    if chosen == rejected:
        raise RowRejected("identical_responses", "chosen is identical to rejected")
    key = prompt_id(prompt)
    record = {"id": source_id(row), "pair_id": pair_id_for(key, chosen, rejected), "prompt_id": key,
              "prompt": prompt, "chosen": chosen, "rejected": rejected}
    record.update(_optional(row))
    record.update(extra or {})
    return Converted("pair", record)


def source_id(row: Mapping[str, Any]) -> str | None:
    """The source's own row id (`id`, or `idx` as PandaLM names it); None lets the importer use pair_id."""
    value = row.get("id", row.get("idx"))
    return None if value is None or str(value).strip() == "" else str(value)


def from_trl(row: Mapping[str, Any]) -> Converted:
    return _pair(row, _text(row, "prompt"), _response(row, "chosen"), _response(row, "rejected"))


def _response(row: Mapping[str, Any], name: str, column: str | None = None) -> str:
    # An empty response is real data, not a broken row: 4 HH-RLHF harmless rows prefer saying
    # nothing to a harmful answer. It is kept, and the degenerate_pairs check flags it.
    return _text(row, name, column, allow_empty=True)


def _common_prefix_length(a: str, b: str) -> int:
    """Binary search on slice equality: each probe is one C-level compare, not a Python loop."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def split_hh(chosen: str, rejected: str) -> tuple[str, str, str]:
    """Prompt = both transcripts' common prefix, cut after its last "\\n\\nAssistant:".

    Cutting at the last marker of the *common* prefix (not of each transcript) keeps responses
    that themselves contain "Assistant:" whole; 5 rows of the HH harmless test split do.
    """
    common = _common_prefix_length(chosen, rejected)
    cut = chosen.rfind(HH_ASSISTANT, 0, common)
    if cut < 0 or cut + len(HH_ASSISTANT) > common:
        raise RowRejected("hh_no_shared_prompt", "the transcripts share no prefix ending in '\\n\\nAssistant:'")
    end = cut + len(HH_ASSISTANT)
    return chosen[:end], chosen[end:].removeprefix(" "), rejected[end:].removeprefix(" ")


_HH_MARKER = re.compile(r"\n\n(Human|Assistant):")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


def hh_turns(prompt: str) -> list[dict[str, str]]:
    """The messages of an HH prompt transcript (split_hh's prompt, ending in "\\n\\nAssistant:"), as
    TRL's HH converter makes them: each "Human:" a user turn, each "Assistant:" an assistant turn, the
    space after a marker dropped. Text before the first marker is the user's (a transcript whose
    leading newlines were stripped). Consecutive turns of one role (4 rows of the harmless test split:
    the human speaks twice) are joined into one, "\\n\\n" between: chat templates need the roles to
    alternate, and nothing is dropped."""
    parts = _HH_MARKER.split("\n\n" + prompt[: -len(HH_ASSISTANT)].lstrip("\n"))
    turns: list[dict[str, str]] = []
    for marker, content in zip(parts[1::2], parts[2::2]):
        role, content = _HH_ROLES[marker], content.removeprefix(" ")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    return turns


def from_hh(row: Mapping[str, Any]) -> Converted:
    """An HH pair as a conversation: its turns in `prompt_messages`, the prompt text their rendering
    (for one turn, the user's text: the pair id of a `trl` row with the same text), chosen and rejected
    the final assistant replies."""
    chosen, rejected = _text(row, "chosen"), _text(row, "rejected")
    if chosen == rejected:
        raise RowRejected("identical_responses", "chosen is identical to rejected")
    transcript, chosen_reply, rejected_reply = split_hh(chosen, rejected)
    turns = hh_turns(transcript)
    prompt_text = render_turns(turns)
    if not prompt_text.strip():
        raise RowRejected("empty_text:prompt", "the transcript's turns before the final reply are empty")
    return _pair(row, prompt_text, chosen_reply, rejected_reply, {"prompt_messages": messages_json(turns)})


def _messages(row: Mapping[str, Any], name: str) -> list[dict[str, str]]:
    value = row.get(name)
    if value is None:
        raise RowRejected(f"missing_field:{name}")
    if isinstance(value, str):
        raise RowRejected(f"wrong_type:{name}", "expected a list of {role, content} messages, got text")
    if not isinstance(value, list) or not value:
        raise RowRejected(f"wrong_type:{name}", "expected a non-empty list of {role, content} messages")
    for message in value:
        if not (isinstance(message, Mapping) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise RowRejected(f"wrong_type:{name}", "every message needs text 'role' and 'content'")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def from_trl_chat(row: Mapping[str, Any]) -> Converted:
    chosen, rejected = _messages(row, "chosen"), _messages(row, "rejected")
    given = row.get("prompt")
    if given is None:  # implicit prompt: the messages both sides share
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        if shared == 0:
            raise RowRejected("missing_field:prompt", "no prompt column and no shared leading messages")
        prompt = chosen[:shared]
    elif isinstance(given, str):  # UltraFeedback-binarized style: text prompt, whole conversations
        prompt = [{"role": "user", "content": _text(row, "prompt")}]
    else:
        prompt = _messages(row, "prompt")
    # Sides that repeat the prompt messages (whole conversations) keep only what follows them.
    n = len(prompt)
    if chosen[:n] == prompt and rejected[:n] == prompt and len(chosen) > n and len(rejected) > n:
        chosen, rejected = chosen[n:], rejected[n:]
    prompt_text = render_turns(prompt)
    if not prompt_text.strip():
        raise RowRejected("empty_text:prompt")
    chosen_text = "\n\n".join(m["content"] for m in chosen)
    rejected_text = "\n\n".join(m["content"] for m in rejected)
    return _pair(row, prompt_text, chosen_text, rejected_text, {"prompt_messages": messages_json(prompt)})


def from_comparison(row: Mapping[str, Any]) -> Converted:
    if "prompt" in row:
        prompt = _text(row, "prompt")
    else:  # Alpaca / PandaLM convention: the instruction plus its optional input
        prompt = _text(row, "prompt", "instruction", allow_empty=True).strip()
        extra_input = row.get("input")
        if isinstance(extra_input, str) and extra_input.strip():
            prompt = f"{prompt}\n\n{extra_input}".strip()
        if not prompt:
            raise RowRejected("empty_text:prompt")
    response_a = _response(row, "response_a", _pick(row, _ALIASES["response_a"]))
    response_b = _response(row, "response_b", _pick(row, _ALIASES["response_b"]))
    if response_a == response_b:
        raise RowRejected("identical_responses", "response_a is identical to response_b")
    votes = []
    for column in sorted(c for c in row if WIDE_VOTE_COLUMN.match(c)):
        vote = parse_vote(row[column])
        if vote is not None:
            votes.append((column, vote))
    label_column = _pick(row, LABEL_COLUMNS)
    label = parse_vote(row[label_column]) if label_column else None
    key = prompt_id(prompt)
    record = {"id": source_id(row), "pair_id": pair_id_for(key, response_a, response_b), "prompt_id": key,
              "prompt": prompt, "response_a": response_a, "response_b": response_b, "label": label}
    record.update(_optional(row))
    return Converted("comparison", record, votes)


CONVERTERS = {"trl": from_trl, "trl-chat": from_trl_chat, "hh-rlhf": from_hh, "comparisons": from_comparison}


def unresolved_reason(comparison: Mapping[str, Any]) -> str | None:
    """Why a comparison does not become a chosen/rejected pair, or None when it does."""
    label = comparison.get("label")
    if label == "tie":
        return "tie"
    if label not in ("a", "b"):
        return "no_majority"
    return None


def resolve(comparison: dict[str, Any]) -> dict[str, Any] | None:
    """A comparison with label a|b as a chosen/rejected pair; None when unresolved_reason says why not."""
    if unresolved_reason(comparison) is not None:
        return None
    win, lose = ("a", "b") if comparison["label"] == "a" else ("b", "a")
    pair = {k: v for k, v in comparison.items()
            if k not in ("response_a", "response_b", "label", "model_a", "model_b")}
    pair["chosen"], pair["rejected"] = comparison[f"response_{win}"], comparison[f"response_{lose}"]
    if comparison.get(f"model_{win}") is not None:
        pair["chosen_model"] = comparison[f"model_{win}"]
    if comparison.get(f"model_{lose}") is not None:
        pair["rejected_model"] = comparison[f"model_{lose}"]
    return pair
