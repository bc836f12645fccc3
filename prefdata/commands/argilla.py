"""`prefdata argilla ...`: a local Argilla server, users, push and pull. Everything heavy (the
argilla SDK, polars, the server manager's subprocesses) is imported inside the commands, so
`prefdata --help` never loads it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from prefdata.base import defaults
from prefdata.base.errors import UnusableInput
from prefdata.commands.options import option
from prefdata.flows.params import Argilla

app = typer.Typer(help="Human labels in Argilla: a local server (up/down/status), users, push pairs, pull votes.",
                  no_args_is_help=True)

# No "[default: ...]" in help texts: rich reads square brackets as markup and drops them, which
# left "Argilla URL ." on the screen. Parentheses survive.
DirOpt = Annotated[Optional[Path], typer.Option("--dir", help="Server folder (default: $PREFDATA_ARGILLA, else .prefdata/argilla).")]
UrlOpt = Annotated[Optional[str], typer.Option("--url", help="Argilla URL (default: $ARGILLA_API_URL, else the local server's).")]
KeyOpt = Annotated[Optional[str], typer.Option("--api-key", help="API key of an owner or workspace admin (default: $ARGILLA_API_KEY, else the local owner's); - reads it from stdin, since every user of the machine can read a command line.")]
DatasetOpt = Annotated[str, typer.Option("--dataset", help="Argilla dataset name.")]


def _say(text: str) -> None:
    typer.echo(text)


def from_stdin(value: str | None, what: str) -> str | None:
    """`-` as a secret read from stdin's next line (a command line is readable by every user: `ps`)."""
    if value != "-":
        return value
    import sys

    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise UnusableInput(f"{what} -: nothing on stdin; pipe the secret in (e.g. from a 0600 file: < key.txt)")
    return line


def _connection(url: str | None, api_key: str | None, workdir: Path | None = None) -> tuple[str, str]:
    """Explicit values (`-`: from stdin), then ARGILLA_API_URL / ARGILLA_API_KEY, then the running local
    server's."""
    api_key = from_stdin(api_key, "--api-key")
    url = url or os.environ.get("ARGILLA_API_URL")
    api_key = api_key or os.environ.get("ARGILLA_API_KEY")
    if url and api_key:
        return url, api_key
    from prefdata.argilla.server import LocalArgilla

    local = LocalArgilla(workdir).status()
    if local is not None and (url is None or url.rstrip("/") == local.url):
        return local.url, api_key or local.api_key
    if url is None:
        raise UnusableInput("no Argilla URL: pass --url or set ARGILLA_API_URL, or start one with `prefdata argilla up`")
    raise UnusableInput(f"no API key for {url}: pass --api-key or set ARGILLA_API_KEY")


@app.command()
def up(port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = defaults.ARGILLA_PORT, workdir: DirOpt = None) -> int:
    """Start a real argilla-server on 127.0.0.1 (its environment is built on first use)."""
    from prefdata.argilla.server import LocalArgilla

    server = LocalArgilla(workdir)
    info = server.start(port=port, log=_say)
    _say(f"Argilla is up at {info.url}  (pid {info.pid}, log {server.log_path})")
    _say(f"owner login: {info.username} / {info.password}")
    _say(f"owner API key: {info.api_key}  (kept in {server.workdir / 'owner.json'}, mode 0600)")
    _say("add annotators with `prefdata argilla add-user NAME`; stop with `prefdata argilla down`")
    return 0


@app.command()
def down(workdir: DirOpt = None) -> int:
    """Stop the local server (by its pid) and remove its temporary files."""
    from prefdata.argilla.server import LocalArgilla

    stopped = LocalArgilla(workdir).stop()
    _say("Argilla stopped" if stopped else "no local Argilla was running")
    return 0


@app.command()
def status(workdir: DirOpt = None) -> int:
    """Say whether the local server runs, where, and where its owner key is."""
    from prefdata.argilla.server import LocalArgilla

    server = LocalArgilla(workdir)
    info = server.status()
    if info is None:
        _say("no local Argilla is running (start one with `prefdata argilla up`)")
        return 1
    _say(f"Argilla is up at {info.url}  (pid {info.pid}); owner {info.username}, API key in "
         f"{server.workdir / 'owner.json'}")
    return 0


@app.command("add-user")
def add_user_cmd(
    username: Annotated[str, typer.Argument(help="Login name (lowercase letters, digits, - and _).")],
    password: Annotated[Optional[str], typer.Option(help="Web UI password (default: a random one, printed); - reads it from stdin (after the key, with --api-key -), since every user of the machine can read a command line.")] = None,
    role: Annotated[str, typer.Option(help="annotator, admin or owner.")] = "annotator",
    workspace: str = option(Argilla, "workspace"),
    url: UrlOpt = None, api_key: KeyOpt = None, workdir: DirOpt = None,
) -> int:
    """Create a user who can log in to the web UI, as a member of the workspace (needs an owner key)."""
    import secrets

    from prefdata.argilla.client import ensure_user

    url, api_key = _connection(url, api_key, workdir)
    new_password = from_stdin(password, "--password") or secrets.token_urlsafe(9)
    user_key, created, actual_role = ensure_user(url=url, api_key=api_key, username=username, password=new_password,
                                                 role=role, workspace=workspace)
    if created:
        _say(f"{username} ({role}) in workspace {workspace}: log in at {url} with password {new_password!r}; "
             f"API key {user_key}")
    else:  # Argilla keeps an existing user's password: printing a new one would print one that does not work
        _say(f"{username} exists already ({actual_role}), now in workspace {workspace}: its password is unchanged"
             f"{' (--password ignored)' if password else ''}; API key {user_key}")
    return 0


def _is_dataset(source: str) -> bool:
    """Whether `source` (no file of that name) names a dataset of the store."""
    from prefdata.data.store import Store, check_name

    try:
        return bool(Store().versions(check_name(source)))
    except UnusableInput:
        return False


def _latest_validated(store, name: str) -> str:
    """NAME alone audits NAME's newest validated version (one whose signature holds), said in a line."""
    trusted = [v for v in store.versions(name) if v.status == "validated" and not store.status_problems(v.manifest)]
    if not trusted:
        raise UnusableInput(f"push: {name} has no validated version to audit: name one, as {name}@VERSION "
                            f"(see `prefdata versions {name}`)")
    _say(f"push: {name} is {trusted[-1].ref}, its latest validated version")
    return trusted[-1].ref


def _read_rows(source: str, sample: int | None, seed: int):
    """A table file with pair_id, prompt, response_a, response_b, or a label audit of NAME@VERSION's
    pairs (chosen as response_a, rejected as response_b, label "a"); `sample` of them when given."""
    import polars as pl

    from prefdata.argilla.audit import audit_rows, sample_rows

    path = Path(source)
    if not path.exists() and ("@" in source or _is_dataset(source)):
        from prefdata.data.store import Store

        ref = source if "@" in source else _latest_validated(Store(), source)
        return audit_rows(Store().load(ref), sample, seed)
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    readers = {".parquet": pl.read_parquet, ".jsonl": pl.read_ndjson, ".ndjson": pl.read_ndjson,
               ".csv": pl.read_csv, ".json": pl.read_json}
    if not path.exists():
        raise UnusableInput(f"push: {source} does not exist (give a .jsonl/.parquet/.csv file or NAME@VERSION)")
    if suffix not in readers:
        raise UnusableInput(f"push: {source}: read .jsonl, .json, .parquet or .csv (a routing queue or "
                            "`prefdata import --format comparisons --out FILE` output)")
    try:
        rows = readers[suffix](path)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:  # an empty or broken file is the user's to fix
        what = "it is empty" if path.stat().st_size == 0 else " ".join(str(exc).split())[:200]
        raise UnusableInput(f"push: cannot read {source}: {what}; it needs rows with pair_id, prompt, "
                            "response_a, response_b") from None
    if rows.height == 0:
        raise UnusableInput(f"push: {source} has no rows; it needs rows with pair_id, prompt, response_a, response_b")
    return sample_rows(rows, sample, seed) if "pair_id" in rows.columns else rows


@app.command()
def push(
    source: Annotated[str, typer.Argument(help="Pairs: a .jsonl/.parquet/.csv with pair_id, prompt, response_a, "
                                               "response_b (a routing queue, an import's comparisons), or NAME@VERSION: "
                                               "a label audit of its chosen/rejected pairs, sent blind.")],
    dataset: DatasetOpt, workspace: str = option(Argilla, "workspace"),
    overlap: int = option(Argilla, "overlap"),
    card: Annotated[Optional[Path], typer.Option(help="Guideline document / dataset card: its Annotation guidelines, "
                                                      "Rubric and Edge cases become the dataset's guidelines.")] = None,
    suggestions: bool = option(Argilla, "suggestions"),
    seed: Annotated[int, typer.Option(help="Seed of the per-pair A/B order and of --sample.")] = 0,
    sample: Annotated[Optional[int], typer.Option(help="Push only this many pairs, drawn by --seed (the same ones "
                                                       "on every push; a larger sample extends a smaller one).")] = None,
    url: UrlOpt = None, api_key: KeyOpt = None, workdir: DirOpt = None,
) -> int:
    """Push pairs as records (pair id as record id; idempotent: a repeated or resumed push adds only what is missing)."""
    from prefdata.argilla.push import guidelines_from_card, push_pairs

    guidelines = None
    if card is not None:
        if not card.is_file():
            raise UnusableInput(f"push: --card {card} is not a file")
        guidelines = guidelines_from_card(card.read_text(encoding="utf-8"))
        if guidelines is None:
            raise UnusableInput(f"push: --card {card} has no Annotation guidelines, Rubric or Edge cases section")
    rows = _read_rows(source, sample, seed)  # before the server: a bad file is reported without one
    url, api_key = _connection(url, api_key, workdir)
    result = push_pairs(rows, url=url, api_key=api_key, dataset=dataset, workspace=workspace,
                        overlap=overlap, guidelines=guidelines, suggestions=suggestions, seed=seed, progress=True)
    _say(result.summary())
    _say(f"annotate at {url}/dataset/{result.dataset_id}/annotation-mode")
    return 0


@app.command()
def pull(
    dataset: DatasetOpt,
    out: Annotated[Path, typer.Option(help="Votes table to write: .parquet, .jsonl or .csv (pair_id, annotator, vote, ...).")],
    workspace: str = option(Argilla, "workspace"),
    url: UrlOpt = None, api_key: KeyOpt = None, workdir: DirOpt = None,
) -> int:
    """Pull submitted votes (mapped back through each record's A/B order) and report agreement."""
    from prefdata.argilla.pull import agreement, pull_votes

    from prefdata.base.outputs import writable_file

    writers = {".parquet": "write_parquet", ".jsonl": "write_ndjson", ".csv": "write_csv"}
    if out.suffix not in writers:
        raise UnusableInput(f"pull: --out {out} must end in .parquet, .jsonl or .csv")
    writable_file(out, "pull: --out")  # before the server is asked for anything
    url, api_key = _connection(url, api_key, workdir)
    votes = pull_votes(url=url, api_key=api_key, dataset=dataset, workspace=workspace)
    out.parent.mkdir(parents=True, exist_ok=True)
    getattr(votes, writers[out.suffix])(out)
    _say(f"{votes.height} votes on {votes['pair_id'].n_unique()} pairs by {votes['annotator'].n_unique()} "
         f"annotators -> {out}")
    if votes.height:
        result = agreement(votes)
        _say(f"agreement: {result.status}: {result.message}")
        if votes["label"].is_not_null().any():  # a label audit: do they uphold the dataset's own labels?
            from prefdata.checks.agreement import check_label_audit

            for audit in check_label_audit(votes.select("pair_id", "annotator", "vote", "label")):
                _say(f"label audit: {audit.status}: {audit.message}")
        shown_first = votes.filter(votes["shown"] == "a").height
        ties = votes.filter(votes["vote"] == "tie").height
        _say(f"position: {shown_first} of {votes.height} votes chose the response shown as A ({ties} ties)")
    return 0
