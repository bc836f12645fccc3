"""Who labels each pair: the judge, humans (the Argilla queue), or both.

`route(items, verdicts, policy)` is pure: the same pairs, verdicts and policy always give the same
routes. Rules, first match wins; the rule that fired is the row's `route_reason`:

    category_<name>   the pair's category is in policy.human_categories (e.g. safety): human,
                      whatever the judge said
    judge_<reason>    the judge is undecided (position_inconsistent, unparseable, error, both_pass...):
                      human, never a guessed label
    low_confidence    the judge's confidence is below policy.min_confidence: human
    audit             a deterministic random share of the pairs the judge decided (sha256 of seed and
                      pair id < audit_share): both, so judge-human agreement is measured on every
                      dataset, on the same kind of pairs the judge labels alone
    judge_decided     otherwise: the judge's label is used

Rows routed "human" or "both" go to the human queue (`write_queue`, JSONL, one row per pair). The
queue rows carry the judge's verdict for the agreement measurement; the fields in BLIND_FIELDS must
stay hidden from annotators (Argilla metadata not shown in the UI), or the judge anchors the humans.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from prefdata.collect.judging import PairToJudge, Verdict

ROUTES = ("judge", "human", "both")
TO_HUMANS = ("human", "both")
BLIND_FIELDS = ("judge_label", "judge_confidence", "judge_reason", "judge_model")


@dataclass(frozen=True)
class RoutingPolicy:
    min_confidence: float = 0.8
    human_categories: tuple[str, ...] = ("safety",)
    audit_share: float = 0.05  # of the judge-decided pairs, also sent to humans
    seed: int = 0

    def __post_init__(self):
        if not 0 <= self.min_confidence <= 1 or not 0 <= self.audit_share <= 1:
            raise ValueError(f"RoutingPolicy: min_confidence={self.min_confidence} and audit_share={self.audit_share} "
                             "must both lie in [0, 1]")
        if isinstance(self.human_categories, str):  # ("safety") is a string, not a tuple: a common slip
            raise ValueError(f"RoutingPolicy: human_categories={self.human_categories!r} must be a tuple of names")
        object.__setattr__(self, "human_categories", tuple(c.casefold() for c in self.human_categories))


def in_audit(pair_id: str, share: float, seed: int) -> bool:
    """A uniform draw in [0, 1) from sha256(seed, pair id): the same pair is always in or out."""
    draw = int(hashlib.sha256(f"{seed}:{pair_id}".encode()).hexdigest()[:16], 16) / 16 ** 16
    return draw < share


def decide(item: "PairToJudge", verdict: "Verdict", policy: RoutingPolicy) -> tuple[str, str]:
    """(route, reason) for one pair."""
    category = (item.category or "").casefold()
    if category and category in policy.human_categories:
        return "human", f"category_{category}"
    if verdict.undecided:
        return "human", f"judge_{verdict.reason}"
    if verdict.confidence is None or verdict.confidence < policy.min_confidence:
        return "human", "low_confidence"
    if in_audit(item.pair_id, policy.audit_share, policy.seed):
        return "both", "audit"
    return "judge", "judge_decided"


def route(items: list["PairToJudge"], verdicts: list["Verdict"], policy: RoutingPolicy = RoutingPolicy()) -> list[dict]:
    """One row per pair: the pair, the judge's verdict, and `route`, `route_reason`."""
    if len(items) != len(verdicts):
        raise ValueError(f"{len(items)} pairs but {len(verdicts)} verdicts")
    rows = []
    for item, verdict in zip(items, verdicts):
        if item.pair_id != verdict.pair_id:
            raise ValueError(f"verdict for {verdict.pair_id} given for pair {item.pair_id}: keep them in one order")
        where, why = decide(item, verdict, policy)
        rows.append({
            "pair_id": item.pair_id, "prompt": item.prompt, "response_a": item.response_a,
            "response_b": item.response_b, "category": item.category,
            "judge_label": verdict.label, "judge_confidence": verdict.confidence, "judge_reason": verdict.reason,
            "judge_model": verdict.judge_model, "judge_template": verdict.template,
            "judge_template_version": verdict.template_version,
            "route": where, "route_reason": why,
            **({"prompt_messages": item.prompt_messages} if item.prompt_messages is not None else {}),
        })
    return rows


def route_counts(rows: Iterable[dict]) -> dict[str, dict[str, int]]:
    """Counters to save beside the dataset: rows per route and per reason."""
    rows = list(rows)
    return {"route": dict(Counter(r["route"] for r in rows)), "route_reason": dict(Counter(r["route_reason"] for r in rows))}


def write_queue(path: str | Path, rows: Iterable[dict]) -> int:
    """Write the rows routed to humans ("human" and "both") as JSONL; return how many. Rows routed
    "judge" are not queue rows: they stay in the judged output. Written to a temporary file and
    renamed, so a reader never sees half a queue."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            if row.get("route") not in ROUTES:
                raise ValueError(f"row {row.get('pair_id')!r} has route {row.get('route')!r}: route it first")
            if row["route"] in TO_HUMANS:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
    os.replace(tmp, path)
    return n
