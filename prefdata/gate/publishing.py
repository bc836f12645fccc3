"""Publishing a stored version: the checklist gate on it, then its status (validated or rejected).

The one path `prefdata publish` and the validate and publish flows take (flows/gate.py wraps these
functions in Prefect tasks, the CLI prints what they return), so a version is judged, reported and
marked the same way whoever publishes it. No Prefect here.
"""

from __future__ import annotations

import json

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from prefdata.base.errors import GateFailed, ways_out

REPORTS_ROOT = Path(".prefdata") / "reports"


def default_report_dir(name: str, version: str) -> Path:
    """Where a version's reports go when no folder is given: .prefdata/reports/NAME-VERSION."""
    return REPORTS_ROOT / f"{name}-{version}"


@dataclass
class Validation:
    """A checklist run on a stored version: the gate's outcome and the report stored with a status."""

    dataset: str  # NAME@VERSION
    outcome: Any  # prefdata.gate.runner.GateOutcome
    report: dict[str, Any]  # the gate's report, with the config, strictness and inputs that made it
    report_dir: Path  # absolute: the report names files in it, and is read from anywhere
    # the row-local checks' results per data file (checks/batched.py PARTS), which publish stores with
    # a validated version so that a version grown from it checks only its new files
    parts: dict[str, Any] = field(default_factory=dict)
    # exact_duplicates' keys per data file (checks/batched.py EXACT_KEYS_BY_FILE), stored likewise
    keys: dict[str, Any] = field(default_factory=dict)
    # near_duplicates' values per data file: file sha256 -> the scratch file this run left them in
    # (checks/batched.py NEAR_BY_FILE; ~335 bytes a row, so on disk, not in memory), stored likewise;
    # or the parent's stored file (runner.StoredGateFile) where they were its values: linked, not copied
    near: dict[str, Any] = field(default_factory=dict)
    # and its clusters over the version's rows (checks/batched.py NEAR_CLUSTERS), where a child starts
    clusters: bytes | None = None
    # exact_duplicates' copies, compared on their texts (checks/batched.py EXACT_COPIES): a child compares
    # only its new rows'
    copies: bytes | None = None
    # what thinning made of the responses, per data file (checks/batched.py THIN_ARTIFACT): a child of a
    # version checked in shards reads only its parent's files' other columns
    thin: bytes | None = None

    @property
    def passed(self) -> bool:
        return self.outcome.passed

    @property
    def failing(self) -> list[str]:
        return [r.id for r in self.outcome.results if r.status in ("fail", "error")]

    def as_dict(self) -> dict[str, Any]:
        """Plain data (a flow's result): dataset, passed, report, report_dir, reports."""
        return {"dataset": self.dataset, "passed": self.passed, "report": self.report, "report_dir": str(self.report_dir),
                "reports": {k: str(p) for k, p in self.outcome.reports.items()}}


@dataclass
class Publication:
    dataset: str  # NAME@VERSION
    status: str  # "validated" (a refused version raises GateFailed)
    validation: Validation | None  # None: it was validated already, nothing ran


def checklist_of(store, version, config: str | Path | None) -> tuple[dict[str, Any], str]:
    """The checklist to run on a stored version, and where it came from: `config` when given; else the
    one its signed report records it was validated (or rejected) with, so a version is checked again
    as it was published (only a status whose signature holds); else the default."""
    from prefdata.checks.checklist import load_config

    if config is not None:
        return load_config(config), str(config)
    report = version.manifest.get("check_report") or {}
    signed = version.status in ("validated", "rejected") and not store.status_problems(version.manifest)
    if signed and isinstance(report.get("config"), dict):
        source = report.get("config_source") or "its report"
        return (load_config(recorded=report["config"], where=f"{version.ref}'s recorded checklist"),
                f"as {version.status} ({source})")
    return load_config(None), "default"


def validate_version(
    store,
    ref: str,
    *,
    config: str | Path | None = None,
    strict: bool = False,
    report_dir: str | Path | None = None,
    scorer: str | None = None,
    eval_data: str | None = None,
    reference_prompts: str | Path | None = None,
    benchmarks: list[str] | None = None,
    title: str = "validate",
    read_from=None,
    dask: str | None = None,
    full: bool = False,
    keep: bool = False,
) -> Validation:
    """Run the checklist on a stored version and write its reports; the status is left as it is.
    `read_from`: a Store holding the version's bytes to check (a `pinned` copy), whose manifest is the
    one checked. REF, and an --eval written as NAME or NAME@VERSION, are versions of the store, never
    files of that name in the working folder (an eval file is named by a path: ./FILE). The --eval
    version is pinned as the version is: its files checked against its manifest as they are copied,
    and the copy read. `dask`: run_gate's (the workers must reach the store's files). `full`: check
    every row, never taking a growing version's parent's stored results (load_inputs). `keep`: leave what
    the checks made for a grown version to reuse (near_duplicates' values: large, so only when stored)."""
    from prefdata.gate.runner import load_inputs, names_a_version, run_gate

    v = (read_from or store).get(ref)
    folder = Path(report_dir or default_report_dir(v.name, v.version)).resolve()
    checklist, config_source = checklist_of(store, v, config)
    with ExitStack() as stack:
        eval_store, eval_stored = None, False
        if eval_data is not None and names_a_version(eval_data):
            eval_copy, ev = stack.enter_context(_pinned_eval(store, eval_data))
            eval_data, eval_store, eval_stored = ev.ref, eval_copy.url, True
        inputs, info = load_inputs(v.ref, eval_data=eval_data, scorer=scorer, store=(read_from or store).url,
                                   eval_store=eval_store, stored=True, eval_stored=eval_stored,
                                   reference_prompts=Path(reference_prompts) if reference_prompts else None,
                                   benchmarks=benchmarks, docs_dir=folder / "gx", full=full, parent_store=store.url)
    if keep:
        from prefdata.checks.dedup import KEEP_NEAR

        inputs.derived[KEEP_NEAR] = True
    outcome = run_gate(inputs, checklist, strict=strict, report_dir=folder, title=f"{title} {v.ref}", dask=dask)
    report = {**outcome.report, "config": checklist, "config_source": config_source,
              "strict": strict or bool(checklist.get("strict")), "input": info}
    if dask is not None:
        report["engine"] = f"dask {dask}"
    from prefdata.checks.batched import (EXACT_KEYS_BY_FILE, NEAR_BY_FILE, PARTS, exact_copies, near_clusters,
                                         thin_file, whole_file_keys, whole_file_near)
    from prefdata.checks.checklist import whole_file_parts

    whole_file_parts(inputs, outcome.results, checklist)
    return Validation(v.ref, outcome, report, folder, inputs.derived.get(PARTS) or {},
                      inputs.derived.get(EXACT_KEYS_BY_FILE) or whole_file_keys(inputs),
                      inputs.derived.get(NEAR_BY_FILE) or whole_file_near(inputs), near_clusters(inputs),
                      exact_copies(inputs), thin_file(inputs) if keep else None)


@contextmanager
def _pinned_eval(store, ref: str):
    """store.pinned for an --eval version: a draft from before creation signatures is fine there (what
    is read of an eval set is its files, which its version id binds). An eval named as a version that
    the store lacks, while a file of that name is here, says how to name the file."""
    from prefdata.base.errors import UnusableInput

    try:
        store.get(ref)
    except UnusableInput as exc:
        if not Path(ref).exists():
            raise
        raise UnusableInput(f"--eval {ref}: {exc}; a file of that name is here, but --eval reads NAME@VERSION from the "
                            f"store only: write ./{ref} to use the file") from None
    with store.pinned(ref, unsigned_draft_ok=True) as pinned:
        yield pinned


def publish_version(store, ref: str, *, show: Callable[[Validation], None] | None = None, **settings) -> Publication:
    """Mark a version validated only when its files verify and the checklist passes; else mark it
    rejected and raise GateFailed (exit 1). A version validated already is left alone (nothing runs).

    `settings` are validate_version's (config, strict, report_dir, scorer, eval_data, reference_prompts,
    benchmarks);
    `show` sees the checklist's outcome before the status is set (the CLI prints it, a flow makes
    artifacts of it), so a refusal is reported in full before its error.
    """
    # The checklist reads a private copy made in the same read that checks each file's hash against
    # the manifest, and the signature then covers that manifest: the bytes signed are the bytes
    # checked, whatever a writer of the store swaps in meanwhile.
    with store.pinned(ref) as (copy, v):
        if v.status == "validated":
            return Publication(v.ref, "validated", None)
        store.check_can_set_status(v.name)  # a status that cannot be written fails now, not after the checklist
        validation = validate_version(store, v.ref, title="publish", read_from=copy, keep=True, **settings)
        if show is not None:
            show(validation)
        if not validation.passed:
            store.set_status(v.ref, "rejected", report=validation.report, checked=v)
            raise GateFailed(f"{v.ref} not published: the checklist failed ({', '.join(validation.failing)}); marked "
                             f"rejected. Ways out: {ways_out(v.ref, validation.failing)}")
        report = validation.report
        # for the versions grown from this one: each artifact bound by its hash in the signed report
        from prefdata.gate.runner import EXACT_KEYS_ARTIFACT, ROW_LOCAL_ARTIFACT, StoredGateFile

        artifacts = {}
        if validation.parts:
            stored = json.dumps({"format": 1, "parts": validation.parts}, sort_keys=True).encode()
            artifacts[ROW_LOCAL_ARTIFACT] = store.write_gate_file(v, ROW_LOCAL_ARTIFACT, stored)
        if validation.keys:
            from prefdata.checks.batched import keys_file

            artifacts[EXACT_KEYS_ARTIFACT] = store.write_gate_file(v, EXACT_KEYS_ARTIFACT, keys_file(validation.keys))
        if validation.near:
            from prefdata.checks.batched import near_artifact

            for sha, made in sorted(validation.near.items()):  # one file a data file: a child reads one at a time
                name = near_artifact(sha)
                if isinstance(made, StoredGateFile):  # the parent's values for a file both hold: linked
                    artifacts[name] = store.link_gate_file(v, name, made.version, made.name, made.digest)
                else:
                    artifacts[name] = store.write_gate_file(v, name, Path(made).read_bytes())
        if validation.clusters is not None:
            from prefdata.checks.batched import NEAR_CLUSTERS

            artifacts[NEAR_CLUSTERS] = store.write_gate_file(v, NEAR_CLUSTERS, validation.clusters)
        if validation.copies is not None:
            from prefdata.checks.batched import EXACT_COPIES

            artifacts[EXACT_COPIES] = store.write_gate_file(v, EXACT_COPIES, validation.copies)
        if validation.thin is not None:
            from prefdata.checks.batched import THIN_ARTIFACT

            artifacts[THIN_ARTIFACT] = store.write_gate_file(v, THIN_ARTIFACT, validation.thin)
        if artifacts:
            report = {**report, "artifacts": artifacts}
        store.set_status(v.ref, "validated", report=report, checked=v)
    return Publication(v.ref, "validated", validation)
