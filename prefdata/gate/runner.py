"""The checklist as a build gate: gather the inputs a check run needs, run it, write the reports.

Shared by `prefdata check` and `prefdata publish` (and the validate flow), so all three judge a
dataset the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.base.files import read_side_file
from prefdata.data.readers import read_rows

PROMPT_COLUMNS = ("prompt", "text", "question", "instruction", "turns")
# A .txt of reference prompts is read whole: a million prompts of 256 bytes. A distribution test gains
# nothing from more; a bigger sample belongs in a .jsonl or .parquet table, which is read as a stream.
MAX_PROMPTS_TXT_BYTES = 256 << 20


@dataclass
class GateOutcome:
    passed: bool
    results: list
    report: dict[str, Any]
    reports: dict[str, Path] = field(default_factory=dict)


def read_prompts(path: str | Path) -> pl.Series:
    """Reference prompts: a .txt file (one per line) or any table with a prompt-like column."""
    path = Path(path)
    if path.suffix.lower() == ".txt":
        lines = read_side_file(path, "--reference-prompts", MAX_PROMPTS_TXT_BYTES).splitlines()
        prompts = [line for line in lines if line.strip()]
    else:
        rows = [r.data for r in read_rows(path) if r.data is not None]
        column = next((c for c in PROMPT_COLUMNS if rows and c in rows[0]), None)
        if column is None:
            raise UnusableInput(f"{path}: reference prompts need a column named one of {', '.join(PROMPT_COLUMNS)}")
        prompts = [r[column][0] if isinstance(r.get(column), list) and r[column] else r.get(column) for r in rows]
        prompts = [p for p in prompts if isinstance(p, str) and p.strip()]
    if not prompts:
        raise UnusableInput(f"{path}: no reference prompts in it")
    return pl.Series("prompt", prompts, dtype=pl.String)


# A benchmark item's key: the first of these columns a row has, else its row number.
BENCHMARK_KEYS = ("key", "id", "question_id", "prompt_id", "idx")
# A folder given as a benchmark holds one data file: these names (README, LICENSE...) are not it.
NOT_BENCHMARK_DATA = ("readme", "license", "licence", "notice", "citation")


def read_benchmarks(paths: list[str] | tuple[str, ...]) -> dict[str, pl.DataFrame]:
    """`--benchmark FILE` (repeatable) for decontamination: name -> its items (`item`, `prompt`); a
    name met twice gets -2, -3, ..."""
    found: dict[str, pl.DataFrame] = {}
    for path in paths:
        name, items = read_benchmark(path)
        unique, k = name, 1
        while unique in found:
            k += 1
            unique = f"{name}-{k}"
        found[unique] = items
    return found


def read_benchmark(path: str | Path) -> tuple[str, pl.DataFrame]:
    """A benchmark's prompts, named: a .txt (one prompt a line), or a table `import` reads (.jsonl,
    .json, .parquet, .csv; compressed too) with a prompt-like column (PROMPT_COLUMNS; a list of turns,
    or of {role, content} messages, gives an item per user turn), or a folder holding one such file
    (../shared/data/ifeval/). Its name is the folder's, else the file's name up to its first dot; an
    item's key is its key, id or question_id column's, else its row number. A row it cannot read is
    refused, never left out (a benchmark checked in part would pass what it does not check)."""
    path = Path(path)
    if not path.exists():
        raise UnusableInput(f"--benchmark {path}: no such file or folder")
    if path.is_dir():
        name = path.resolve().name
        files = sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith(".")
                       and not f.name.lower().startswith(NOT_BENCHMARK_DATA))
        if len(files) != 1:
            raise UnusableInput(f"--benchmark {path}: a folder must hold one data file (besides README and LICENSE); "
                                f"it holds {len(files)}: name the file instead")
        path = files[0]
    else:
        name = path.name.split(".")[0]
    if path.suffix.lower() == ".txt":
        lines = read_side_file(path, "--benchmark", MAX_PROMPTS_TXT_BYTES).splitlines()
        items = [(str(k), line) for k, line in enumerate(lines, 1) if line.strip()]
    else:
        items = []
        for row in read_rows(path):
            if row.data is None:
                raise UnusableInput(f"--benchmark {path}: row {row.number} cannot be read ({row.error}); fix or "
                                    "remove it")
            column = next((c for c in PROMPT_COLUMNS if c in row.data), None)
            if column is None:
                raise UnusableInput(f"--benchmark {path}: row {row.number} has no column named one of "
                                    f"{', '.join(PROMPT_COLUMNS)}")
            key = next((str(row.data[c]) for c in BENCHMARK_KEYS if row.data.get(c) is not None), str(row.number))
            turns = _user_turns(row.data[column])
            items += [(key if len(turns) == 1 else f"{key}.{t}", text) for t, text in enumerate(turns, 1)]
    if not items:
        raise UnusableInput(f"--benchmark {path}: no prompts in it")
    keys, prompts = zip(*items)
    return name, pl.DataFrame({"item": list(keys), "prompt": list(prompts)},
                              schema={"item": pl.String, "prompt": pl.String})


def _user_turns(value: Any) -> list[str]:
    """A prompt cell's user text: the text, each text of a list of turns, or the user messages' content."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        texts = [v.get("content") if isinstance(v, dict) and v.get("role", "user") == "user" else v for v in value]
        return [t for t in texts if isinstance(t, str) and t.strip()]
    return []


def read_text(path: Path | None, what: str = "--card") -> str | None:
    """A side file's text (the card): a regular file of bounded size, never /dev/zero or a FIFO."""
    if path is None:
        return None
    return read_side_file(path, what)


def load_inputs(
    data: str,
    *,
    votes: Path | None = None,
    eval_data: str | None = None,
    reference_prompts: Path | None = None,
    card: Path | None = None,
    scorer: str | None = None,
    store: str | None = None,
    docs_dir: Path | None = None,
    batch_rows: int | None = None,
    eval_store: str | None = None,
    stored: bool = False,
    eval_stored: bool = False,
    benchmarks: list[str] | tuple[str, ...] | None = None,
    full: bool = False,
    parent_store: str | None = None,
):
    """DATA is a file `prefdata import` reads, or a store version NAME@VERSION. A Parquet file of
    more than `batch_rows` rows (default columnar.BATCH_ROWS), or a version written in shards, is
    checked shard by shard (checks/batched.py). `eval_store`: where an EVAL version is (default: `store`).
    `stored` (`eval_stored`): DATA (EVAL) is a version of the store, read from it only, never from a file
    of that name in the working folder (publish and validate judge versions, not files).
    A version grown from a validated parent (`import --onto`) takes the row-local results the parent's
    publish stored for the files they share (`reuse_of`), unless `full`; `parent_store`: where the
    parent is (default: `store`; publish reads DATA from a private copy that holds DATA alone)."""
    from prefdata.checks.checklist import CheckInputs

    info: dict[str, Any] = {"data": data}
    read: dict[str, Any] = {}
    benchmark_sets = read_benchmarks(benchmarks) if benchmarks else None  # a bad --benchmark fails before the import
    pairs, comparisons, vote_frame, sft, card_text, lineage = _load_dataset(
        data, votes, store, info, read, batch_rows, stored=stored, reuse=not full, parent_store=parent_store)
    eval_pairs = None
    if eval_data is not None:
        eval_info: dict[str, Any] = {}
        eval_pairs = _load_dataset(eval_data, None, eval_store or store, eval_info, stored=eval_stored)[0]
        info["eval"] = eval_info.get("version") or eval_data
    if benchmarks:  # what decontamination was checked against, in the report (not in the checklist: an input)
        info["benchmarks"] = [str(b) for b in benchmarks]
    inputs = CheckInputs(
        pairs=pairs, comparisons=comparisons, votes=vote_frame, eval_pairs=eval_pairs,
        reference_prompts=read_prompts(reference_prompts) if reference_prompts else None,
        benchmarks=benchmark_sets,
        card_text=read_text(card) if card is not None else card_text, sft=sft, lineage=lineage, docs_dir=docs_dir,
        lost=read.get("lost"), rows_read=read.get("rows"), shards=read.get("shards"), part_keys=read.get("part_keys"),
    )
    inputs.reuse = read.get("reuse")
    if read.get("reuse_note"):
        info["reuse"] = read["reuse_note"]
    if scorer:
        from prefdata.base.specs import backend
        from prefdata.gate.scoring import parse_spec, verdicts_for

        spec = parse_spec(scorer, notice=lambda _m: None)
        if inputs.shards is not None and backend(spec.kind).reads_pairs:  # the shards' texts are never all in memory
            raise UnusableInput(f"--scorer {scorer}: a dataset of {inputs.shards.n} pairs is checked shard by shard, "
                                "where only a scorer that reads no text (verdicts:FILE) is supported; score a sample "
                                "and pass its verdicts")

        inputs.verdicts = verdicts_for(scorer, pairs, comparisons)
        info["scorer"] = scorer
    return inputs, info


def names_a_version(text: str) -> bool:
    """Whether `text` is written as a store version (NAME, NAME@VERSION, NAME@latest); a path with a
    folder in it (`./NAME@VERSION`, `data/x.jsonl`) never is."""
    from prefdata.data.store import parse_ref

    try:
        parse_ref(text)
    except Exception:  # noqa: BLE001 - UnusableInput: not a name
        return False
    return True


def file_shadows_ref(data: str, store: str | None) -> str | None:
    """For `check DATA`, which reads a file of that name first: the one line saying so when DATA is
    both a file here and a version in the store, and how to name each; else None."""
    if not Path(data).exists() or not names_a_version(data):
        return None
    from prefdata.data.store import Store

    try:
        v = Store(store).get(data)
    except Exception:  # noqa: BLE001 - no such version (or no usable store): nothing is shadowed
        return None
    return (f"{data} is both a file here and the store version {v.ref}: checking the file, which ./{data} names "
            "without doubt (to check the version, run check from another folder; publish, validate and train read "
            "only the store)")


def _load_dataset(data: str, votes: Path | None, store: str | None, info: dict[str, Any],
                  read: dict[str, Any] | None = None, batch_rows: int | None = None, stored: bool = False,
                  reuse: bool = False, parent_store: str | None = None):
    """The tables of DATA (a file or a store version) for the checks, and what they need to know of
    it in `info` and `read`; with `reuse`, for a version under check (`read`), what its validated parent
    (in `parent_store`, default `store`) stored for it too (`reuse_of`: read["reuse"], read["reuse_note"])."""
    if not stored and Path(data).exists():
        from prefdata.data.importer import import_file, import_file_to_shards

        if read is not None:  # the file under check: a big one is imported into temporary shards
            result, shard_paths = import_file_to_shards(data, votes=votes, batch_rows=batch_rows)
            if shard_paths is not None:
                from prefdata.checks.shards import Shards

                shards = Shards(shard_paths)
                info["import"] = result.summary()
                info["left_out"] = _left_out(result, votes)
                read.update(lost=lost_at_read(result, votes), rows=result.read + result.votes_read, shards=shards)
                return _thin(shards), result.comparisons, result.votes, None, None, {"sources": result.sources}
        else:
            result = import_file(data, votes=votes)
        info["import"] = result.summary()
        info["left_out"] = _left_out(result, votes)
        if read is not None:  # the rows a file loses at read count against the gate (checks/checklist.py)
            read.update(lost=lost_at_read(result, votes), rows=result.read + result.votes_read)
        return result.pairs, result.comparisons, result.votes, None, None, {"sources": result.sources}
    if not stored and "@" not in data and ("/" in data or "." in Path(data).suffix):
        raise UnusableInput(f"{data}: no such file (and not a store version NAME@VERSION)")
    from prefdata.data.store import Store

    st = Store(store)
    v = st.get(data)
    info["version"] = v.ref
    configs = v.manifest["counts"]["rows"]

    def table(config: str):
        return st.load(v.ref, config) if config in configs else None

    if read is not None:
        read["part_keys"] = [v.manifest["files"][rel]["sha256"] for rel in st.table_files(v, "default")]
        if reuse:
            read["reuse"], read["reuse_note"] = reuse_of(parent_store or store, v.manifest.get("lineage"))
    shards = _version_shards(st, v, "default") if read is not None else None
    if shards is not None:  # a version written in shards (a big import) is checked shard by shard
        from prefdata.checks.batched import THIN_ARTIFACT, read_thin_file, thin_sft

        read["shards"] = shards
        sft_shards = _version_shards(st, v, "sft")
        made = read_thin_file(read["reuse"][THIN_ARTIFACT]) if THIN_ARTIFACT in (read.get("reuse") or {}) else None
        pairs = _thin(shards, stored=made)
        sft = _thin(sft_shards, thin_sft) if sft_shards is not None else table("sft")
    else:
        pairs, sft = st.load(v.ref), table("sft")
    vote_frame = table("votes")
    if votes is not None:  # a label audit's votes (`argilla pull` of `argilla push NAME@VERSION`) replace its own
        from prefdata.argilla.audit import read_audit_votes

        vote_frame = read_audit_votes(votes, pairs["id"])
        info["votes"] = {"path": str(votes), "votes": vote_frame.height, "pairs": vote_frame["pair_id"].n_unique()}
    return (pairs, table("comparisons"), vote_frame, sft, st.read_text(v.ref, "README.md"),
            v.manifest.get("lineage"))


def _version_shards(st, v, config: str):
    """The Parquet shards of a version's table when it was written in several batches (a big import:
    `<split>-<k>-of-<n>.parquet` with n > 1), else None."""
    import re

    from prefdata.checks.shards import Shards

    files = st.table_files(v, config)
    batches = [re.search(r"-of-(\d+)\.parquet$", rel) for rel in files]
    if not any(found and int(found[1]) > 1 for found in batches):
        return None
    return Shards([st.file_path(v, rel) for rel in files], fs=None if st.local else st.fs,
                  keys=[v.manifest["files"][rel]["sha256"] for rel in files])


ROW_LOCAL_ARTIFACT = "row_local.json"  # what publish stores with a validated version for its children
EXACT_KEYS_ARTIFACT = "exact_keys.parquet"  # and exact_duplicates' keys per data file (checks/batched.py)


def reuse_of(store: str | None, lineage: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """What a version's parent stored when it was validated, per data file (file sha256 -> check id
    -> {params, rows, result}; -> EXACT_KEYS_BY_FILE -> exact_duplicates' keys; -> NEAR_BY_FILE -> a
    function reading near_duplicates' values, checked here and read when the check signs that file's
    rows, as they are large; and under NEAR_CLUSTERS, EXACT_COPIES and THIN_ARTIFACT, not files:
    near_duplicates' clusters, exact_duplicates' copies and what thinning made of the responses, over
    all the parent's rows), and a line for
    the report when it had some that cannot be used. Only a validated parent whose signature holds,
    and stored files that have the hashes its signed report gives: anything else (one file failing
    is enough) is computed again (the verdict is the same, only slower)."""
    parent_ref = (lineage or {}).get("parent")
    if not parent_ref:
        return None, None
    from prefdata.checks.batched import (EXACT_COPIES, EXACT_KEYS_BY_FILE, NEAR_BY_FILE, NEAR_CLUSTERS, THIN_ARTIFACT,
                                         near_sha, read_keys_file)
    from prefdata.data.store import DamagedFile, Store

    st = Store(store)
    try:
        parent = st.get(parent_ref)
    except UnusableInput:
        return None, None  # a parent in another store (or gone): nothing to take
    report = parent.manifest.get("check_report") or {}
    artifacts = report.get("artifacts") or {}
    if parent.status != "validated" or not artifacts:
        return None, None
    problems = st.status_problems(parent.manifest)
    if problems:
        return None, f"{parent.ref}'s stored results were not used ({problems[0]}): every row checked"
    reuse: dict[str, Any] = {}
    try:
        if ROW_LOCAL_ARTIFACT in artifacts:
            reuse = json.loads(st.read_gate_file(parent, ROW_LOCAL_ARTIFACT, artifacts[ROW_LOCAL_ARTIFACT]))["parts"]
        if EXACT_KEYS_ARTIFACT in artifacts:
            keys = read_keys_file(st.read_gate_file(parent, EXACT_KEYS_ARTIFACT, artifacts[EXACT_KEYS_ARTIFACT]))
            for sha, file_keys in keys.items():
                reuse.setdefault(sha, {})[EXACT_KEYS_BY_FILE] = file_keys
        for name, digest in sorted(artifacts.items()):
            sha = near_sha(name)
            if sha is not None:
                # its hash checked now, so that a damaged one is this one line and a full check, as for the
                # others; read again (checked again) when the check signs that file's rows
                st.read_gate_file(parent, name, digest)
                reuse.setdefault(sha, {})[NEAR_BY_FILE] = StoredGateFile(st, parent, name, digest)
        if NEAR_CLUSTERS in artifacts:  # its clusters: where the child's near_duplicates starts
            reuse[NEAR_CLUSTERS] = st.read_gate_file(parent, NEAR_CLUSTERS, artifacts[NEAR_CLUSTERS])
        if EXACT_COPIES in artifacts:  # its exact copies, compared: the child compares only its new rows'
            reuse[EXACT_COPIES] = st.read_gate_file(parent, EXACT_COPIES, artifacts[EXACT_COPIES])
        if THIN_ARTIFACT in artifacts:  # what thinning made of its files' responses: not read again
            reuse[THIN_ARTIFACT] = st.read_gate_file(parent, THIN_ARTIFACT, artifacts[THIN_ARTIFACT])
    except (DamagedFile, UnusableInput, ValueError, KeyError, TypeError) as exc:
        return None, f"{parent.ref}'s stored results were not used ({exc}): every row checked"
    return reuse or None, None


class StoredGateFile:
    """One of a validated parent's gate files, read when wanted: calling it gives its bytes when it still
    has its hash, else None (the check then computes what it held again: the verdict is the same, only
    slower). A child whose values for a shared file are these, unchanged, is published with a link to
    this file (`Store.link_gate_file`) rather than a copy written again."""

    def __init__(self, st, parent, name: str, digest: str):
        self.store, self.version, self.name, self.digest = st, parent, name, digest

    def __call__(self) -> bytes | None:
        from prefdata.data.store import DamagedFile

        try:
            return self.store.read_gate_file(self.version, self.name, self.digest)
        except (DamagedFile, UnusableInput):
            return None


def _thin(shards, shape=None, stored=None):
    from prefdata.checks.batched import thin, thin_frame

    return thin_frame(shards, shape or thin, stored)


def lost_at_read(result, votes: Path | None = None) -> pl.DataFrame:
    """The rows an import left out (its quarantine), for the checks: `id` is the row's own id (`id`,
    or `idx`) when it had one that no kept row uses, else FILE:ROW (the file's name and the row
    number its quarantine entry gives; always so for --votes rows); `reason` is the quarantine's."""
    kept = set(result.pairs["id"].to_list())
    if result.comparisons is not None:
        kept |= set(result.comparisons["id"].to_list())
    votes_file = str(Path(votes)) if votes is not None else None
    ids, reasons = [], []
    for q in result.quarantine:
        raw = q.get("raw")
        own = raw.get("id", raw.get("idx")) if isinstance(raw, dict) and q["file"] != votes_file else None
        own = None if own is None or str(own).strip() == "" or str(own) in kept else str(own)
        ids.append(own or f"{Path(q['file']).name}:{q['row']}")
        reasons.append(q["reason"])
    return pl.DataFrame({"id": ids, "reason": reasons}, schema={"id": pl.String, "reason": pl.String})


def _left_out(result, votes: Path | None) -> dict[str, dict[str, int]]:
    """Quarantine reasons counted apart for the data rows and the --votes rows (the terminal notes)."""
    votes_file = str(Path(votes)) if votes is not None else None
    out: dict[str, dict[str, int]] = {"rows": {}, "votes": {}}
    for q in result.quarantine:
        counts = out["votes" if q["file"] == votes_file else "rows"]
        counts[q["reason"]] = counts.get(q["reason"], 0) + 1
    return out


def plots_for(inputs, results) -> dict[str, Any]:
    from prefdata.checks.structure import DEFAULT_MAX_LENGTH_RATIO, length_ratios

    by_id = {r.id: r for r in results}
    ratios = length_ratios(inputs.pairs).to_numpy()
    plots: dict[str, Any] = {"length_ratios": ratios[ratios < float("inf")].tolist()}
    if "length_ratio" in by_id:
        plots["max_length_ratio"] = by_id["length_ratio"].details.get("max_ratio", DEFAULT_MAX_LENGTH_RATIO)
    if "agreement" in by_id and by_id["agreement"].details.get("majority_agreement"):
        plots["annotator_agreement"] = by_id["agreement"].details["majority_agreement"]
    if "agreement" in by_id and by_id["agreement"].details.get("annotators"):
        plots["annotator_quality"] = {a["annotator"]: a["quality"] for a in by_id["agreement"].details["annotators"]}
    if "category_coverage" in by_id and by_id["category_coverage"].details.get("share"):
        plots["category_shares"] = {k: v for k, v in by_id["category_coverage"].details["share"].items() if k != "other"}
        plots["min_category_share"] = by_id["category_coverage"].threshold
    plots["gx_docs"] = inputs.docs_dir is not None and (inputs.docs_dir / "index.html").exists()
    return plots


def _example_pairs(inputs, results):
    """The pairs report.html shows rows of: the checked frame, or for a batched run (whose frame has
    no responses) the rows the report shows, read back from the shards."""
    if inputs.shards is None:
        return inputs.pairs
    from prefdata.gate.report import PAIR_FIELDS, example_ids

    wanted = pl.Series(sorted(example_ids(results)), dtype=pl.String).implode()
    rows = inputs.pairs.select(pl.arg_where(pl.col("id").cast(pl.String).is_in(wanted))).to_series().to_numpy()
    return inputs.shards.gather(rows, ["id", *PAIR_FIELDS])


def run_gate(inputs, config: dict[str, Any], *, strict: bool = False, report_dir: Path | None = None,
             title: str = "prefdata checklist", dask: str | None = None) -> GateOutcome:
    """The checklist on `inputs`, its verdict and reports. `dask` (local:N or a scheduler's address):
    the checks that read every row run there (prefdata.checks.distributed), with the same results."""
    from prefdata.checks.checklist import gate, run_checklist, strictly
    from prefdata.gate.report import report_json, write_reports

    if dask is None:
        results = run_checklist(inputs, config)
    else:
        from prefdata.checks.checklist import run_checklist_on_dask
        from prefdata.checks.distributed import connect

        with connect(dask):  # the cluster is up only while the checks run
            results = run_checklist_on_dask(inputs, config)
    if strict or config.get("strict"):
        results = strictly(results)
    passed = gate(results)
    report = report_json(results, passed, report_dir)  # names the complete offending lists written below
    written = (write_reports(results, report_dir, plots_for(inputs, results), title,
                             pairs=_example_pairs(inputs, results))
               if report_dir else {})  # the pairs: report.html shows failing checks' example pairs
    return GateOutcome(passed, results, report, written)
