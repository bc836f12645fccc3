"""label_direction reports the "longer wins" baseline beside the scorer's agreement."""

from __future__ import annotations

import polars as pl

from prefdata.checks.direction import check_label_direction, longer_wins

PAIRS = pl.DataFrame({
    "id": ["a", "b", "c", "d", "e"],
    "prompt": ["p"] * 5,
    "chosen": ["long answer", "long answer", "short", "same", "xx"],
    "rejected": ["short", "tiny", "a much longer one", "size", "yy"],
})


def test_longer_wins_counts_only_pairs_of_unequal_length():
    assert longer_wins(PAIRS) == 2 / 3  # a, b chosen longer; c chosen shorter; d, e equal: left out
    assert longer_wins(PAIRS.filter(pl.col("id").is_in(["d", "e"]))) is None
    flipped = PAIRS.with_columns(chosen=pl.col("rejected"), rejected=pl.col("chosen"))
    assert longer_wins(flipped) == 1 / 3


def test_label_direction_shows_the_baseline_over_its_decided_pairs():
    verdicts = pl.DataFrame({"id": ["a", "b", "c", "d", "e"], "preferred": ["chosen", "chosen", "chosen", None, "tie"]})
    result = check_label_direction(PAIRS, verdicts)
    assert result.metric == 1.0
    # decided: a, b, c -> the longer side is chosen in 2 of 3
    assert result.details["longer_wins"] == 2 / 3
    assert "picking the longer response would match the labels in 66.7%" in result.message
