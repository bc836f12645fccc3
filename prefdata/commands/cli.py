"""The `prefdata` command line. Heavy libraries are imported inside the commands that need them,
so `prefdata --help` stays fast and never loads torch, TRL or Great Expectations."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from prefdata.base import defaults
from prefdata.base.errors import GateFailed, NoSpace, PrefdataError, UnusableInput
from prefdata.base.outputs import writable_dir, writable_file
from prefdata.commands.console import terminal, track
# An option that stands for a field of a flow's model is built from that field (its default and help),
# a default shared with a polars module is read from base.defaults: pydantic loads for `--help`, no
# heavier library does.
from prefdata.commands.options import option
from prefdata.flows.params import Checks, Humans, Training

app = typer.Typer(
    name="prefdata",
    help="Preference data you can trust: import, check, version, and train from validated versions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # off a terminal (apply_quiet_defaults), click's plain help: wrapped to $COLUMNS, at most this wide
    context_settings={"max_content_width": 120},
)
_state = {"verbose": False}

ROW_BY_ROW_NOTE_ROWS = 100_000  # a smaller file imports in seconds either way: no note

StoreOpt = Annotated[Optional[str], typer.Option("--store", help="Store root or fsspec URL (default: $PREFDATA_STORE or .prefdata/store)")]


def _write_json(path: Path | None, payload: dict) -> None:
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise UnusableInput(f"--json {path}: cannot write it ({exc.strerror})") from None


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"prefdata {version('prefdata')}")
        raise typer.Exit(0)


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
          version: Annotated[bool, typer.Option("--version", help="Print prefdata's version and exit.", is_eager=True,
                                                callback=_print_version)] = False) -> None:
    _state["verbose"] = verbose


# What the Makefile sets, applied by the command itself unless the user set them: no library phones
# home (on a machine without network each attempt printed "Failed to send telemetry" errors), and the
# hub is not asked for what is on disk. A model named by its hub id needs HF_HUB_OFFLINE=0 (the
# refusal says so).
QUIET_DEFAULTS = {"HF_HUB_DISABLE_TELEMETRY": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                  "HF_HUB_OFFLINE": "1"}


def apply_quiet_defaults(environ=os.environ, stdout=sys.stdout) -> None:
    for key, value in QUIET_DEFAULTS.items():
        environ.setdefault(key, value)
    if not stdout.isatty():
        # Rich's help tables cut long option names and values to 80 columns off a terminal
        # (`prompt_distributi…`); click's plain help wraps instead, and never cuts.
        import typer.core

        typer.core.HAS_RICH = False


@app.command("import")
def import_cmd(
    src: Annotated[Path, typer.Argument(help="JSONL, JSON, CSV, TSV or Parquet file; JSONL, JSON, CSV and TSV also gzipped or zstd-compressed (.gz, .zst).")],
    format: Annotated[str, typer.Option("--format", "-f", help="auto, trl, trl-chat, hh-rlhf or comparisons.")] = defaults.IMPORT_FORMAT,
    votes: Annotated[Optional[Path], typer.Option(help="Long votes table: pair_id, annotator, vote (a|b|tie).")] = None,
    name: Annotated[Optional[str], typer.Option(help="Write a draft version NAME@VERSION into the store.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write normalised rows to this .jsonl or .parquet file.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the import summary here.")] = None,
    card: Annotated[Optional[Path], typer.Option(help="Guideline document (Markdown) for the dataset card.")] = None,
    max_text_bytes: Annotated[int, typer.Option(help="Quarantine rows with a text field larger than this.", min=1)] = defaults.MAX_TEXT_BYTES,
    aggregate: str = option(Humans, "aggregate"),
    batch_rows: Annotated[int, typer.Option(help="With --name, a Parquet, JSON Lines, JSON, CSV or TSV file of more "
                                                 "rows than this goes into the store this many rows at a time (bounds "
                                                 "memory).", min=1)] = defaults.BATCH_ROWS,
    onto: Annotated[Optional[str], typer.Option(help="With --name: a version NAME@VERSION of the store (or previous: "
                                                     "NAME's newest validated one, if any) whose rows the new draft "
                                                     "holds before the file's (a growing dataset: the parent's files "
                                                     "are shared, not copied; its lineage names it).")] = None,
    store: StoreOpt = None,
) -> int:
    """Import preference data, quarantining every row that cannot be used (with its reason)."""
    from prefdata.data.importer import import_file, import_file_to_store
    from prefdata.data.writers import write_rows, write_quarantine

    if (name is None) == (out is None):
        raise UnusableInput("give exactly one of --name NAME (store a draft version) or --out FILE (write rows)")
    if onto is not None and name is None:
        raise UnusableInput("--onto NAME@VERSION grows a stored version: give --name NAME for the new draft")
    writable_file(json_path, "--json")
    writable_file(out, "--out")
    from prefdata.gate.runner import read_text

    guidelines = read_text(card)
    from prefdata.data.formats import AGGREGATES

    if aggregate not in AGGREGATES:
        raise UnusableInput(f"--aggregate {aggregate!r}: choose majority or dawid-skene")
    if out is not None:
        result = import_file(src, fmt=format, votes=votes, max_text_bytes=max_text_bytes, track=track,
                             aggregate=aggregate)
        if result.quarantine and not result.pairs.height:  # nothing kept: the quarantine says why
            from prefdata.data.importer import require_kept

            require_kept(result, f"; see {write_quarantine(result.quarantine, out)}")
        summary = result.summary()
        summary["outputs"] = write_rows(result, out)
        summary["quarantine_file"] = str(write_quarantine(result.quarantine, out))
    else:
        from prefdata.data.store import Store

        st = Store(store)
        result, version = import_file_to_store(src, name, st, fmt=format, votes=votes, max_text_bytes=max_text_bytes,
                                               track=track, aggregate=aggregate, guidelines=guidelines,
                                               batch_rows=batch_rows, onto=onto)
        summary = result.summary()
        summary["version"] = version.ref
        if onto is not None:
            summary["parent"] = version.manifest["lineage"]["parent"]
            summary["rows"] = sum(version.manifest["counts"]["rows"]["default"].values())
        summary["status"] = version.status  # the same content imported again keeps its status
        summary["store"] = st.url
        summary["quarantine_file"] = f"{st.path(version.ref)}/quarantine.jsonl" if result.quarantine else None
    _write_json(json_path, summary)
    _print_import(summary)
    if result.row_by_row and result.read >= ROW_BY_ROW_NOTE_ROWS:  # where the slow path's time shows
        terminal(stderr=True).print(f"note: {src} was imported row by row: {result.row_by_row}")
    return 0


def _print_import(summary: dict) -> None:
    console = terminal()
    console.print(
        f"read {summary['read']} = kept {summary['kept']} + quarantined {summary['quarantined']}"
        f"  ({summary['pairs']} preference pairs, format {summary['format']})"
    )
    for reason, n in summary["unresolved"].items():
        console.print(f"  kept but not a pair: {n} {reason}")
    for reason, n in summary["reasons"].items():
        console.print(f"  quarantined: {n} {reason}")
    if summary.get("votes_read"):
        console.print(f"votes read {summary['votes_read']} = kept {summary['votes_kept']} + quarantined {summary['votes_quarantined']}")
    if summary.get("quarantine_file"):
        console.print(f"quarantine: {summary['quarantine_file']}")
    if "version" in summary:
        console.print(f"version: {summary['version']} ({summary['status']})")
    if "parent" in summary:
        console.print(f"  onto {summary['parent']}: {summary['rows']} pairs in all, the parent's files shared")


@app.command()
def versions(name: Annotated[Optional[str], typer.Argument(help="Only this dataset.")] = None,
             json_out: Annotated[bool, typer.Option("--json", help="Print every version's whole manifest, with its id, as a JSON list.")] = False,
             store: StoreOpt = None) -> int:
    """List the versions in the store: the full NAME@VERSION id first, never cut (in a pipe too)."""
    from prefdata.data.store import Store

    st = Store(store)
    found = st.versions(name)
    if json_out:
        print(json.dumps([{"id": v.ref, **v.manifest} for v in found], indent=2, ensure_ascii=False))
        return 0
    from prefdata.data.store import DAMAGED

    rows, doubtful, unchecked, damaged = [("id", "status", "pairs", "checks", "created")], False, None, False
    for v in found:
        counts = v.manifest["counts"]["rows"].get("default", {})
        report = v.manifest.get("check_report")
        checks = "-" if not isinstance(report, dict) else ("passed" if report.get("passed") else "failed")
        if v.status == DAMAGED:
            damaged = True
            rows.append((v.ref, DAMAGED + "!", "-", "-", "-"))
            continue
        try:
            unsigned = bool(st.status_problems(v.manifest))
        except UnusableInput as exc:  # no usable key here: the listing still lists, every claim marked
            unsigned, unchecked = v.status != "draft", str(exc)
        doubtful |= unsigned
        rows.append((v.ref, v.status + "?" * unsigned, str(sum(counts.values())), checks, v.manifest["created_at"]))
    # Plain columns sized to their content, no table widget: an id is never cut or wrapped inside a
    # cell, whatever the terminal's width; a long line runs on, the id whole at its start.
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    if doubtful:
        print(f"? the status could not be checked: {unchecked}" if unchecked else
              "? the status does not match its signature: run `prefdata verify ID`")
    if damaged:
        print("! the version's manifest.json cannot be read: run `prefdata verify ID` (the other versions are unaffected)")
    return 0


@app.command()
def show(ref: Annotated[str, typer.Argument(help="NAME@VERSION (or NAME for the latest).")],
         json_out: Annotated[bool, typer.Option("--json", help="Print the whole manifest as JSON.")] = False,
         store: StoreOpt = None) -> int:
    """Show a version: status, rows per split, lineage and check results."""
    from prefdata.data.store import Store

    from prefdata.data.store import DAMAGED

    st = Store(store)
    v = st.get(ref)
    m = v.manifest
    if v.status == DAMAGED:
        raise GateFailed(f"{v.ref}: {m['damaged']} (see `prefdata verify {v.ref}`)")
    if json_out:
        print(json.dumps(m, indent=2, ensure_ascii=False))
        return 0
    console = terminal()  # soft wrap: the id, first, is never cut
    console.print(f"{v.ref}  status: {m['status']}  created: {m['created_at']}")
    try:
        for problem in st.status_problems(m):
            console.print(f"  untrusted {problem} (see `prefdata verify {v.ref}`)")
    except UnusableInput as exc:  # no readable key: say so, show the rest
        console.print(f"  status not checked: {exc}")
    for config, splits in m["counts"]["rows"].items():
        console.print(f"  {config}: " + ", ".join(f"{s} {n}" for s, n in splits.items()))
    counts = m["counts"]
    console.print(f"  read {counts['read']} = kept {counts['kept']} + quarantined {counts['quarantined']}")
    for source in m["lineage"].get("sources", []):
        console.print(f"  source ({source.get('role', 'data')}): {source['path']}  sha256 {source['sha256'][:12]}")
    if m["lineage"].get("parent"):
        console.print(f"  parent: {m['lineage']['parent']}")
    report = m.get("check_report")
    if report:
        console.print(f"  checks: {'passed' if report['passed'] else 'FAILED'}"
                      f" (checklist: {report.get('config_source') or 'as recorded in the report'})")
        for c in report["checks"]:
            if (c.get("details") or {}).get("waived"):  # a stated reason, not a check that lacked its input
                console.print(f"    waived {c['id']}: {c.get('message', '').removeprefix('waived: ')}")
                continue
            console.print(f"    {c['status']:5}  {c['id']}  metric={c['metric']}  threshold={c['threshold']}")
    return 0


@app.command()
def verify(ref: Annotated[str, typer.Argument(help="NAME@VERSION")], store: StoreOpt = None) -> int:
    """Check every file of a version against its manifest, and its status against its signature;
    exit 1 on any change, loss or addition (dot-files too), or a status or report edited by hand."""
    from prefdata.data.store import Store

    st = Store(store)
    v = st.get(ref)
    problems = st.verify(v.ref)
    console = terminal()
    if problems:
        for p in problems:
            console.print(f"{v.ref}: {p}")
        console.print(f"{v.ref}: FAILED verification ({len(problems)} problem{'s' * (len(problems) != 1)})")
        return 1
    signed = ", its signature matches" if v.manifest.get("status_signature") else ""
    console.print(f"{v.ref}: ok ({len(v.manifest['files'])} files match the manifest; status {v.status}{signed})")
    return 0


def _shipped_checklist(config: Path | None) -> Path | None:
    """--config world: the demo world's checklist file, as the flows take it (flows.params.shipped)."""
    if config is None or str(config) != "world" or config.exists():
        return config
    from prefdata.flows.params import shipped

    return Path(shipped("world", "checklist"))


def _print_reuse(results, info: dict) -> None:
    """A growing version's check: how many rows' row-local results came from its validated parent, or
    why its parent's stored results could not be used."""
    if info.get("reuse"):
        terminal(stderr=True).print(f"note: {info['reuse']}")
    reused = max((r.details.get("reused_rows", 0) for r in results), default=0)
    if reused:
        terminal().print(f"reused: the row-local checks' results on {reused} rows of the parent "
                         "(the files both versions hold); --full checks every row")


def _print_results(results, passed: bool) -> None:
    """One line per check: readable in a terminal and in a CI log alike (full text in the reports)."""
    import textwrap

    from rich.markup import escape

    colour = {"pass": "green", "fail": "red", "error": "red", "skip": "yellow"}
    console = terminal()
    for r in results:
        metric = "-" if r.metric is None else f"{r.metric:.4g}"
        threshold = "-" if r.threshold is None else f"{r.threshold:.4g}"
        # a failing check's whole message (its fix is often at the end), wrapped under its line; others cut
        if r.status in ("fail", "error"):
            first, *rest = textwrap.wrap(r.message, 110) or [""]
        else:
            first, rest = (r.message if len(r.message) <= 110 else r.message[:107] + "..."), []
        console.print(f"[{colour[r.status]}]{r.status.upper():5}[/] {r.id:24} {metric:>8} / {threshold:<8} "
                      f"offending {r.n_offending:<6} {escape(first)}", markup=True, soft_wrap=True)
        for line in rest:
            console.print(f"      {escape(line)}", markup=True, soft_wrap=True)
    console.print("[bold green]checklist passed[/]" if passed else "[bold red]checklist FAILED[/]", markup=True)


def _checklist_items() -> dict[str, str]:
    """Each check's checklist item, from the comment beside it in checks/checklist.yaml (the file a
    user copies, so the listing and the file say the same)."""
    import re
    from importlib import resources

    text = resources.files("prefdata.checks").joinpath("checklist.yaml").read_text(encoding="utf-8")
    items = {m[1]: m[2].strip() for m in re.finditer(r"^  (\w+):[^#\n]*#\s*(.+)$", text, re.MULTILINE)}
    # a comment that runs on to the next line is cut at its open bracket: the first line says the item
    return {k: v[:v.rindex("(")].rstrip() if v.count("(") > v.count(")") else v for k, v in items.items()}


def _list_checks(checklist: dict) -> None:
    """`check --list-checks`: per check, a line with its id, checklist item and thresholds (or its
    waiver), and one saying which part of a conversation it reads."""
    from prefdata.checks.registry import CHECKS

    items = _checklist_items()
    width = max(map(len, CHECKS))
    for check_id in CHECKS:
        params = dict(checklist["checks"].get(check_id) or {})
        waived = params.pop("waive", None)
        settings = f"waived: {waived}" if waived else ", ".join(f"{k}={v}" for k, v in params.items()) or "-"
        print(f"{check_id:{width}}  {items.get(check_id, '-')}  [{settings}]")
        print(f"{'':{width}}  reads: {CHECKS[check_id].reads}")


@app.command()
def check(
    data: Annotated[Optional[str], typer.Argument(help="A data file (any format `import` reads) or NAME@VERSION.")] = None,
    votes: Annotated[Optional[Path], typer.Option(help="Long votes table (pair_id, annotator, vote): a data file's, or "
                                                       "for NAME@VERSION a label audit's from `prefdata argilla pull`.")] = None,
    eval_data: Optional[str] = option(Checks, "eval_data", "--eval"),
    reference_prompts: Optional[Path] = option(Checks, "reference_prompts"),
    benchmarks: Optional[list[str]] = option(Checks, "benchmarks", "--benchmark"),
    card: Annotated[Optional[Path], typer.Option(help="Dataset card / guideline document (Markdown).")] = None,
    config: Optional[Path] = option(Checks, "config"),
    strict: bool = option(Checks, "strict"),
    report_dir: Annotated[Optional[Path], typer.Option(help="Write report.md, junit.xml, report.html and GX Data Docs "
                                                            "here (default: none are written).")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the machine-readable report here.")] = None,
    scorer: Optional[str] = option(Checks, "scorer"),
    tokenizer: Annotated[Optional[str], typer.Option(help="The trainer's model folder: template_fit renders every pair with its tokenizer.")] = None,
    max_length: Annotated[Optional[int], typer.Option(help="template_fit: the trainer's max_length in tokens (prefdata's dpo/rm/sft cut; default: the config's, 256).", min=1)] = None,
    chat: Annotated[str, typer.Option(help="template_fit: render the pairs through the tokenizer's chat template (true), as plain text (false), or auto: as NAME@VERSION's lineage records they were sampled, else the template when the tokenizer has one that writes replies.")] = "auto",
    system_prompt: Annotated[Optional[str], typer.Option(help="template_fit: the system prompt the trainer puts first (default: the one NAME@VERSION's lineage records, else none).")] = None,
    list_checks: Annotated[bool, typer.Option("--list-checks", help="List each check, what it reads of a conversation, its checklist item and its "
                                                                    "thresholds (with --config: that config's), then exit.")] = False,
    batch_rows: Annotated[int, typer.Option(help="A Parquet, JSON Lines, JSON, CSV or TSV file of more rows than this "
                                                 "is checked this many rows at a time, from temporary shards (bounds "
                                                 "memory).", min=1)] = defaults.BATCH_ROWS,
    full: bool = option(Checks, "full"),
    store: StoreOpt = None,
    dask: Annotated[Optional[str], typer.Option(help="Run the checks that read every row (row-local ones, exact and "
                                                     "near duplicates, split isolation, agreement) on Dask: local:N "
                                                     "(N worker processes here) or a scheduler's address "
                                                     "(tcp://HOST:8786); workers must reach the data's files.")] = None,
) -> int:
    """Run the 12-point checklist; exit 0 when every check passes, 1 when any fails, 2 for bad input."""
    from prefdata.checks.checklist import load_config
    from prefdata.gate.runner import load_inputs, run_gate

    config = _shipped_checklist(config)
    checklist = load_config(config)
    if list_checks:
        _list_checks(checklist)
        return 0
    if config is None and data is not None and "@" in data and not Path(data).exists():
        from prefdata.data.store import Store
        from prefdata.gate.publishing import checklist_of

        stored = Store(store)
        checklist, source = checklist_of(stored, stored.get(data), None)
        if source != "default":  # the version's own checklist, not the default it was never held to
            print(f"prefdata: note: {data} is checked with the checklist it was {source[3:]}; --config "
                  "names another", file=sys.stderr)
    if data is None:
        raise UnusableInput("Missing argument 'DATA': give a data file or NAME@VERSION to check, "
                            "or --list-checks to list the checks")
    from prefdata.gate.runner import file_shadows_ref

    if shadowed := file_shadows_ref(data, store):  # a file named like a store version: say which is read
        print(f"prefdata: note: {shadowed}", file=sys.stderr)
    writable_file(json_path, "--json")
    writable_dir(report_dir, "--report-dir")
    if dask is not None:
        from prefdata.checks.distributed import check_address

        check_address(dask)
    if scorer:
        from prefdata.gate.scoring import check_spec

        check_spec(scorer)
    if not (checklist["checks"].get("gx") or {}).get("waive") and ("@" in data or Path(data).exists()):
        from prefdata.checks.gx_suite import prewarm

        prewarm()  # GX's import (seconds of Python) overlaps reading and importing DATA
    if max_length is not None:
        checklist["checks"].setdefault("template_fit", {})["max_length"] = max_length
    chat = chat_option(chat)
    loaded_tokenizer = None
    if tokenizer is not None:
        from prefdata.checks.template_fit import load_tokenizer

        try:
            loaded_tokenizer = load_tokenizer(tokenizer)
        except ValueError as exc:
            raise UnusableInput(f"--tokenizer {exc}") from None
    inputs, info = load_inputs(data, votes=votes, eval_data=eval_data, reference_prompts=reference_prompts, card=card,
                               scorer=scorer, store=store, docs_dir=report_dir / "gx" if report_dir else None,
                               batch_rows=batch_rows, benchmarks=benchmarks, full=full)
    inputs.tokenizer = loaded_tokenizer
    if loaded_tokenizer is not None:
        inputs.rendering = _check_rendering(loaded_tokenizer, chat, system_prompt, inputs.lineage)
    outcome = run_gate(inputs, checklist, strict=strict, report_dir=report_dir, title=f"checklist: {data}", dask=dask)
    _write_json(json_path, {**outcome.report, "input": info})
    # what reading the file (and --votes) left out, said here too, not only in --json; the gate
    # counts these rows (degenerate_pairs, unreadable_rows)
    for what, source in (("rows", data), ("votes", votes)):
        left_out = info.get("left_out", {}).get(what)
        if left_out:
            terminal().print(f"note: {sum(left_out.values())} {what} of {source} were unusable and left out "
                             f"({', '.join(f'{n} {r}' for r, n in left_out.items())}); the checklist counts them")
    _print_results(outcome.results, outcome.passed)
    _print_reuse(outcome.results, info)
    for kind, path in outcome.reports.items():
        terminal().print(f"{kind}: {path}")
    return 0 if outcome.passed else 1


def chat_option(value: str) -> str:
    """--chat as its word (auto, true, false; on/off and yes/no too), or the one line saying what it takes."""
    from prefdata.models.chat import chat_mode

    try:
        return chat_mode(value)
    except ValueError:
        raise UnusableInput(f"--chat {value!r}: not one of auto, true, false (on/off and yes/no work too)") from None


def _check_rendering(tokenizer, chat: str, system_prompt: str | None, lineage: dict | None):
    """template_fit's rendering: --chat/--system-prompt, where not given as a version's lineage
    records its prompts were sampled (prefdata.models.chat); a template that differs is said."""
    from prefdata.models.chat import Rendering, resolve

    recorded = Rendering.from_record((lineage or {}).get("rendering"))
    if recorded is not None and chat == "auto":
        chat = "true" if recorded.chat else "false"
    system = system_prompt if system_prompt is not None else (recorded.system if recorded else None)
    try:
        rendering = resolve(tokenizer, chat, system)
    except ValueError as exc:
        raise UnusableInput(f"--chat {exc}") from None
    if recorded is not None and recorded.difference(rendering):
        terminal().print(f"note: the pairs were sampled with {recorded.describe()}; template_fit renders them with "
                         f"{rendering.describe()} (the --tokenizer's), and `prefdata train` will refuse that base model")
    return rendering


@app.command("filter")
def filter_cmd(
    ref: Annotated[str, typer.Argument(help="NAME@VERSION to filter.")],
    drop: Annotated[str, typer.Option(help="Comma-separated row-level checks whose offending rows are removed.")]
    = ",".join(defaults.FILTER_DROP),
    config: Optional[Path] = option(Checks, "config"),
    benchmarks: Optional[list[str]] = option(Checks, "benchmarks", "--benchmark"),
    name: Annotated[Optional[str], typer.Option(help="Name of the new version (default: the same name).")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the filter summary here.")] = None,
    votes: Annotated[Optional[Path], typer.Option(help="A label audit's votes (`prefdata argilla pull`), for "
                                                       "--drop label_audit: drops the pairs the annotators overturned.")] = None,
    store: StoreOpt = None,
) -> int:
    """Remove the rows that row-level checks flag; write them to quarantine in a new draft version."""
    from prefdata.checks.checklist import load_config
    from prefdata.gate.filtering import filter_version
    from prefdata.data.store import Store

    writable_file(json_path, "--json")
    child, counts = filter_version(Store(store), ref, tuple(c.strip() for c in drop.split(",") if c.strip()),
                                   load_config(_shipped_checklist(config)), name, votes=None if votes is None else str(votes),
                                   benchmarks=benchmarks)
    unchanged = counts.get("unchanged", False)
    summary = {**counts, "version": child.ref, "parent": None if unchanged else child.manifest["lineage"]["parent"]}
    _write_json(json_path, summary)
    console = terminal()
    console.print(f"read {counts['read']} = kept {counts['kept']} + quarantined {counts['quarantined']}")
    for reason, n in counts["reasons"].items():
        console.print(f"  quarantined: {n} {reason}")
    if unchanged:
        console.print(f"nothing to drop: {child.ref} stays as it is ({child.status}); no new version")
    else:
        console.print(f"version: {child.ref} (draft, parent {summary['parent']})")
    return 0


@app.command()
def publish(
    ref: Annotated[str, typer.Argument(help="NAME@VERSION of a draft.")],
    eval_data: Optional[str] = option(Checks, "eval_data", "--eval"),
    reference_prompts: Optional[Path] = option(Checks, "reference_prompts"),
    benchmarks: Optional[list[str]] = option(Checks, "benchmarks", "--benchmark"),
    config: Optional[Path] = option(Checks, "config"),
    strict: bool = option(Checks, "strict"),
    report_dir: Optional[Path] = option(Checks, "report_dir"),
    scorer: Optional[str] = option(Checks, "scorer"),
    full: bool = option(Checks, "full"),
    store: StoreOpt = None,
) -> int:
    """Run the checklist on a version and mark it validated only when the gate passes (else rejected)."""
    from prefdata.gate.publishing import publish_version
    from prefdata.data.store import Store

    writable_dir(report_dir, "--report-dir")
    if scorer:
        from prefdata.gate.scoring import check_spec

        check_spec(scorer)

    def show(validation) -> None:
        _print_results(validation.outcome.results, validation.passed)
        _print_reuse(validation.outcome.results, validation.report["input"])
        terminal().print(f"report: {validation.report_dir}")

    published = publish_version(Store(store), ref, show=show, config=_shipped_checklist(config), strict=strict, report_dir=report_dir,
                                scorer=scorer, eval_data=eval_data, reference_prompts=reference_prompts,
                                benchmarks=benchmarks, full=full)
    terminal().print(f"{published.dataset}: {'already validated' if published.validation is None else 'validated'}")
    return 0


def _show_train_config(method: str) -> None:
    """`train METHOD --show-config`: one `name: default  # help` line per field, valid YAML to copy from.
    Plain echo, not rich: defaults like [sigmoid, sft] are not markup."""
    from dataclasses import MISSING

    from prefdata.trainers import load
    from prefdata.trainers.config import config_fields

    plugin = load(method)
    rows = config_fields(plugin.config_class)
    typer.echo(f"# {method}: {plugin.config_class.__name__}, {len(rows)} fields ({plugin.description}); "
               f"set any of them in --config FILE.yaml")
    for name, default, text in rows:
        value = "(required)" if default is MISSING else json.dumps(default, default=lambda v: getattr(v, "value", str(v)))
        typer.echo(f"{name}: {value}" + (f"  # {text}" if text else ""))


def _config_with_overrides(config: Path | None, assignments: list[str], max_steps: int | None) -> dict:
    """The config file's mapping with `--set KEY=VALUE` (YAML values) and `--max-steps` over it; the
    trainer's config class then checks every key and type as it checks the file's."""
    import yaml

    from prefdata.trainers.config import load_config_file

    values = load_config_file(config)
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UnusableInput(f"--set {item!r}: write KEY=VALUE (e.g. --set learning_rate=5.0e-6)")
        try:
            values[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UnusableInput(f"--set {item!r}: the value is not YAML ({str(exc).splitlines()[0]})") from None
    if max_steps is not None:
        values["max_steps"] = max_steps
    return values


@app.command("train")
def train_command(
    method: Annotated[str, typer.Argument(help="rm, dpo, grpo, ppo, sft (the control), or a method another package registers.")],
    version: Annotated[Optional[str], typer.Argument(metavar="[NAME@VERSION]", help="A validated version, as every other command takes it (or --dataset).")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="NAME@VERSION of a validated version: the argument's older spelling.")] = None,
    config: Optional[Path] = option(Training, "config"),
    base_model: Optional[str] = option(Training, "base_model"),
    output_dir: Optional[Path] = option(Training, "output_dir"),
    chat: Optional[str] = option(Training, "chat"),
    system_prompt: Optional[str] = option(Training, "system_prompt"),
    verbose: Annotated[bool, typer.Option("--verbose", help="Show each step's metrics and every figure (always in DIR/train.log and the card).")] = False,
    show_config: Annotated[bool, typer.Option("--show-config", help="Print every field of METHOD's config (TRL's and prefdata's) with its default and help, as YAML lines; trains nothing.")] = False,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", min=1, help="Stop after N optimizer steps: the config's max_steps (TRL's name).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="KEY=VALUE over any config field (a YAML value; repeatable), checked as the YAML is; the card records the effective config.")] = None,
    store: StoreOpt = None,
) -> int:
    """Train from a validated dataset version; the model card records the version, its hash, the config and the metrics."""
    from prefdata.base.errors import UnusableInput
    from prefdata.trainers import train

    if show_config:
        _show_train_config(method)
        return 0
    if version and dataset and version != dataset:
        raise UnusableInput(f"train: two versions given ({version} and --dataset {dataset}): give one")
    dataset = version or dataset
    if not dataset:
        raise UnusableInput(f"train: which version? `prefdata train {method} NAME@VERSION` (a validated version); "
                            f"`prefdata train {method} --show-config` lists the config without one")
    writable_dir(output_dir, "--output-dir")
    chat = chat_option(chat) if chat is not None else None
    console = terminal()
    verbose = verbose or _state["verbose"]  # `prefdata -v train ...` too
    if base_model == "world":  # as the train flow takes it (prefdata.world.model_or_world)
        from prefdata.world.build import model_or_world

        base_model = model_or_world(base_model)
    if set_ or max_steps is not None:
        config = _config_with_overrides(config, set_ or [], max_steps)
    result = train(method, dataset, config, store=store, output_dir=output_dir, base_model=base_model, chat=chat,
                   system_prompt=system_prompt, log=console.print, verbose=verbose)
    if verbose:
        console.print(json.dumps({k: v for k, v in result.metrics.items() if k != "log"}, indent=2, default=str))
    else:  # the headline figures, one line each; every figure is on the card
        before, after = result.metrics.get("before", {}), result.metrics.get("after", {})
        figure = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
        for key in after:
            console.print(f"{key}: {figure(before.get(key))} -> {figure(after[key])}")
        if "heldout_pairwise_accuracy" in result.metrics:
            console.print(f"heldout_pairwise_accuracy: {result.metrics['heldout_pairwise_accuracy']}")
        console.print(f"steps: {result.metrics.get('steps')} in {result.metrics.get('seconds')} s")
    console.print(f"model: {result.model_dir}\ncard: {result.card}\nlog: {result.model_dir / 'train.log'}")
    for warning in result.metrics.get("warnings", []):  # the run finished; these are on the card too
        terminal(stderr=True).print(warning)
    return 0


@app.command("demo")
def demo_command(
    out: Annotated[Path, typer.Option(help="Folder for summary.json, the store, reports and the trained model.")] = Path(".prefdata/demo"),
    config: Annotated[Optional[Path], typer.Option(help="Demo config YAML (prompts, candidates, method, training overrides...).")] = None,
    world: Annotated[str, typer.Option(help="toy: the embedded arithmetic world (tiny models, minutes); chat: the same loop on a real chat model, SmolLM2-135M-Instruct, on format constraints (`make demo-chat` installs it).")] = "toy",
) -> int:
    """The whole pipeline on the embedded demo world: sample, judge, route, check, publish, train, evaluate."""
    from prefdata.commands.demo import load_demo_config, run_demo

    if world == "chat":
        from prefdata.commands.demo_chat import ChatDemoConfig, run_chat_demo

        out = Path(".prefdata/demo-chat") if out == Path(".prefdata/demo") else out  # the toy's results stay
        run_chat_demo(out, load_demo_config(config, ChatDemoConfig), say=terminal().print)
        terminal().print(f"summary: {out / 'summary.json'}")
        return 0
    if world != "toy":
        raise UnusableInput(f"--world {world!r}: choose toy (the arithmetic world) or chat (SmolLM2-135M-Instruct)")
    run_demo(out, load_demo_config(config), say=terminal().print)
    terminal().print(f"summary: {out / 'summary.json'}")
    return 0


world_app = typer.Typer(help="The embedded demo world: a tiny SFT model and its tasks, built locally.",
                        no_args_is_help=True)
app.add_typer(world_app, name="world")
from prefdata.commands.argilla import app as argilla_app  # noqa: E402 - typer only; its commands import lazily
app.add_typer(argilla_app, name="argilla")


@world_app.command("build")
def world_build(
    steps: Annotated[Optional[int], typer.Option(help="Training steps (default: the world config's).")] = None,
    cache: Annotated[Optional[Path], typer.Option(help="Cache folder (default: $PREFDATA_WORLD or .prefdata/world).")] = None,
    ship: Annotated[bool, typer.Option(help="Copy the built world into the package (prefdata/world/weights), "
                                            "replacing the shipped one.")] = False,
) -> int:
    """Build (or reuse from the cache, never from the package) the demo world's SFT and judge models
    from scratch, and print their held-out figures beside the shipped world's."""
    from dataclasses import replace

    from prefdata.world import WorldConfig, build_world
    from prefdata.world.build import SHIPPED, ship as ship_world

    try:
        config = WorldConfig() if steps is None else replace(WorldConfig(), steps=steps)
    except ValueError as exc:  # the config's own validation names both values
        raise UnusableInput(f"--steps: {exc}") from None
    console = terminal()
    paths = build_world(config, cache, log=console.print, use_shipped=False, judge=True)
    info = paths.info()
    console.print(f"world: {paths.root} ({'reused' if paths.reused else 'built'})")
    console.print(json.dumps({k: v for k, v in info.items() if k != "config"}, indent=2))
    shipped = json.loads((SHIPPED / "world.json").read_text()) if (SHIPPED / "world.json").is_file() else None
    if shipped is not None:
        for who, new, old in (("sft", info["metrics"], shipped["metrics"]),
                              ("judge", info["judge"]["metrics"], shipped["judge"]["metrics"])):
            console.print(f"{who} task accuracy: built {new['task_accuracy']:.3f}, shipped {old['task_accuracy']:.3f}")
    if ship:
        console.print(f"shipped: {ship_world(paths).root}")
    return 0


@world_app.command("eval")
def world_eval(model: Annotated[Path, typer.Argument(help="A causal LM folder (from_pretrained path).")]) -> int:
    """Held-out task and general-skill accuracy of any model on the demo world's prompts."""
    from prefdata.trainers.preflight import check_base_model
    from prefdata.world import evaluate

    check_base_model(str(model))  # a path that is not a model: one line, exit 2, before loading anything

    terminal().print(json.dumps(evaluate(model), indent=2))
    return 0


@world_app.command("judge")
def world_judge(
    n: Annotated[int, typer.Option(help="Held-out comparisons to judge (each asked in both orders).", min=1)] = 100,
    model: Annotated[Optional[Path], typer.Option(help="Judge model folder (default: the world's judge).")] = None,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.", min=1)] = 4,
) -> int:
    """Serve the judge with `transformers serve`, judge held-out pairs in both orders, and print its
    agreement with the verifier and its position consistency (saved as judge.json in the world cache)."""
    from prefdata.world import build_world, measure_served_judge

    from prefdata.world.build import cache_dir

    paths = build_world(log=terminal().print)
    out = cache_dir()  # never the package folder the shipped world sits in
    out.mkdir(parents=True, exist_ok=True)
    stats = measure_served_judge(model or paths.judge, n=n, log_dir=out, concurrency=concurrency)
    if model is None:
        (out / "judge.json").write_text(json.dumps(stats, indent=2) + "\n")
    terminal().print(json.dumps(stats, indent=2))
    return 0


model_app = typer.Typer(help="Model files: turn a GGUF file into a folder every command and trainer loads.",
                        no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("import-gguf")
def model_import_gguf(
    gguf_file: Annotated[Path, typer.Argument(help="A GGUF model file (llama.cpp's format), quantised or not.")],
    out_dir: Annotated[Path, typer.Argument(help="New folder for the model (safetensors, float32) and tokenizer.")],
) -> int:
    """Convert a GGUF file into an ordinary model folder (its tokenizer and chat template included),
    checked before it is kept: the folder's logits equal the GGUF model's on a probe prompt. Any
    model path also takes a .gguf file directly, converted once into a cache (.prefdata/models)."""
    from prefdata.models.loading import import_gguf

    writable_dir(out_dir, "OUT_DIR")
    manifest = import_gguf(gguf_file, out_dir)
    terminal().print(f"model: {out_dir} ({manifest['architecture']}, chat template: "
                     f"{'yes' if manifest['chat_template'] else 'no'}; logits equal to the GGUF model's on the probe)")
    return 0


from prefdata.commands.serve import run as _run  # noqa: E402 - typer only; Prefect loads inside the command
from prefdata.commands.serve import serve as _serve  # noqa: E402

app.command("serve")(_serve)
app.command("run")(_run)

from prefdata.commands.collect import collect_command as _collect  # noqa: E402 - typer only; the flow loads inside

app.command("collect")(_collect)

from prefdata.commands.export import export as _export  # noqa: E402 - typer only; the store and trainers load inside

app.command("export")(_export)


class Terminated(BaseException):
    """SIGTERM, as an exception: the command unwinds (its temporary folders and partial outputs are
    removed by their own `finally` and atexit) instead of dying where it stands."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


# Commands that run Prefect flows. `serve` keeps Python's default SIGTERM: it is Prefect's runner,
# whose own handling stops the served flows. collect and demo raise Terminated like every other
# command, once Prefect's flow engine (which handles a SIGTERM during a flow itself, reports the
# crash and then sends the signal again) is done; their Prefect server runs in a session of its own
# (prefdata.flows.server), so a signal to the whole process group leaves it up for that report.
_FLOW_COMMANDS = {"collect", "demo", "serve"}
# commands that stream a whole file or version through polars and Arrow (prefdata.base.allocator)
_BULK_DATA_COMMANDS = {"import", "check", "filter", "publish"}
# What a stopped command keeps, for its one line. A stop that the normal unwinding does not finish
# within STOP_GRACE_S (a generate() call in a task thread cannot be interrupted) ends the process
# there, after stopping the servers it started (prefdata.base.processes).
KEPT_AFTER_STOP = {
    "collect": "the sampled and judged chunks that finished are in the cache (--cache-dir): the same command "
               "resumes from them",
    "demo": "its finished sampling and judging chunks are in OUT/cache: the same command resumes from them",
    "train": "no model was written to the output folder",
}
STOP_GRACE_S = 6.0


def _stopped_line(command: str | None, signum: int) -> str:
    import signal

    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT"
    kept = KEPT_AFTER_STOP.get(command or "", "its temporary folders removed")
    # on a line of its own: a progress bar (the trainer's tqdm) may have left the cursor mid-line
    return f"\nprefdata: stopped by {name} ({kept}; the store keeps no half-written version)"


def main(argv: list[str] | None = None) -> None:
    import click
    import signal
    from typer.exceptions import TyperException

    args = sys.argv[1:] if argv is None else argv
    command = next((a for a in args if not a.startswith("-")), None)
    apply_quiet_defaults()
    if command in _FLOW_COMMANDS | {"run"} and "PREFECT_HOME" not in os.environ:
        # One Prefect home for every command that runs flows (the Makefile's too): `prefdata serve` in one
        # shell and `prefdata run` in another meet in the same database. Set before Prefect is imported.
        home = os.path.abspath(os.path.join(".prefdata", "prefect"))
        os.makedirs(home, exist_ok=True)  # Prefect makes only the last folder
        os.environ["PREFECT_HOME"] = home
    if command in _BULK_DATA_COMMANDS and argv is None:  # a real command line: its own process's allocators
        from prefdata.base.allocator import keep_freed_memory

        keep_freed_memory()  # before polars is imported
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if command != "serve" and threading_main() else None
    if command in KEPT_AFTER_STOP and argv is None:  # a real command line, not main() inside another program
        from prefdata.base.processes import deadline_after_signal

        deadline_after_signal(STOP_GRACE_S, lambda signum: _stopped_line(command, signum))
    try:
        code = app(args=args, prog_name="prefdata", standalone_mode=False)
        if code == 130:  # Ctrl-C: typer turns KeyboardInterrupt into Exit(130), which click returns
            print(_stopped_line(command, signal.SIGINT) if command in KEPT_AFTER_STOP else "prefdata: aborted",
                  file=sys.stderr)
    except Terminated:
        print(_stopped_line(command, signal.SIGTERM), file=sys.stderr)
        code = 143
    except (click.exceptions.Exit, typer.Exit) as exc:
        code = exc.exit_code
    except (click.exceptions.Abort, typer.Abort):
        print(_stopped_line(command, signal.SIGINT) if command in KEPT_AFTER_STOP else "prefdata: aborted",
              file=sys.stderr)
        code = 130
    # Usage errors (unknown option, missing argument, bad value): exit 2 with click's own message.
    # typer >= 0.24 raises its own copies of click's exceptions, hence both classes.
    except (click.ClickException, TyperException) as exc:
        if not hasattr(exc, "show"):
            raise
        exc.show()
        code = getattr(exc, "exit_code", 2)
    except PrefdataError as exc:
        if _state["verbose"]:
            terminal(stderr=True).print_exception()
        print(f"prefdata: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except Exception as exc:  # a bug: one line unless asked for the traceback
        if _state["verbose"]:
            terminal(stderr=True).print_exception()
        if _disk_full(exc):
            where = f" writing {exc.filename}" if getattr(exc, "filename", None) else ""
            print(f"prefdata: error: no space left on the disk{where} ({exc.strerror}): free some space and run it "
                  "again (the store keeps no half-written version)", file=sys.stderr)
            code = NoSpace.exit_code
        else:
            print(f"prefdata: internal error: {type(exc).__name__}: {exc} (rerun with --verbose for the traceback)",
                  file=sys.stderr)
            code = 3
    except BaseException as exc:  # noqa: BLE001
        # Prefect's flow engine turns a SIGTERM during a flow into TerminationSignal (a BaseException);
        # after its crash report it ends the command here.
        if type(exc).__name__ != "TerminationSignal":
            raise
        print(_stopped_line(command, signal.SIGTERM), file=sys.stderr)
        code = 143
    finally:
        if previous is not None:  # main() also runs inside other programs (the tests): theirs again
            signal.signal(signal.SIGTERM, previous)
    sys.exit(code if isinstance(code, int) else 0)


def _disk_full(exc: BaseException) -> bool:
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def threading_main() -> bool:
    """Whether this is the main thread (the only one a signal handler can be set from)."""
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    main()
