"""The checklist over pairs that do not fit in memory: the pairs stay in Parquet shards (a store
version's data files, or a big file imported batch by batch), and what the checks hold is a *thin*
frame: every column but the two responses, with their lengths and a hash of the chosen one instead
(`thin`; checks/frames.py `text_chars` reads those). At 10M realistic pairs that is ~2 GB instead
of ~14 GB.

How each check runs, by its traits in the registry (checks/registry.py; run_checklist swaps in
`stand_ins()` when CheckInputs.shards is set, and skips a check whose `engines` leave SHARDS out):
- the row-local checks that need the responses' text (`per_shard()`) run shard by shard, each the very
  check function bound as the registry binds it, and their results combine (`combine`): offending
  ids in row order, metric = offending / rows, the same threshold rule, details merged (counts
  summed, examples cut to the same length, the check's parameters as given), and the message the
  check's own message function (its registry `merge`, e.g. content.py `safety_message`) builds from
  the merged details: the in-memory run's message;
- the other checks that need the text run the code their registry entry names (`shard_engine`: here
  near and exact duplicates, over checks/shards.py ShardTexts): the texts are prepared a block at a
  time, and only the rows verification needs are read again; the verdict is the check's own result
  function (dedup.py), fed what the shards gave. exact_duplicates groups rows by two 64-bit keys per
  row, which `publish` stores per data file (`keys_file`); a version grown from a validated one takes
  them for the files it shares (`shard_exact_keys`) and hashes only its new files' rows; texts are
  read again only for the rows whose keys repeat (compared for real): the same groups, the same result.
  near_duplicates likewise takes what signing made for a shared file's rows (text hashes, band keys,
  sketches, screenable flags: `NEAR_BY_FILE`, one gate file per data file, read as that file's turn
  comes) and signs only the new files' rows, and starts from the parent's clusters (NEAR_CLUSTERS):
  only candidate pairs reaching a new text are made, screened and verified, the same clusters;
- every other check runs once, unchanged, on the thin frame: lengths (length_ratio, the GX suite,
  label_direction's longer-wins baseline), prompts, ids, splits, scores and categories are all there.

tests/test_batched.py checks that each status, metric and offending list equals the in-memory run's,
and each row-local check's message and counts.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from .base import CheckResult
from .frames import text_chars
from .registry import CHECKS, SHARDS, CheckInputs

RESPONSES = ("chosen", "rejected")  # what stays in the shards
SHARD_KEYS = "batched.exact_keys"  # CheckInputs.derived: near_duplicates' (prompt, pair) hashes for exact
# a row-local check's message from (merged details, offending rows, rows, threshold): see `combine`
Message = Callable[[dict[str, Any], int, int, float], str]


def thin(frame: pl.DataFrame) -> pl.DataFrame:
    """A shard's rows without their responses: their lengths (`<side>_chars`, null where null)
    and the chosen text's 64-bit hash (`chosen_hash`, for sft_subset) instead."""
    extra = [text_chars(frame, side).alias(f"{side}_chars") for side in RESPONSES if side in frame.columns]
    if "chosen" in frame.columns:
        extra.append(pl.col("chosen").cast(pl.String).hash().alias("chosen_hash"))
    return frame.select(pl.exclude(*RESPONSES), *extra)


def thin_sft(frame: pl.DataFrame) -> pl.DataFrame:
    """An SFT shard without its texts: whether each completion is blank, and its 64-bit hash."""
    from .structure import _blank

    if "completion" not in frame.columns:
        return frame
    return frame.select(pl.exclude("prompt", "completion"), completion_blank=_blank("completion").fill_null(True),
                        completion_hash=pl.col("completion").cast(pl.String).hash())


def thin_frame(shards: Any, shape: Callable[[pl.DataFrame], pl.DataFrame] = thin,
               stored: dict[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Every shard, thinned, stacked in order. `stored`: what `thin` made from the responses of some
    files (file sha256 -> THIN_COLUMNS, a grown version's parent's, `read_thin_file`): those files'
    responses are not read, only their other columns."""
    thinned = []
    keys = shards.keys if stored and getattr(shards, "keys", None) else [None] * len(shards.paths)
    for k, key in enumerate(keys):
        made = stored.get(key) if key else None
        if made is not None and shape is thin and made.height == shards.rows[k]:
            thinned.append(pl.concat([shards.read(k, [c for c in shards.columns(k) if c not in RESPONSES]), made],
                                     how="horizontal"))
            continue
        frame = shards.read(k)
        thinned.append(shape(frame))
        del frame  # before the next shard is read
    return pl.concat(thinned, how="diagonal_relaxed")


# What `thin` makes from the responses, per data file of a version checked in shards: stored with a
# validated version (THIN_ARTIFACT, `thin_file`) so that a grown child reads only the other columns of
# its parent's files (`thin_frame`'s `stored`)
THIN_COLUMNS = ("chosen_chars", "rejected_chars", "chosen_hash")
THIN_ARTIFACT = "thin.parquet"


def thin_file(inputs: Any) -> bytes | None:
    """This run's THIN_COLUMNS of a stored version checked in shards, per data file in row order, as one
    Parquet file (a `file` column, the hasher in its metadata); None for another run."""
    import io

    import pyarrow.parquet as pq

    shards = inputs.shards
    if shards is None or not getattr(shards, "keys", None) or not all(shards.keys) or inputs.part_keys is None:
        return None
    columns = [c for c in THIN_COLUMNS if c in inputs.pairs.columns]
    files = pl.Series("file", shards.keys).gather(np.repeat(np.arange(len(shards.keys)), shards.rows))
    out = io.BytesIO()
    table = inputs.pairs.select(columns).with_columns(files).to_arrow()
    pq.write_table(table.replace_schema_metadata({"prefdata.hasher": _hasher()}), out)
    return out.getvalue()


def read_thin_file(data: bytes) -> dict[str, pl.DataFrame]:
    """`thin_file`'s columns per data file; none when another hasher made them (its chosen_hash would
    differ), or when it is not such a file."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except pa.ArrowException:
        return {}
    if (table.schema.metadata or {}).get(b"prefdata.hasher") != _hasher().encode() or "file" not in table.column_names \
            or not set(table.column_names) - {"file"} <= set(THIN_COLUMNS):
        return {}
    frame = pl.from_arrow(table)
    return {str(f): part.drop("file") for (f,), part in frame.group_by("file", maintain_order=True)}


# -- row-local checks, shard by shard ---------------------------------------------------------------


def _merge(values: list[Any]) -> Any:
    """Shards' details merged: counts summed, mappings merged key by key, lists (examples) joined
    and cut to the longest any shard gave (each shard cut its own at the same limit), other values
    (parameters, names) the first shard's; a float that differs between shards, its largest."""
    first = values[0]
    if isinstance(first, bool) or first is None or isinstance(first, str):
        return first
    if isinstance(first, int):
        return sum(v for v in values if isinstance(v, int))
    if isinstance(first, float):
        return max(v for v in values if isinstance(v, (int, float)))
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for v in values if isinstance(v, dict) for k in v))
        return {k: _merge([v[k] for v in values if isinstance(v, dict) and k in v]) for k in keys}
    if isinstance(first, (list, tuple)):
        limit = max(len(v) for v in values)
        return [x for v in values for x in v][:limit]
    return first


def combine(check_id: str, results: list[CheckResult], n_rows: int, message: Message,
            parameters: Collection[str] = (),
            derive: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> CheckResult:
    """The shards' results of one row-local check as the result on all `n_rows` rows. Details are
    merged (`_merge`) but for those named like one of the check's `parameters` (ngram, max_length...:
    the same in every shard, not counts to sum), which are the first shard's; `derive`, when given,
    then recomputes from the merged counts what cannot be merged (a share: structure.py
    `length_ratio_merged`). The message is the check's own, `message(details, offending rows,
    n_rows, threshold)` on the merged details."""
    errors = [r for r in results if r.status == "error"]
    if errors:
        return errors[0]
    ran = [r for r in results if r.status != "skip"]
    if not ran:
        return results[0]
    offending = tuple(i for r in ran for i in r.offending)
    threshold = ran[0].threshold or 0.0
    metric = len(offending) / n_rows if n_rows else 0.0
    status = "fail" if metric > threshold else "pass"
    details = _merge([r.details for r in ran])
    details.update({k: ran[0].details[k] for k in parameters if k in ran[0].details})
    if derive is not None:
        details = derive(details)
    details["shards"] = len(results)
    return CheckResult(check_id, status, metric, ran[0].threshold, offending,
                       message(details, len(offending), n_rows, threshold), details)


# CheckInputs.derived: this run's row-local results per data file (file sha256 -> check id -> part),
# what `publish` stores with a validated version for its children (prefdata.gate.publishing)
PARTS = "batched.parts"
# details a run adds around a check's own (its time, its shard count): never part of a stored result
_RUN_DETAILS = ("seconds", "shards", "reused_rows", "known_rows")


def reusable(check_id: str) -> bool:
    """A row-local check a sharded run reads the texts for, shard by shard (the costly ones), whose
    verdict on a file depends on the file's rows and the check's parameters alone (no tokenizer or
    other input it `needs`): its result on a file can be stored and taken again for the same file
    (by content) under the same parameters."""
    check = CHECKS[check_id]
    return check.row_local and check.needs_text and not check.needs


def as_part(params: dict[str, Any], rows: int, result: CheckResult) -> dict[str, Any]:
    """A check's result on one file as stored: its parameters (JSON's view of them), its rows, its result."""
    details = {k: v for k, v in result.details.items() if k not in _RUN_DETAILS}
    return {"params": json.loads(json.dumps(params, sort_keys=True, default=str)), "rows": rows,
            "result": {"id": result.id, "status": result.status, "metric": result.metric,
                       "threshold": result.threshold, "offending": list(result.offending),
                       "message": result.message, "details": details}}


def _stored(part: dict[str, Any] | None, params: dict[str, Any]) -> CheckResult | None:
    """A stored part's result, when it was computed under these parameters."""
    if part is None or part.get("params") != json.loads(json.dumps(params, sort_keys=True, default=str)):
        return None
    r = part["result"]
    return CheckResult(r["id"], r["status"], r["metric"], r["threshold"], tuple(r["offending"]), r["message"],
                       dict(r["details"]))


def _shard_by_shard(check_id: str) -> Callable[..., CheckResult]:
    """A row-local check run on each shard's rows, bound as the registry binds it, its results combined.
    A shard whose result the inputs hold already (a growing version's parent's, `inputs.reuse`) is not
    read: its stored result is one of the parts, which `combine` joins as it joins computed ones."""
    check = CHECKS[check_id]
    parameters = tuple(inspect.signature(check.function).parameters)

    def run(inputs: CheckInputs, **params: Any) -> CheckResult:
        shards = inputs.shards
        if any(getattr(inputs, need) is None for need in check.needs):
            # without an input it needs it skips on every shard (registry `needs`: template_fit without a
            # tokenizer): one row hears it say so, instead of every shard read to hear it again
            return check.function(**{**params, **check.bind(replace(inputs, pairs=shards.head(1), lost=None))})
        keys = shards.keys if getattr(shards, "keys", None) else [None] * len(shards.paths)
        reuse = (inputs.reuse or {}) if reusable(check_id) else {}
        parts = inputs.derived.setdefault(PARTS, {})
        results, rows, reused = [], 0, 0
        for k, key in enumerate(keys):
            # rows lost at read go with the last shard: those a check counts (degenerate_pairs) are its rows too
            last = k == len(shards.paths) - 1
            stored = _stored(reuse.get(key, {}).get(check_id), params) if key and not (last and inputs.lost is not None) \
                else None
            if stored is not None:
                n = reuse[key][check_id]["rows"]
                results.append(stored)
                rows, reused = rows + n, reused + n
            else:
                frame = shards.read(k)
                bound = check.bind(replace(inputs, pairs=frame, lost=inputs.lost if last else None))
                results.append(check.function(**{**params, **bound}))  # data over defaults
                lost = bound.get("lost")
                n = frame.height + (lost.height if lost is not None else 0)
                rows += n
                del frame, bound  # before the next shard is read
            if key and reusable(check_id) and results[-1].status in ("pass", "fail"):
                parts.setdefault(key, {})[check_id] = as_part(params, n, results[-1])
        combined = combine(check_id, results, rows, check.merge.message, parameters, check.merge.derive)
        if reused:
            combined.details["reused_rows"] = reused
        return combined

    return run



# -- duplicates over the shards -------------------------------------------------------------------


# CheckInputs.derived: where this run left near_duplicates' values per data file (file sha256 -> a
# scratch file, `near_file`; or, for a file whose values were its parent's, that parent's stored file,
# prefdata.gate.runner StoredGateFile), what `publish` stores with a validated version (`near_artifact`); and in
# CheckInputs.reuse[file sha256] under the same name: a function giving the parent's stored file (its
# bytes, hash checked; None when it no longer has its hash), read only when that file's rows are signed
NEAR_BY_FILE = "batched.near_by_file"


def near_artifact(sha: str) -> str:
    """The gate file of a validated version holding near_duplicates' values of its data file `sha`."""
    return f"near_{sha}.npz"


def near_sha(artifact: str) -> str | None:
    """The data file a `near_artifact` name is of; None for another artifact."""
    sha = artifact[len("near_"):-len(".npz")]
    if artifact.startswith("near_") and artifact.endswith(".npz") and len(sha) == 64 \
            and all(c in "0123456789abcdef" for c in sha):
        return sha
    return None


# CheckInputs.reuse[NEAR_CLUSTERS]: the bytes of the parent's stored clusters (minhash.near_clusters_file,
# hash checked), from which a grown version's near_duplicates starts (`known`): the gate file's name too
NEAR_CLUSTERS = "near_clusters.npz"


def near_clusters(inputs: Any) -> bytes | None:
    """This run's near_duplicates clusters as the gate file publish stores (NEAR_CLUSTERS), when it kept
    them (dedup.KEEP_NEAR) over a stored version's rows; None otherwise."""
    from .dedup import NEAR_FOUND
    from .minhash import near_clusters_file

    found = inputs.derived.get(NEAR_FOUND)
    if found is None or not inputs.part_keys or found[0] is not inputs.pairs:
        return None
    return near_clusters_file(found[1], list(inputs.part_keys), found[2], found[3])


# CheckInputs.reuse[EXACT_COPIES]: the bytes of the parent's stored exact copies (`exact_copies`, hash
# checked), whose rows a grown version's exact_duplicates does not compare again: the gate file's name too
EXACT_COPIES = "exact_copies.npz"


def _copies_meta() -> str:
    return f"exact_duplicates copies {_hasher()}"


def exact_copies(inputs: Any) -> bytes | None:
    """This run's exact_duplicates copies (each row's first copy, by prompt and by pair, compared on their
    texts) as the gate file publish stores (EXACT_COPIES), over a stored version's rows; None otherwise."""
    from .dedup import EXACT_FIRST
    from .minhash import first_rows_file

    found = inputs.derived.get(EXACT_FIRST)
    if found is None or not inputs.part_keys or found[0] is not inputs.pairs:
        return None
    return first_rows_file(_copies_meta(), list(inputs.part_keys), prompt_=found[1], pair_=found[2])


def _verified_copies(inputs: Any) -> tuple[Any, Any]:
    """The parent's exact copies (prompt, pair) as `verified` for _first_occurrence_blocked and
    first_copies: (None, None) when it stored none fit for this version's rows."""
    from .minhash import read_first_rows

    data, shards = (inputs.reuse or {}).get(EXACT_COPIES), inputs.shards
    if data is None or not getattr(shards, "keys", None) or not all(shards.keys):
        return None, None
    try:
        stored = read_first_rows(data, _copies_meta(), list(shards.keys), shards.offsets, "prompt_", "pair_")
    except ValueError:
        return None, None  # compared again: the verdict is the same, only slower
    if stored is None:
        return None, None
    n, found = stored
    return tuple((n, *found[p]) if found[p] is not None else None for p in ("prompt_", "pair_"))


def whole_file_near(inputs: Any) -> dict[str, str]:
    """near_duplicates' values per file of an in-memory run of a version of one data file (file sha256 ->
    scratch file), as a sharded run leaves them (NEAR_BY_FILE): {} otherwise."""
    from .dedup import NEAR_SIGNED

    signed = inputs.derived.get(NEAR_SIGNED)
    if inputs.shards is not None or not inputs.part_keys or len(inputs.part_keys) != 1 or signed is None \
            or signed[0] is not inputs.pairs:
        return {}
    return {inputs.part_keys[0]: signed[1]}


def near_duplicates(inputs: Any, threshold: float, num_perm: int, ngram: int, scope: str, *, max_share: float,
                    seed: int) -> CheckResult:
    """The near-duplicate check over the shards. A version grown from a validated one takes the values
    its parent stored for the files they share (signatures, band keys, sketches, text hashes: what
    signing makes, `NEAR_BY_FILE`) and signs only its new files' rows; and it starts from the parent's
    clusters (NEAR_CLUSTERS), making, screening and verifying only the candidate pairs that reach a new
    text, reading only those rows' texts: the same clusters as a full check, the same result (the
    counts of candidates and verified pairs are this run's). For publish (dedup.KEEP_NEAR), every
    file's values go to scratch files and the clusters to `derived`."""
    import os

    from .dedup import KEEP_NEAR, NEAR_FOUND, _exact_keys, _lsh_split, near_duplicates_result
    from .minhash import (VERIFY_BYTES, _find_near_duplicates, _near_meta, _scratch_dir, near_file,
                          read_near_clusters, read_near_file)
    from .shards import ShardTexts

    columns = ["prompt"] if scope == "prompt" else ["prompt", *RESPONSES]
    shards = inputs.shards
    n = shards.n
    bands, rows = _lsh_split(threshold, num_perm, ngram, None)
    meta = _near_meta(threshold=threshold, num_perm=num_perm, ngram=ngram, scope=scope, seed=seed, bands=bands,
                      rows=rows)
    keys = shards.keys if getattr(shards, "keys", None) else [None] * len(shards.paths)
    reuse = inputs.reuse or {}
    on_block = None
    if scope == "pair":
        prompt_key, pair_key = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint64)

        def on_block(a: int, b: int, parts: list[pl.Series]) -> None:
            prompt_key[a:b], pair_key[a:b] = _exact_keys(parts)

    loaded: dict[int, Any] = {}  # the one file whose stored values are in memory: file index -> values
    reused, reused_files = 0, set()

    def load(k: int) -> tuple[Any, Any] | None:
        """File k's stored values and, for scope pair, its stored exact keys (a reused block is not
        read, so its exact keys come from the parent too): None where either is missing or unfit."""
        entry = reuse.get(keys[k], {}) if keys[k] else {}
        size = int(shards.offsets[k + 1] - shards.offsets[k])
        exact = entry.get(EXACT_KEYS_BY_FILE) if scope == "pair" else None
        if entry.get(NEAR_BY_FILE) is None or (scope == "pair" and (exact is None or len(exact[0]) != size)):
            return None
        data = entry[NEAR_BY_FILE]()
        try:
            values = read_near_file(data, meta) if data is not None else None
        except ValueError:
            values = None  # signed again: the verdict is the same, only slower
        if values is None or values[0].shape != (size,) or values[1].shape != (bands, size) \
                or values[2].shape != (size, num_perm) or values[3].shape != (size,):
            return None
        return values, exact

    def stored(a: int, b: int) -> tuple[np.ndarray, ...] | None:
        nonlocal reused
        k = int(np.searchsorted(shards.offsets, a, side="right") - 1)  # blocks never cross a file
        if k not in loaded:
            loaded.clear()  # the previous file's values go before the next file's are read
            loaded[k] = load(k)
        if loaded[k] is None:
            return None
        (key, band_keys, sketch, screenable), exact = loaded[k]
        reused_files.add(k)  # a file's blocks are all stored or none (`load` is per file)
        s, e = a - int(shards.offsets[k]), b - int(shards.offsets[k])
        if exact is not None:
            prompt_key[a:b], pair_key[a:b] = exact[0][s:e], exact[1][s:e]
        reused += b - a
        return key[s:e], band_keys[:, s:e], sketch[s:e], screenable[s:e]

    by_file = inputs.derived.setdefault(NEAR_BY_FILE, {})

    def on_signed(signed) -> None:
        loaded.clear()
        if not any(keys) or not inputs.derived.get(KEEP_NEAR):
            return
        folder = _scratch_dir()
        for k, sha in enumerate(keys):
            a, b = int(shards.offsets[k]), int(shards.offsets[k + 1])
            if sha and k in reused_files:  # the parent's file as it is: publish links it, nothing is written
                by_file[sha] = reuse[sha][NEAR_BY_FILE]
            elif sha:  # signed in this run, so held whole (minhash.Signed: a grown version's run drops only
                # rows of its parent's stored files)
                s, e = (a, b) if signed.rows is None else np.searchsorted(signed.rows, (a, b))
                by_file[sha] = os.path.join(folder, near_artifact(sha))
                near_file(meta, signed.key[a:b], signed.band_keys[:, s:e], signed.sketch[s:e], signed.screenable[s:e],
                          by_file[sha])

    known = None
    if reuse.get(NEAR_CLUSTERS) is not None and all(keys):
        try:
            known = read_near_clusters(reuse[NEAR_CLUSTERS], meta, list(keys), shards.offsets)
        except ValueError:
            known = None  # clustered again from scratch: the verdict is the same, only slower

    found = _find_near_duplicates(
        ShardTexts(shards, columns), threshold=threshold, num_perm=num_perm, ngram=ngram, seed=seed,
        bands_rows=(bands, rows), n_threads=None, on_block=on_block, verify_bytes=VERIFY_BYTES,
        stored=stored if reuse else None, on_signed=on_signed, known=known)
    if on_block is not None:
        inputs.derived[SHARD_KEYS] = (prompt_key, pair_key)
    if inputs.derived.get(KEEP_NEAR):
        inputs.derived[NEAR_FOUND] = (inputs.pairs, meta, found.cluster, found.exact)
    result = near_duplicates_result(inputs.pairs["id"], found, threshold=threshold, num_perm=num_perm, ngram=ngram,
                                    scope=scope, max_share=max_share)
    if reused:
        result.details["reused_rows"] = reused
    if known is not None:
        result.details["known_rows"] = known[0]  # clustered by the parent: only pairs reaching a new text made
    return result


# CheckInputs.derived: this run's exact-duplicate keys per data file (file sha256 -> (prompt_key, pair_key)),
# what `publish` stores with a validated version (prefdata.gate.publishing, `keys_file`); and in
# CheckInputs.reuse[file sha256] under the same name: the parent's, for the files a grown child shares
EXACT_KEYS_BY_FILE = "batched.exact_keys_by_file"
KEYS_FORMAT = "1"  # bump when _exact_keys or the normaliser changes what a row hashes to


def _hasher() -> str:
    """What made the stored keys: polars' hash is not stable across polars versions, so keys stored by
    another version are computed again rather than compared with this one's."""
    return f"{KEYS_FORMAT}/polars-{pl.__version__}"


def keys_file(keys: dict[str, tuple[np.ndarray, np.ndarray]]) -> bytes:
    """This run's exact keys per file as one Parquet file: rows (file, prompt_key, pair_key), each
    file's rows in order, the hasher in the file's metadata."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(keys)
    table = pa.table({
        "file": pa.array([f for f in files for _ in range(len(keys[f][0]))], pa.string()).dictionary_encode(),
        "prompt_key": pa.array(np.concatenate([keys[f][0] for f in files]) if files else [], pa.uint64()),
        "pair_key": pa.array(np.concatenate([keys[f][1] for f in files]) if files else [], pa.uint64()),
    }).replace_schema_metadata({"prefdata.hasher": _hasher()})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def read_keys_file(data: bytes) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`keys_file`'s keys per file; none when another hasher made them (ValueError: not such a file)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except pa.ArrowException as exc:
        raise ValueError(f"not a Parquet file of keys ({exc})") from None
    if (table.schema.metadata or {}).get(b"prefdata.hasher") != _hasher().encode():
        return {}
    frame = pl.from_arrow(table).with_columns(pl.col("file").cast(pl.String))
    if frame.columns != ["file", "prompt_key", "pair_key"]:
        raise ValueError(f"not a Parquet file of keys (columns {frame.columns})")
    return {str(f): (part["prompt_key"].to_numpy(), part["pair_key"].to_numpy())
            for (f,), part in frame.group_by("file", maintain_order=True)}


def shard_exact_keys(inputs: Any, texts: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """exact_duplicates' (prompt_key, pair_key) of every row, and how many rows' keys were reused. Per
    file: the keys a grown version's parent stored for it (`inputs.reuse`: its texts are not read),
    else near_duplicates' of this run (SHARD_KEYS), else hashed from its texts a block at a time. Each
    file's keys are left in `inputs.derived` for publish to store."""
    from .dedup import _exact_keys

    shards, n = inputs.shards, inputs.shards.n
    derived = inputs.derived.get(SHARD_KEYS)
    reuse = inputs.reuse or {}
    keys = shards.keys if getattr(shards, "keys", None) else [None] * len(shards.paths)
    prompt_key, pair_key = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint64)
    blocks = texts.blocks()
    by_file = inputs.derived.setdefault(EXACT_KEYS_BY_FILE, {})
    reused = 0
    for k, key in enumerate(keys):
        a, b = int(shards.offsets[k]), int(shards.offsets[k + 1])
        stored = reuse.get(key, {}).get(EXACT_KEYS_BY_FILE) if key else None
        if stored is not None and len(stored[0]) == len(stored[1]) == b - a:
            prompt_key[a:b], pair_key[a:b] = stored
            reused += b - a
        elif derived is not None:
            prompt_key[a:b], pair_key[a:b] = derived[0][a:b], derived[1][a:b]
        else:
            for x, y in (block for block in blocks if a <= block[0] < b):
                prompt_key[x:y], pair_key[x:y] = _exact_keys(texts.parts((x, y)))
        if key:
            by_file[key] = (prompt_key[a:b], pair_key[a:b])
    return prompt_key, pair_key, reused


def whole_file_keys(inputs: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The exact keys per file of an in-memory run of a version of one data file (what
    dedup.check_exact_duplicates grouped by, EXACT_KEYS_USED), as a sharded run leaves them: {} otherwise."""
    from .dedup import EXACT_KEYS_USED

    used = inputs.derived.get(EXACT_KEYS_USED)
    if inputs.shards is not None or not inputs.part_keys or len(inputs.part_keys) != 1 or used is None \
            or used[0] is not inputs.pairs:
        return {}
    return {inputs.part_keys[0]: (used[1], used[2])}


def exact_duplicates(inputs: Any, *, max_share: float, fail_on_repeated_prompts: bool) -> CheckResult:
    from .dedup import EXACT_FIRST, _first_occurrence_blocked, _same_texts, _Texts, exact_duplicates_result
    from .shards import ShardTexts

    pair_texts = ShardTexts(inputs.shards, ["prompt", *RESPONSES])
    prompt_key, pair_key, reused = shard_exact_keys(inputs, pair_texts)
    # a grown version's parent compared its own rows' copies: only the new rows' are compared here
    prompt_verified, pair_verified = _verified_copies(inputs)
    # the prompts are in the thin frame: their copies are found in memory, as the in-memory check does
    prompts = _Texts([inputs.pairs["prompt"]])
    prompt_first = _first_occurrence_blocked(prompt_key, _same_texts(prompts), lambda: prompts.parts((0, prompts.n)),
                                             prompt_verified)
    pair_first = pair_texts.first_copies(pair_key, pair_verified)  # reads only the rows whose keys repeat
    inputs.derived[EXACT_FIRST] = (inputs.pairs, prompt_first, pair_first)
    result = exact_duplicates_result(inputs.pairs["id"], prompt_first, pair_first, max_share=max_share,
                                     fail_on_repeated_prompts=fail_on_repeated_prompts)
    if reused:
        result.details["reused_rows"] = reused
    return result


def per_shard() -> list[str]:
    """The checks run shard by shard: row-local ones that need the responses' text and run on shards."""
    return [c for c, check in CHECKS.items() if check.row_local and check.needs_text and check.runs_on(SHARDS)]


def stand_ins() -> dict[str, Callable[..., CheckResult]]:
    """check id -> its function over the shards, called with the CheckInputs and the check's parameters:
    every check the registry says needs the responses' text (the thin frame lacks them) and runs on
    shards: a row-local one shard by shard, another by the code its entry names (`shard_engine`)."""
    return {c: _shard_by_shard(c) if check.row_local else check.code(check.shard_engine)
            for c, check in CHECKS.items() if check.needs_text and check.runs_on(SHARDS)}
