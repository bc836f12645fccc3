"""A user's mistake is one line and exit 2 before any work (issue 23's late failures): an output path
that cannot be written, a scorer or model that is not there, an SFT file that is missing, a store
whose status cannot be written; and a filter that drops nothing makes no version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefdata.data.store import Store

ROWS = [{"prompt": f"What is {i} plus {i}?", "chosen": f"It is {2 * i}.", "rejected": f"It is {2 * i + 1}."}
        for i in range(30)]


def cli(*args: str, store: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)


def one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(word in lines[0] for word in words), lines[0]


@pytest.fixture()
def src(tmp_path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_import_json_into_a_folder_is_refused_before_the_version_is_written(store_root, src, tmp_path):
    one_line_exit_2(cli("import", str(src), "--name", "d", "--json", str(tmp_path), store=store_root),
                    "--json", "is a folder")
    assert not store_root.exists() or not list(store_root.glob("d/*/manifest.json"))


def test_check_report_dir_that_is_a_file_and_a_missing_scorer_model(store_root, src, tmp_path):
    one_line_exit_2(cli("check", str(src), "--report-dir", str(src), store=store_root), "--report-dir", "is a file")
    one_line_exit_2(cli("check", str(src), "--scorer", "rm:/nonexistent/rm", store=store_root),
                    "/nonexistent/rm is not a model folder")
    one_line_exit_2(cli("check", str(src), "--scorer", f"verdicts:{tmp_path}/none.jsonl", store=store_root),
                    "no verdicts file")


def test_train_output_dir_that_is_a_file_and_world_eval_of_no_model(store_root, src, tmp_path):
    one_line_exit_2(cli("train", "dpo", "--dataset", "d@abcd", "--output-dir", str(src), store=store_root),
                    "--output-dir", "is a file")
    one_line_exit_2(cli("world", "eval", "/nonexistent/model", store=store_root), "/nonexistent/model not found")


def test_train_takes_the_version_as_its_argument_or_as_dataset_never_two(store_root):
    one_line_exit_2(cli("train", "dpo", store=store_root), "which version? `prefdata train dpo NAME@VERSION`")
    one_line_exit_2(cli("train", "dpo", "a@1", "--dataset", "b@2", store=store_root), "two versions given")
    # one version, either spelling: refused for the same reason (it is not in the store), not for its form
    for args in (("train", "dpo", "d@abcd"), ("train", "dpo", "--dataset", "d@abcd")):
        one_line_exit_2(cli(*args, store=store_root), "no dataset named 'd' in the store")


def test_argilla_pull_into_a_folder_is_refused_before_any_server_is_asked(store_root, tmp_path):
    (tmp_path / "votes.parquet").mkdir()
    one_line_exit_2(cli("argilla", "pull", "--dataset", "d", "--out", str(tmp_path / "votes.parquet"),
                        "--url", "http://127.0.0.1:9", "--api-key", "x" * 40, store=store_root),
                    "--out", "is a folder")


def test_train_with_a_missing_sft_file_stops_before_any_model(store_root, src, tmp_path):
    ref = _validated(store_root, src, tmp_path)
    config = tmp_path / "ppo.yaml"
    config.write_text("rewards: [\"rule:prefdata.world:verify\"]\ngeneral_sft: /nonexistent/general.jsonl\n")
    done = cli("train", "ppo", "--dataset", ref, "--config", str(config), "--base-model", "/nonexistent/model",
               store=store_root)
    one_line_exit_2(done, "SFT file /nonexistent/general.jsonl not found")  # named before the base model


def test_publish_refuses_a_symlinked_lock_before_running_the_checklist(store_root, src, tmp_path):
    done = cli("import", str(src), "--name", "d", store=store_root)
    ref = next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))
    (store_root / "d" / ".lock").symlink_to(tmp_path / "elsewhere")
    reports = tmp_path / "reports"
    one_line_exit_2(cli("publish", ref, "--report-dir", str(reports), store=store_root), ".lock is a symlink")
    assert not reports.exists()  # the checklist never ran
    assert Store(str(store_root)).get(ref).status == "draft"


def test_a_filter_that_drops_nothing_makes_no_version(store_root, src, tmp_path):
    ref = _validated(store_root, src, tmp_path)
    done = cli("filter", ref, "--json", str(tmp_path / "f.json"), store=store_root)
    assert done.returncode == 0, done.stderr
    assert f"nothing to drop: {ref} stays as it is (validated); no new version" in done.stdout
    assert [v.ref for v in Store(str(store_root)).versions("d")] == [ref]
    assert json.loads((tmp_path / "f.json").read_text())["unchanged"] is True


def _validated(store_root: Path, src: Path, tmp_path: Path) -> str:
    from prefdata.checks.checklist import _registry

    done = cli("import", str(src), "--name", "d", store=store_root)
    ref = next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))
    config = tmp_path / "waived.yaml"
    config.write_text("checks:\n" + "".join(f"  {c}: {{waive: a test of what comes after publish}}\n"
                                            for c in _registry()))
    published = cli("publish", ref, "--config", str(config), store=store_root)
    assert published.returncode == 0, published.stderr
    return ref


def test_argilla_push_of_a_bare_name_audits_its_latest_validated_version(store_root, src, tmp_path):
    ref = _validated(store_root, src, tmp_path)
    other = tmp_path / "more.jsonl"
    other.write_text("".join(json.dumps({**r, "chosen": r["chosen"] + " Sure."}) + "\n" for r in ROWS))
    cli("import", str(other), "--name", "d", store=store_root)  # a newer draft: not what an audit takes
    pushed = cli("argilla", "push", "d", "--dataset", "audit", "--url", "http://127.0.0.1:9", "--api-key", "x" * 40,
                 store=store_root)
    assert f"push: d is {ref}, its latest validated version" in pushed.stdout
    assert pushed.returncode == 2 and "cannot reach Argilla" in pushed.stderr  # the server is asked only after
    none = cli("argilla", "push", "nothing-here", "--dataset", "audit", store=store_root)
    one_line_exit_2(none, "does not exist")
