"""A label audit: people re-judge a version's own chosen/rejected pairs, blind.

    audit_rows(pairs, sample=None, seed=0)  -> push rows: pair_id = the pair's id, response_a =
                                               chosen, response_b = rejected, label = "a" (and the
                                               pair's category and prompt_messages, when it has them)
    read_audit_votes(path, pair_ids)        -> the pulled votes for `prefdata check NAME@VERSION --votes`

Blind: the annotators see the two responses as A and B in the per-pair order `push` draws (so
chosen is on the left only half the time), and no suggestion; the label travels in the record's
hidden metadata, and `pull` writes it beside every vote, so `check` can tell which side was the
dataset's choice (checks.agreement.check_label_audit).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl

from prefdata.base.errors import UnusableInput


def sample_rows(rows: pl.DataFrame, sample: int | None, seed: int, id_column: str = "pair_id") -> pl.DataFrame:
    """The `sample` rows with the smallest sha256(seed, id): the same rows on every push, and a
    larger sample with the same seed contains the smaller one (an audit can be extended)."""
    if sample is None:
        return rows
    if sample < 1:
        raise UnusableInput(f"push: --sample must be at least 1 pair, got {sample}")
    rank = [hashlib.sha256(f"{seed}:sample:{i}".encode()).hexdigest() for i in rows[id_column].cast(pl.String)]
    return (rows.with_columns(pl.Series("_rank", rank)).sort("_rank").head(sample).drop("_rank"))


def audit_rows(pairs: pl.DataFrame, sample: int | None = None, seed: int = 0) -> pl.DataFrame:
    """A version's pairs as rows to push for a label audit (its `id`, so votes join to the pairs)."""
    missing = [c for c in ("id", "prompt", "chosen", "rejected") if c not in pairs.columns]
    if missing:
        raise UnusableInput(f"push: the version's pairs lack {', '.join(missing)}")
    # prompt_messages: a conversation's turns, so Argilla shows its history as a chat (push.py)
    extra = [c for c in ("category", "prompt_messages") if c in pairs.columns]
    rows = pairs.select(pl.col("id").cast(pl.String).alias("pair_id"), "prompt", pl.col("chosen").alias("response_a"),
                        pl.col("rejected").alias("response_b"), pl.lit("a").alias("label"), *extra)
    return sample_rows(rows, sample, seed)


def read_audit_votes(path: Path, pair_ids: pl.Series) -> pl.DataFrame:
    """Votes pulled from a label audit (pair_id, annotator, vote, label) for the version whose ids
    are `pair_ids`. Strict: a vote for a pair the version lacks, a value that is not a vote, or a
    pair voted twice by one annotator means the wrong file: one line, nothing guessed."""
    from prefdata.data.formats import RowRejected, parse_vote
    from prefdata.data.readers import read_rows

    path = Path(path)
    if not path.is_file():
        raise UnusableInput(f"--votes {path}: no such file")
    rows = list(read_rows(path))
    known = set(pair_ids.cast(pl.String).to_list())
    out, seen = [], set()
    for row in rows:
        where = f"--votes {path}, row {row.number}"
        if row.data is None:
            raise UnusableInput(f"{where}: unreadable ({row.error})")
        missing = [c for c in ("pair_id", "annotator", "vote") if row.data.get(c) in (None, "")]
        if missing:
            raise UnusableInput(f"{where}: no {', '.join(missing)}; a votes table has pair_id, annotator, vote")
        pid, annotator = str(row.data["pair_id"]), str(row.data["annotator"])
        try:
            vote = parse_vote(row.data["vote"])
            label = parse_vote(row.data.get("label"))
        except RowRejected as rejected:
            raise UnusableInput(f"{where}: {rejected.detail or rejected.reason}") from None
        if pid not in known:
            raise UnusableInput(f"{where}: {pid!r} is not a pair of this version; pass the votes pulled from a push "
                                "of the same NAME@VERSION")
        if (pid, annotator) in seen:
            raise UnusableInput(f"{where}: {annotator} voted twice on {pid}")
        seen.add((pid, annotator))
        out.append({"pair_id": pid, "annotator": annotator, "vote": vote, "label": label})
    if not out:
        raise UnusableInput(f"--votes {path}: no votes in it")
    return pl.DataFrame(out, schema={"pair_id": pl.String, "annotator": pl.String, "vote": pl.String,
                                     "label": pl.String})
