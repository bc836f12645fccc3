"""From judged, routed and voted comparisons to the tables of a draft version. Pure functions, no
Prefect: the collect flow calls them, tests call them directly.

Who labels a comparison (its `label_source`):

    route "judge"            the judge's label
    route "human" / "both"   the human votes' label when there are votes: their majority, or with
                             aggregate "dawid-skene" the label of checks/agreement.py's Dawid-Skene
                             model, which weighs each annotator by its estimated quality ("both" is
                             the audit: humans overrule the judge, and their agreement is measured);
                             with no votes yet, "both" keeps the judge's label and "human" stays
                             unlabeled (`awaiting_votes`) until a later run pulls votes

A comparison labelled a or b becomes a chosen/rejected pair; ties, pairs without a majority and
pairs awaiting votes stay in the comparisons table, counted by reason.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from prefdata.data.records import VOTE_COLUMNS

# What a pair row keeps from its comparison (the store's pairs table stays lean; the rest is in comparisons).
PAIR_KEEP = ("id", "pair_id", "prompt_id", "prompt", "chosen", "rejected", "chosen_model", "rejected_model",
             "label_source")
COMPARISON_KEEP = ("id", "pair_id", "prompt_id", "prompt", "response_a", "response_b", "label", "label_source",
                   "model_a", "model_b", "sampling_a", "sampling_b", "candidate_a", "candidate_b",
                   "judge_label", "judge_reason", "judge_model", "judge_template", "route", "route_reason")
# Kept in both tables only when a run's prompts were given as messages (prefdata.collect.pairing): a
# run of text prompts writes the tables it always wrote.
MESSAGES = "prompt_messages"


def chunks(items: Sequence, size: int) -> list[list]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def prompt_key(prompt: str | list[dict[str, str]]) -> str:
    """A prompt as one string, for seeds, hashes and deduplication: text as it is, messages as their
    JSON (a run of text prompts keeps the seeds and hashes it always had)."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([{"role": m["role"], "content": m["content"]} for m in prompt], ensure_ascii=False)


MESSAGE_COLUMNS = ("prompt", "messages")  # TRL's conversational prompt-only and messages columns


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def message_prompts(path: str | Path) -> list[str | list[dict[str, str]]] | None:
    """The prompts of a table whose first row's `prompt` (else `messages`) is a list of {role, content}
    messages (TRL's conversational format), in file order; None when it is not (the file holds text
    prompts: prefdata.gate.runner.read_prompts reads those). A row may also give plain text. A
    `messages` conversation that ends with the assistant's turns (an SFT row) is cut before them: the
    prompt is what comes before a reply. A row that is neither is one line naming it."""
    from prefdata.base.errors import UnusableInput
    from prefdata.data.readers import read_rows

    rows = (r for r in read_rows(path) if r.data is not None)
    first = next(rows, None)
    column = next((c for c in MESSAGE_COLUMNS if first is not None and _is_messages(first.data.get(c))), None)
    if column is None:
        return None
    out: list[str | list[dict[str, str]]] = []
    for row in itertools.chain([first], rows):
        value = row.data.get(column)
        if _is_messages(value):
            turns = [{"role": m["role"], "content": m["content"]} for m in value]
            while column == "messages" and len(turns) > 1 and turns[-1]["role"] == "assistant":
                turns.pop()
            if not any(t["role"] == "user" for t in turns):
                raise UnusableInput(f"{path}: row {row.number}: the prompt's messages have no user turn")
            out.append(turns)
        elif isinstance(value, str) and value.strip():
            out.append(value)
        else:
            raise UnusableInput(f"{path}: row {row.number}: {column} is neither text nor a list of {{role, content}} "
                                "messages")
    return out


def chunk_seed(seed: int, prompts: Iterable[str]) -> int:
    """A sampling seed from the run's seed and the chunk's own prompts, so a chunk samples the same
    candidates wherever it runs and whatever its position in the run."""
    digest = hashlib.sha256(f"{seed}\0".encode() + "\0".join(prompts).encode()).hexdigest()
    return int(digest[:8], 16)


def import_target(spec: str) -> Callable:
    """A registered verifier's name (or its own module:function) -> the function; one line naming the
    registered ones otherwise (prefdata/base/registry.py: a spec never names arbitrary code)."""
    from prefdata.base.registry import load

    return load("verifier", spec, "verifier")


def label(routed: list[dict], comparisons: list[dict], votes: list[dict], aggregate: str = "majority") -> list[dict]:
    """Comparison rows (in the order given) with `label`, `label_source` and the judge's and router's
    columns; `routed` is prefdata.collect.routing.route's output for the same comparisons. `aggregate` turns
    a pair's human votes into its label: "majority" (more than half agree, else no label) or
    "dawid-skene" (EM over all the votes of the run: an annotator who votes at random counts for
    little; every voted pair gets its most probable label, where a majority may find none)."""
    from prefdata.data.formats import vote_labels

    human_label = vote_labels(votes, aggregate)
    out = []
    for comparison, r in zip(comparisons, routed, strict=True):
        if comparison["pair_id"] != r["pair_id"]:
            raise ValueError(f"routed row {r['pair_id']} given for comparison {comparison['pair_id']}")
        human = r["pair_id"] in human_label  # voted on
        if r["route"] == "judge" or (r["route"] == "both" and not human):
            value, source = r["judge_label"], "judge"
        elif human:
            value, source = human_label[r["pair_id"]], "human"
        else:
            value, source = None, None
        row = {**comparison, "label": value, "label_source": source,
               **{k: r[k] for k in ("judge_label", "judge_reason", "judge_model", "judge_template", "route",
                                    "route_reason")}}
        keep = COMPARISON_KEEP + ((MESSAGES,) if MESSAGES in comparison else ())
        out.append({k: row.get(k) for k in keep})
    return out


def unresolved(row: dict) -> str | None:
    if row["label"] in ("a", "b"):
        return None
    if row["label"] == "tie":
        return "tie"
    return "no_majority" if row["label_source"] == "human" else "awaiting_votes"


def to_pair(row: dict) -> dict:
    win, lose = ("a", "b") if row["label"] == "a" else ("b", "a")
    pair = {**row, "chosen": row[f"response_{win}"], "rejected": row[f"response_{lose}"],
            "chosen_model": row[f"model_{win}"], "rejected_model": row[f"model_{lose}"]}
    return {k: pair.get(k) for k in PAIR_KEEP + ((MESSAGES,) if MESSAGES in row else ())}


def draft(labelled: list[dict], votes: list[dict]) -> tuple[dict, dict[str, Any]]:
    """(store tables, counts) for Store.create: every comparison is kept (read = kept, nothing is
    quarantined here); the decided ones are also pairs."""
    import polars as pl

    from prefdata.data.store import tables_for

    messages = (MESSAGES,) if any(MESSAGES in r for r in labelled) else ()
    labelled = [{k: r.get(k) for k in COMPARISON_KEEP + messages} for r in labelled]  # one shape for every row
    pairs = [to_pair(r) for r in labelled if unresolved(r) is None]
    pair_schema = {k: pl.String for k in PAIR_KEEP + messages}
    pair_frame = pl.DataFrame(pairs, schema=pair_schema, orient="row") if pairs else pl.DataFrame(schema=pair_schema)
    schema = {k: (pl.Int64 if k.startswith("candidate_") else pl.String) for k in COMPARISON_KEEP + messages}
    comparison_frame = pl.DataFrame(labelled, schema=schema, orient="row")
    vote_frame = pl.DataFrame([{k: v[k] for k in VOTE_COLUMNS} for v in votes],
                              schema={k: pl.String for k in VOTE_COLUMNS}, orient="row") if votes else None
    reasons = Counter(filter(None, map(unresolved, labelled)))
    counts = {"format": "collect", "read": len(labelled), "kept": len(labelled), "quarantined": 0,
              "pairs": len(pairs), "unresolved": dict(reasons.most_common()), "reasons": {},
              "label_source": dict(Counter(r["label_source"] or "none" for r in labelled))}
    return tables_for(pair_frame, comparison_frame, vote_frame), counts
