"""Comparison records from the candidates of one prompt.

    build_pairs(prompt, candidates, strategy="all" | "random" | "best_vs_worst", scores=None, seed=0)

returns unlabeled comparison rows in the shape of prefdata.data.records (COMPARISON_COLUMNS, label None,
ids from records.pair_id / records.prompt_id) plus the provenance the `same_policy` check reads:

    model_a, model_b          `model@revision` of each side's policy
    sampling_a, sampling_b    JSON of the backend and sampling params of each side
    candidate_a, candidate_b  the candidates' indices; score_a, score_b with best_vs_worst
    prompt_messages           only for a prompt given as messages: their JSON (`prompt` is its text),
                              as an imported conversational row carries them, for the trainers' rendering

Identical candidates (equal after records.normalise_text) never form a pair: a degenerate pair
carries no preference. Side A is always the candidate sampled first, whatever the scores say, so
position never leaks which side a scorer preferred.

    with_repair(candidates, repair, spec)

adds one candidate: the first one that the rule `repair(prompt, text) -> str | None` edits into a
new text, edited (model `<model>+repair`, sampler "repair", its params naming the rule and the
candidate edited). A pair of it and an unedited candidate differs in what the rule fixes; its sides
come from two policies, which the `same_policy` check reports. An edit that only changes case or
spacing (equal to its source after records.normalise_text, which folds case) replaces its source
instead: pair ids treat the two as one text, so both could not be candidates, and the edited one
is then paired with the other candidates (a lowercased reply against the ones that are not). An
edit equal to another candidate adds nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from typing import Callable, Sequence

from prefdata.data.records import Candidate, normalise_text, pair_id, prompt_id

STRATEGIES = ("all", "random", "best_vs_worst")


def _distinct(candidates: Sequence[Candidate]) -> list[int]:
    """Indices of the first candidate of every distinct (normalised) text."""
    seen: set[str] = set()
    keep = []
    for i, c in enumerate(candidates):
        key = normalise_text(c.text)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return keep


def _sampling(c: Candidate) -> str:
    return json.dumps({"sampler": c.sampler, **c.params}, sort_keys=True)


def build_pairs(prompt: str, candidates: Sequence[Candidate], strategy: str = "all",
                scores: Sequence[float] | None = None, seed: int = 0) -> list[dict]:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if any(c.prompt != prompt for c in candidates):
        raise ValueError("every candidate must answer the prompt given")
    messages = {c.prompt_messages for c in candidates}
    if len(messages) > 1:
        raise ValueError("every candidate must answer the same prompt messages")
    if (strategy == "best_vs_worst") != (scores is not None):
        raise ValueError(f"scores are needed by best_vs_worst and only by it (strategy={strategy!r}, "
                         f"scores {'given' if scores is not None else 'missing'})")
    if scores is not None and len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")
    keep = _distinct(candidates)
    if strategy == "all":
        chosen = list(itertools.combinations(keep, 2))
    elif strategy == "random":
        all_pairs = list(itertools.combinations(keep, 2))
        # Seeded by the prompt too, so each prompt draws independently but reproducibly.
        chosen = [random.Random(f"{seed}:{prompt_id(prompt)}").choice(all_pairs)] if all_pairs else []
    else:
        best = max(keep, key=lambda i: scores[i])
        worst = min(keep, key=lambda i: scores[i])
        chosen = [tuple(sorted((best, worst)))] if scores[best] != scores[worst] else []
    pid = prompt_id(prompt)
    rows = []
    for i, j in chosen:
        a, b = candidates[i], candidates[j]
        row = {"id": pair_id(prompt, a.text, b.text), "pair_id": pair_id(prompt, a.text, b.text), "prompt_id": pid,
               "prompt": prompt, "response_a": a.text, "response_b": b.text, "label": None,
               "model_a": a.policy, "model_b": b.policy, "sampling_a": _sampling(a), "sampling_b": _sampling(b),
               "candidate_a": a.index, "candidate_b": b.index}
        if a.prompt_messages is not None:
            row["prompt_messages"] = a.prompt_messages
        if scores is not None:
            row.update(score_a=float(scores[i]), score_b=float(scores[j]))
        rows.append(row)
    return rows


def with_repair(candidates: Sequence[Candidate], repair: Callable[[str, str], str | None],
                spec: str) -> list[Candidate]:
    """`candidates` and the first of them that `repair` edits, edited; a case-only edit in place of
    its source (see the module's docstring)."""
    texts = [normalise_text(c.text) for c in candidates]
    for position, c in enumerate(candidates):
        edited = repair(c.prompt, c.text)
        if edited is None or edited == c.text:
            continue
        same_text = normalise_text(edited) == texts[position]
        if not same_text and normalise_text(edited) in texts:
            continue
        repaired = dataclasses.replace(
            c, text=edited, model=f"{c.model}+repair", sampler="repair", index=c.index if same_text else len(candidates),
            params={**c.params, "repair": spec, "of": c.index}, finish_reason=None, request_seed=None)
        if same_text:
            return [*candidates[:position], repaired, *candidates[position + 1:]]
        return [*candidates, repaired]
    return list(candidates)


def sampler_lineage(candidates: Sequence[Candidate]) -> list[dict]:
    """The distinct sampling setups behind `candidates`, for a version's lineage
    (`lineage["components"]["sampler"]`): one entry means one policy and one setup."""
    setups = {json.dumps({"model": c.model, "revision": c.model_revision, "sampler": c.sampler, **c.params},
                         sort_keys=True) for c in candidates}
    return [json.loads(s) for s in sorted(setups)]
