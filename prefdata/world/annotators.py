"""Simulated annotators: votes with a known accuracy, so the human path has realistic inputs.

An annotator sees a comparison (prompt, response A, response B); the verifier says which side is
right. The correct vote is the verified side when exactly one side is right, and "tie" when both or
neither are. An annotator with `accuracy` p and `tie_rate` t votes:

    one side right  "tie" with probability t (unsure); otherwise the right side with probability p,
                    the wrong side with 1 - p. So p is the accuracy of its a/b votes.
    no side better  "tie" with probability p; otherwise "a" or "b" at random.

Every draw hashes (seed, annotator name, pair id, purpose), so a vote never changes between runs or
with the order of the pairs, and two annotators err independently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from prefdata.data.records import VOTE_COLUMNS, pair_id as make_pair_id
from prefdata.world.tasks import verify

Verifier = Callable[[str, str], bool]


def _uniform(*parts: object) -> float:
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def correct_vote(prompt: str, response_a: str, response_b: str, verifier: Verifier = verify) -> str:
    a_ok, b_ok = verifier(prompt, response_a), verifier(prompt, response_b)
    # bool (passes or not) or float (a graded score): the higher side is right, equal ones tie
    return "tie" if a_ok == b_ok else ("a" if a_ok > b_ok else "b")


@dataclass(frozen=True)
class SimulatedAnnotator:
    name: str
    accuracy: float = 0.85
    tie_rate: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for field_name in ("accuracy", "tie_rate"):
            value = getattr(self, field_name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{field_name} must be in [0, 1], got {value} for annotator {self.name!r}")

    def vote(self, pair_id: str, prompt: str, response_a: str, response_b: str, verifier: Verifier = verify) -> str:
        truth = correct_vote(prompt, response_a, response_b, verifier)
        right = _uniform(self.seed, self.name, pair_id, "right") < self.accuracy
        if truth == "tie":
            if right:
                return "tie"
            return "a" if _uniform(self.seed, self.name, pair_id, "side") < 0.5 else "b"
        if _uniform(self.seed, self.name, pair_id, "unsure") < self.tie_rate:
            return "tie"
        return truth if right else ("b" if truth == "a" else "a")


def annotator_pool(k: int, accuracy: float = 0.85, tie_rate: float = 0.05, seed: int = 0) -> list[SimulatedAnnotator]:
    """K annotators, "annotator-1" ... "annotator-K", equally accurate, erring independently."""
    if k < 1:
        raise ValueError(f"need at least one annotator, got k={k}")
    return [SimulatedAnnotator(f"annotator-{i + 1}", accuracy, tie_rate, seed) for i in range(k)]


def votes_frame(comparisons, annotators: list[SimulatedAnnotator], verifier: Verifier = verify):
    """Long votes (`pair_id, annotator, vote`, records.VOTE_COLUMNS), one row per pair and annotator.

    `comparisons` is a polars frame with `prompt`, `response_a`, `response_b` and, optionally,
    `pair_id` (derived from content, as records.pair_id does, when absent).
    """
    import polars as pl

    rows = []
    for row in comparisons.iter_rows(named=True):
        pid = row.get("pair_id") or make_pair_id(row["prompt"], row["response_a"], row["response_b"])
        for annotator in annotators:
            vote = annotator.vote(pid, row["prompt"], row["response_a"], row["response_b"], verifier)
            rows.append((pid, annotator.name, vote))
    return pl.DataFrame(rows, schema=list(VOTE_COLUMNS), orient="row")
