"""The command line as a user meets it: real processes, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, env_store: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {})}
    if env_store is not None:
        env["PREFDATA_STORE"] = str(env_store)
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env, timeout=300)


def test_help_is_fast_and_imports_nothing_heavy():
    code = (
        "import sys\nfrom prefdata.commands.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'trl', 'transformers', 'great_expectations', 'prefect', 'polars', 'datasets') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "HEAVY []" in out
    assert "import" in out and "verify" in out


def test_import_publish_show_verify_round_trip(tmp_path, shared_data):
    store = tmp_path / "store"
    summary = tmp_path / "summary.json"
    done = run("import", str(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz"), "--name", "hh", "--json", str(summary), env_store=store)
    assert done.returncode == 0, done.stderr
    assert "read 2312 = kept 2312 + quarantined 0" in done.stdout
    info = json.loads(summary.read_text())
    assert (info["read"], info["kept"], info["quarantined"]) == (2312, 2312, 0)
    ref = info["version"]
    assert ref.startswith("hh@") and "quarantine_file" in info

    assert run("verify", ref, env_store=store).returncode == 0
    shown = run("show", ref, "--json", env_store=store)
    manifest = json.loads(shown.stdout)
    assert manifest["status"] == "draft" and manifest["counts"]["rows"]["default"]["train"] == 2312
    assert manifest["lineage"]["sources"][0]["sha256"]
    assert ref in run("versions", env_store=store).stdout

    parquet = next((store / "hh").glob("*/data/train-*.parquet"))
    parquet.write_bytes(parquet.read_bytes()[:-10])
    failed = run("verify", ref, env_store=store)
    assert failed.returncode == 1 and "changed: data/train" in failed.stdout


def test_import_out_writes_rows_and_quarantine(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_text('{"prompt": "p", "chosen": "c", "rejected": "r"}\n{"prompt": "p"}\n')
    out = tmp_path / "out" / "rows.parquet"
    done = run("import", str(src), "--out", str(out), "--json", str(tmp_path / "s.json"))
    assert done.returncode == 0, done.stderr
    info = json.loads((tmp_path / "s.json").read_text())
    assert (info["read"], info["kept"], info["quarantined"]) == (2, 1, 1)
    quarantined = [json.loads(line) for line in Path(info["quarantine_file"]).read_text().splitlines()]
    assert quarantined[0]["row"] == 2 and quarantined[0]["reason"].startswith("missing_field")
    import polars as pl

    assert pl.read_parquet(out).columns[:6] == ["id", "pair_id", "prompt_id", "prompt", "chosen", "rejected"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["import", "/no/such/file.jsonl", "--out", "x.jsonl"], "no such file"),
        (["import", "{src}", "--format", "yaml", "--out", "x.jsonl"], "unknown format"),
        (["import", "{src}", "--name", "../up"], "not allowed"),
        (["import", "{src}"], "exactly one of --name"),
        (["show", "nothing@abcd"], "no dataset named"),
        (["world", "build", "--steps", "30"], "warmup_steps (100) must be in [0, steps (30))"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(tmp_path, args, needle):
    src = tmp_path / "d.jsonl"
    src.write_text('{"prompt": "p", "chosen": "c", "rejected": "r"}\n')
    done = run(*[a.replace("{src}", str(src)) for a in args], env_store=tmp_path / "store")
    assert done.returncode == 2
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["check"], "Missing argument"), (["check", "x.jsonl", "--bogus"], "No such option: --bogus"),
     (["nosuch"], "No such command"), (["versions", "--store"], "requires an argument")],
)
def test_usage_errors_exit_2_with_clicks_message(args, needle):
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "internal error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "needle"), [(["versions", "--help"], "$PREFDATA_STORE or .prefdata/store"),
                                            (["train", "--help"], "METHOD-NAME-VERSION"),
                                            (["serve", "--help"], "no limit"),
                                            # built from the flows' models and prefdata.base.defaults
                                            (["collect", "--help"], "Candidates per prompt.  [default: 4]"),
                                            (["collect", "--help"], "[default: .prefdata/queues]"),
                                            (["import", "--help"], "[default: 1048576; x>=1]"),
                                            (["check", "--help"], "[default: 1000000; x>=1]")])
def test_help_shows_the_defaults_it_names(args, needle):
    done = run(*args, env={"COLUMNS": "250"})
    assert done.returncode == 0 and needle in done.stdout


def test_verbose_shows_the_traceback(tmp_path):
    done = run("--verbose", "import", "/no/such/file.jsonl", "--out", "x.jsonl")
    assert done.returncode == 2 and "Traceback" in done.stderr


def test_versions_and_show_never_cut_ids_in_80_columns_or_a_pipe(tmp_path):
    store = tmp_path / "store"
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"prompt": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}"}) + "\n" for i in range(3)))
    refs = []
    for name in ("demo-arithmetic", "a-dataset-name-long-enough-to-fill-most-of-an-eighty-column-line"):
        done = run("import", str(src), "--name", name, env_store=store)
        assert done.returncode == 0, done.stderr
        refs.append(next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:")))
    assert all(len(ref.split("@")[1]) == 12 for ref in refs)  # the full version id
    env = {**os.environ, "PREFDATA_STORE": str(store), "COLUMNS": "80"}
    listed = subprocess.run([sys.executable, "-m", "prefdata", "versions"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    for ref in refs:  # each id whole, first on its own line, so it can be copied as it is
        assert any(line.split()[0] == ref for line in lines), listed.stdout
    assert "…" not in listed.stdout
    shown = subprocess.run([sys.executable, "-m", "prefdata", "show", refs[1]], capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0 and shown.stdout.split()[0] == refs[1] and "…" not in shown.stdout

    as_json = subprocess.run([sys.executable, "-m", "prefdata", "versions", "--json"], capture_output=True,
                             text=True, env=env, timeout=120)
    records = json.loads(as_json.stdout)
    assert sorted(r["id"] for r in records) == sorted(refs)
    for r in records:  # the whole manifest, with its full id
        assert r["id"] == f"{r['name']}@{r['version']}" and r["status"] == "draft" and r["files"] and r["counts"]["rows"]


def test_check_lists_each_check_with_its_checklist_item_and_thresholds(tmp_path):
    from prefdata.checks.checklist import _registry

    done = run("check", "--list-checks", env={"COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert set(_registry()) <= set(lines)
    assert "item 3" in lines["length_ratio"] and "max_ratio=2.0" in lines["length_ratio"]
    assert "item 10" in lines["min_size"] and "min_pairs=10000" in lines["min_size"]
    # a config's thresholds and waivers are the ones listed
    config = tmp_path / "c.yaml"
    config.write_text("checks:\n  length_ratio: {max_ratio: 3.0}\n  min_size: {waive: toy set}\n")
    done = run("check", "--list-checks", "--config", str(config), env={"COLUMNS": "250"})
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "max_ratio=3.0" in lines["length_ratio"] and "waived: toy set" in lines["min_size"]


def test_check_without_data_or_list_checks_is_one_line_exit_2():
    done = run("check")
    assert done.returncode == 2 and "--list-checks" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_failing_checks_whole_message_is_on_the_terminal(tmp_path):
    """Its fix is often at the end: a long failing message is wrapped under its line, never cut."""
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps({"prompt": f"q{i}?", "chosen": f"yes {i}", "rejected": f"no {i}"}) + "\n"
                           for i in range(20)))
    card = tmp_path / "card.md"
    card.write_text("# Card\n\n## Annotation guidelines\n\nshort\n\n## Rubric\n\nshort\n\n## Edge cases\n\nshort\n")
    done = subprocess.run([sys.executable, "-m", "prefdata", "check", str(src), "--card", str(card)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "100"})
    assert done.returncode == 1
    text = " ".join(done.stdout.split())  # the message as wrapped lines, joined
    assert "each needs a '## Title' section with at least 40 characters of text" in text
    assert "..." not in next(line for line in done.stdout.splitlines() if "annotation_guidelines" in line)


def test_help_is_never_cut_off_a_terminal():
    """Issue 43: piped, rich's help tables cut names and defaults at 80 columns (`prompt_distributi…`,
    `rule:module:funct…`); off a terminal the help wraps instead, whole, for every command."""
    from prefdata.commands.cli import app
    import typer.main

    commands = sorted(typer.main.get_command(app).commands)
    assert len(commands) > 10
    for command in commands:
        done = run(command, "--help")
        assert done.returncode == 0 and "…" not in done.stdout, (command, done.stdout)
    assert "rule:NAME" in run("check", "--help").stdout


def test_version_and_the_quiet_defaults():
    from importlib.metadata import version

    from prefdata.commands.cli import QUIET_DEFAULTS, apply_quiet_defaults

    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"prefdata {version('prefdata')}"
    environ = {"DO_NOT_TRACK": "0", "HF_HUB_OFFLINE": "0"}

    class Piped:
        def isatty(self):
            return True  # leave typer's rich help alone in this process

    apply_quiet_defaults(environ, Piped())
    assert environ == {**QUIET_DEFAULTS, "DO_NOT_TRACK": "0", "HF_HUB_OFFLINE": "0"}  # the user's own values kept
