"""A growing dataset: a draft holding a parent version's rows and a night's new ones (`import --onto`).

A team collects every night; the dataset grows from 10M pairs to 10M + 20k. The child version is the
parent's tables followed by the new rows' (store.create_sharded `onto`): the parent's files are shared
(hard links in a local store), so the child costs the disk of its new rows, and its lineage names the
parent. What makes the child one dataset rather than two stacked files:

- ids stay unique as one import of all the rows would make them: a new row whose content id the parent
  already holds is numbered after the parent's copies (`<pair_id>-<n>`, records.py), in the new
  file's order; the comparisons and votes of such a row follow it. A new row whose *source* id the
  parent uses for other content is the user's to settle: one line, nothing written (one import would
  quarantine it as `duplicate_id_conflict`, but here the other row is already a validated version's);
- the new rows take the parent's columns and types (an optional column they lack is null), so every
  shard stacks; a column the parent lacks is refused in one line, since the parent cannot grow one;
- the parent must pass verify first: its files become the child's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from prefdata.base.errors import GateFailed, UnusableInput

if TYPE_CHECKING:
    from prefdata.data.store import Store, Version


PREVIOUS = "previous"  # --onto / the collect flow's `onto`: the newest validated version of the dataset


def resolve(store: Store, name: str, onto: str) -> str | None:
    """The parent `onto` names, as its full NAME@VERSION: the version given (one line when the store
    has no such version), or `previous`: the newest validated version of `name` (None when it has
    none yet: the first night's draft stands alone). Called before any work, so that a wrong name
    fails before a night of sampling."""
    if onto != PREVIOUS:
        try:
            return store.get(onto).ref
        except UnusableInput as exc:
            raise UnusableInput(f"onto {onto}: {exc}") from None
    validated = [v for v in store.versions(name) if v.status == "validated"]  # oldest first
    return validated[-1].ref if validated else None


@dataclass
class Onto:
    """The parent of a growing import, and what the new rows need from it."""

    parent: Version
    schemas: dict[str, pl.Schema]      # config -> the parent's column types
    ids: pl.Series                     # every id of the parent's pairs and comparisons
    copies: pl.DataFrame               # pair_id, n: the parent's rows per content id
    store: Store
    renamed: dict[str, str] = field(default_factory=dict)  # a new row's id -> the id it has in the child

    @classmethod
    def open(cls, store: Store, ref: str) -> Onto:
        parent = store.get(ref)
        problems = store.verify(parent.ref)
        if problems:
            raise GateFailed(f"--onto {parent.ref}: its files fail verify ({problems[0]}"
                             f"{f' and {len(problems) - 1} more' if len(problems) > 1 else ''}); a child would share "
                             f"them: run `prefdata verify {parent.ref}`, or grow another version")
        configs = parent.manifest["counts"]["rows"]
        schemas = {config: store.table_schema(parent, config) for config in configs}
        keyed = [store.read_columns(parent, config, ["id", "pair_id"]) for config in ("default", "comparisons")
                 if config in configs]
        keys = pl.concat(keyed).unique(maintain_order=True) if keyed else pl.DataFrame(
            schema={"id": pl.String, "pair_id": pl.String})
        copies = keys.group_by("pair_id").agg(n=pl.len().cast(pl.Int64))
        return cls(parent, schemas, keys["id"], copies, store)

    def lineage(self, lineage: dict[str, Any]) -> dict[str, Any]:
        return {**lineage, "parent": self.parent.ref}

    def tables(self, tables: dict[str, dict[str, pl.DataFrame]]) -> dict[str, dict[str, pl.DataFrame]]:
        """A new batch's store tables (store.tables_for) as the child holds them: ids renumbered
        (pairs and comparisons; the SFT rows and votes follow), columns aligned to the parent's."""
        grown = {config: dict(splits) for config, splits in tables.items()}
        for config in ("default", "comparisons"):
            for split, frame in grown.get(config, {}).items():
                grown[config][split] = self.renumber(frame)
        for config, column in (("sft", "id"), ("votes", "pair_id")):
            for split, frame in grown.get(config, {}).items():
                grown[config][split] = frame.with_columns(pl.col(column).replace(self.renamed)) if self.renamed else frame
        return self.align(grown)

    # -- ids ---------------------------------------------------------------------------------------

    def renumber(self, frame: pl.DataFrame) -> pl.DataFrame:
        """A table with `id` and `pair_id` (pairs, comparisons) with the child's ids: a content id the
        parent holds n copies of becomes `<pair_id>-<n + k>` (k: 1 for the new rows' first copy, as
        their own numbering says); refused when a source id names other content in the parent."""
        if frame.height == 0 or "pair_id" not in frame.columns:
            return frame
        content = (pl.col("id") == pl.col("pair_id")) | pl.col("id").str.starts_with(pl.col("pair_id") + "-")
        self._refuse_conflicts(frame.filter(~content & pl.col("id").is_in(self.ids.implode())))
        own_copy = (pl.when(pl.col("id") == pl.col("pair_id")).then(1)
                    .otherwise(pl.col("id").str.slice(pl.col("pair_id").str.len_chars() + 1).cast(pl.Int64, strict=False)))
        numbered = (frame.join(self.copies, on="pair_id", how="left", maintain_order="left")
                    .with_columns(new_id=pl.when(content & pl.col("n").is_not_null())
                                  .then(pl.col("pair_id") + "-" + (pl.col("n") + own_copy).cast(pl.String))
                                  .otherwise(pl.col("id"))))
        changed = numbered.filter(pl.col("new_id") != pl.col("id"))
        self.renamed.update(zip(changed["id"].to_list(), changed["new_id"].to_list()))
        return numbered.with_columns(id=pl.col("new_id")).drop("new_id", "n")

    def _refuse_conflicts(self, reused: pl.DataFrame) -> None:
        if reused.height == 0:
            return
        theirs = self.store.read_columns(self.parent, "default", None, ids=reused["id"])
        texts = [c for c in ("prompt", "chosen", "rejected", "response_a", "response_b") if c in reused.columns
                 and c in theirs.columns]
        joined = reused.select("id", *texts).join(theirs.select("id", *texts).unique("id", keep="first"), on="id",
                                                  how="inner", suffix="_parent")
        differs = joined.filter(pl.any_horizontal(pl.col(c) != pl.col(f"{c}_parent") for c in texts)) if texts else joined
        if differs.height:
            raise UnusableInput(f"--onto {self.parent.ref}: {differs.height} new row(s) reuse an id the parent has for "
                                f"other content (first: id {differs['id'][0]!r}); give them new ids, or import them as "
                                "a version of their own")

    # -- columns -----------------------------------------------------------------------------------

    def align(self, tables: dict[str, dict[str, pl.DataFrame]]) -> dict[str, dict[str, pl.DataFrame]]:
        """The new rows' tables in the parent's columns, order and types: a column they lack is null, a
        column the parent lacks (with a value in some new row) is refused."""
        aligned: dict[str, dict[str, pl.DataFrame]] = {}
        for config, splits in tables.items():
            schema = self.schemas.get(config)
            aligned[config] = splits if schema is None else {s: self._aligned(config, f, schema) for s, f in splits.items()}
        return aligned

    def _aligned(self, config: str, frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
        extra = [c for c in frame.columns if c not in schema and frame[c].null_count() < frame.height]
        if extra:
            raise UnusableInput(f"--onto {self.parent.ref}: the new rows have column(s) {', '.join(extra)} that the "
                                f"parent's {config} table lacks; import them as a version of their own, or drop the "
                                "column(s)")
        try:
            return frame.select(pl.col(c).cast(t) if c in frame.columns else pl.lit(None, t).alias(c)
                                for c, t in schema.items())
        except pl.exceptions.InvalidOperationError as exc:
            raise UnusableInput(f"--onto {self.parent.ref}: the new rows' {config} columns do not take the parent's "
                                f"types ({str(exc).splitlines()[0]}); import them as a version of their own") from None
