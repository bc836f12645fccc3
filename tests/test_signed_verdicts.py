"""Issue 44 item 3: a verdict covers exactly what was checked. Each audit case, through the real store
and the real command line:

  1. a manifest field the checklist read (lineage, counts, schema, dates), edited while it ran, is
     never signed: publish compares the whole manifest with the one it pinned;
  2. a draft is signed when it is made, so its lineage or dates edited before publish fail verify and
     publish (a draft from before that is readable, but publish refuses it until imported again);
  3. `publish --eval EVAL@V` pins and verifies the eval version as it does the version;
  4. a file in the working folder named like a ref never stands in for the store version in publish,
     validate or train; `check` says which of the two it read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from prefdata.data.store import Store

TIMEOUT = 120
ROWS = [{"prompt": f"question {i} about topic {i}", "chosen": f"good answer {i}", "rejected": f"bad answer {i}"}
        for i in range(20)]


def cli(*args: str, store: Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PREFDATA_STORE": str(store), **(env or {})}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=TIMEOUT)


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def imported(store: Path, name: str, rows: list[dict]) -> str:
    src = store.parent / f"{name}-{len(rows)}-{abs(hash(json.dumps(rows))) % 10**8}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = cli("import", str(src), "--name", name, store=store)
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


def waiving(path: Path, *, keep: tuple[str, ...] = ()) -> Path:
    """A checklist that waives every check but `keep`: what passes or fails is what the test says."""
    from prefdata.checks.checklist import _registry

    path.write_text("checks:\n" + "".join(f"  {c}: {{waive: a test}}\n" for c in _registry() if c not in keep))
    return path


def manifest_path(store: Path, ref: str) -> Path:
    name, version = ref.split("@")
    return store / name / version / "manifest.json"


def edit_manifest(store: Path, ref: str, change) -> None:
    path = manifest_path(store, ref)
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2))


# -- 1. the manifest edited while the checklist runs -------------------------------------------------

EDIT_WHILE_CHECKING = """
import json, sys
from pathlib import Path
from prefdata.gate import publishing

field, value, path = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
checked = publishing.validate_version

def validate_then_edit(*args, **kwargs):
    validation = checked(*args, **kwargs)  # the checklist has read the pinned manifest
    manifest = json.loads(path.read_text())
    manifest[field] = value if field != "lineage" else {**manifest["lineage"], **value}
    path.write_text(json.dumps(manifest, indent=2))  # a writer of the store, before publish signs
    return validation

publishing.validate_version = validate_then_edit
from prefdata.commands.cli import main
main(sys.argv[4:])
"""


@pytest.mark.parametrize(("field", "value"), [
    ("lineage", {"components": {"sampler": [{"model": "policy-a"}, {"model": "policy-b"}]}}),  # same_policy's input
    ("counts", {"read": 20, "kept": 20, "quarantined": 0, "rows": {"default": {"train": 20000}}}),
    ("schema", {"default": {"prompt": "Int64"}}),
    ("created_at", "2099-01-01T00:00:00.000000+00:00"),  # would become the name's latest
])
def test_a_manifest_edited_while_the_checklist_runs_is_never_signed(store_root, tmp_path, field, value):
    ref = imported(store_root, "c", ROWS)
    config = waiving(tmp_path / "waived.yaml", keep=("same_policy",))
    done = subprocess.run([sys.executable, "-c", EDIT_WHILE_CHECKING, field, json.dumps(value),
                           str(manifest_path(store_root, ref)), "publish", ref, "--config", str(config),
                           "--report-dir", str(tmp_path / "rep")],
                          capture_output=True, text=True, env={**os.environ, "PREFDATA_STORE": str(store_root)},
                          timeout=TIMEOUT)
    assert done.returncode == 1, done.stderr
    line = one_line(done)
    assert f"{ref}: its manifest changed while the checklist ran ({field})" in line and "nothing was signed" in line
    manifest = json.loads(manifest_path(store_root, ref).read_text())
    assert manifest["status"] == "draft" and "status_signature" not in manifest
    # and the edit is told: the draft's creation signature no longer holds
    verified = cli("verify", ref, store=store_root)
    assert verified.returncode == 1 and "creation: the manifest" in verified.stdout


def test_the_same_publish_without_an_edit_is_validated(store_root, tmp_path):
    """The control for the case above: the hook that edits nothing lets the verdict be signed."""
    ref = imported(store_root, "c", ROWS)
    config = waiving(tmp_path / "waived.yaml", keep=("same_policy",))
    published = cli("publish", ref, "--config", str(config), "--report-dir", str(tmp_path / "rep"), store=store_root)
    assert published.returncode == 0, published.stderr
    assert cli("verify", ref, store=store_root).returncode == 0


# -- 2. a draft is signed from its creation ---------------------------------------------------------


@pytest.mark.parametrize("edit", [
    lambda m: m["lineage"].update(parent="c@0123456789ab"),
    lambda m: m["lineage"]["sources"][0].update(path="/data/trusted-vendor.jsonl"),
    lambda m: m.update(created_at="2099-01-01T00:00:00.000000+00:00"),
    lambda m: m["counts"].update(read=m["counts"]["read"] + 5, quarantined=m["counts"]["quarantined"] + 5),
    lambda m: m.update(notes="added by hand"),  # a field of its own: the whole manifest is signed
], ids=["parent", "sources", "created_at", "counts", "new field"])
def test_a_draft_edited_before_publish_is_untrusted_and_refused(store_root, tmp_path, edit):
    ref = imported(store_root, "c", ROWS)
    assert cli("verify", ref, store=store_root).returncode == 0
    edit_manifest(store_root, ref, edit)

    verified = cli("verify", ref, store=store_root)
    assert verified.returncode == 1 and "does not match the signature made when the version was created" in verified.stdout
    assert f"{ref}  draft?" in cli("versions", store=store_root).stdout
    assert "untrusted creation:" in cli("show", ref, store=store_root).stdout
    published = cli("publish", ref, "--config", str(waiving(tmp_path / "waived.yaml")), store=store_root)
    assert published.returncode == 1
    assert f"{ref} fails verification (creation: the manifest" in one_line(published)
    assert json.loads(manifest_path(store_root, ref).read_text())["status"] == "draft"


def test_a_draft_from_before_signing_stays_readable_but_is_published_only_once_imported_again(store_root, tmp_path):
    src = tmp_path / "old.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    done = cli("import", str(src), "--name", "old", store=store_root)
    ref = next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))
    edit_manifest(store_root, ref, lambda m: m.pop("creation_signature"))  # as prefdata wrote drafts before

    assert f"{ref}  draft?" in cli("versions", store=store_root).stdout
    assert "unsigned draft (created before prefdata signed versions at creation)" in cli("show", ref, store=store_root).stdout
    config = waiving(tmp_path / "waived.yaml")
    assert cli("check", ref, "--config", str(config), store=store_root).returncode == 0  # still readable
    published = cli("publish", ref, "--config", str(config), store=store_root)
    assert published.returncode == 1 and "unsigned draft" in one_line(published) and "import its source again" in published.stderr

    again = cli("import", str(src), "--name", "old", store=store_root)  # the same content: the same version, signed
    assert again.returncode == 0 and ref in again.stdout
    assert cli("verify", ref, store=store_root).returncode == 0
    assert cli("publish", ref, "--config", str(config), store=store_root).returncode == 0


def test_a_version_validated_before_creation_signatures_still_verifies(store_root, tmp_path):
    """Its status signature covers every field: it stays usable without a creation signature."""
    ref = imported(store_root, "c", ROWS)
    assert cli("publish", ref, "--config", str(waiving(tmp_path / "waived.yaml")), store=store_root).returncode == 0
    edit_manifest(store_root, ref, lambda m: m.pop("creation_signature"))
    assert cli("verify", ref, store=store_root).returncode == 0
    assert cli("versions", store=store_root).stdout.split("\n")[1].split()[:2] == [ref, "validated"]
    again = cli("publish", ref, store=store_root)
    assert again.returncode == 0 and "already validated" in again.stdout
    edit_manifest(store_root, ref, lambda m: m["lineage"].update(parent="c@0123456789ab"))  # still covered
    assert cli("verify", ref, store=store_root).returncode == 1


# -- 3. the --eval version is pinned and verified ---------------------------------------------------


def test_an_eval_version_rewritten_in_the_store_is_refused_not_read(store_root, tmp_path):
    train = imported(store_root, "c", ROWS)
    ev = imported(store_root, "ev", ROWS[:5])  # the same prompts: split_isolation must fail
    config = waiving(tmp_path / "isolation.yaml", keep=("split_isolation",))
    shard = store_root / "ev" / ev.split("@")[1] / "data" / "train-00000-of-00001.parquet"
    genuine = shard.read_bytes()
    pl.DataFrame({"id": ["x"], "prompt": ["an unrelated prompt"], "chosen": ["a"], "rejected": ["b"]}).write_parquet(shard)

    published = cli("publish", train, "--eval", ev, "--config", str(config), store=store_root)
    assert published.returncode == 1
    line = one_line(published)
    assert f"{ev} fails verification (changed: data/train-00000-of-00001.parquet" in line
    assert json.loads(manifest_path(store_root, train).read_text())["status"] == "draft"  # nothing was judged

    shard.write_bytes(genuine)  # the eval set as it was stored: its prompts are the training prompts
    published = cli("publish", train, "--eval", ev, "--config", str(config), store=store_root)
    assert published.returncode == 1 and "split_isolation" in published.stderr
    report = json.loads(manifest_path(store_root, train).read_text())["check_report"]
    assert report["input"]["eval"] == ev  # the report names the eval version it was checked against


# -- 4. a file named like a ref ---------------------------------------------------------------------


def test_a_file_named_like_the_eval_ref_never_replaces_the_store_version(store_root, tmp_path):
    train = imported(store_root, "c", ROWS)
    ev = imported(store_root, "ev", ROWS[:5])
    config = waiving(tmp_path / "isolation.yaml", keep=("split_isolation",))
    work = tmp_path / "work"
    work.mkdir()
    unrelated = "".join(json.dumps({"prompt": f"unrelated {i}", "chosen": "a", "rejected": "b"}) + "\n" for i in range(5))
    (work / ev).write_text(unrelated)  # ./ev@ID: would make split_isolation pass

    published = cli("publish", train, "--eval", ev, "--config", str(config), store=store_root, cwd=work)
    assert published.returncode == 1 and "split_isolation" in published.stderr  # the store's eval set was read
    assert Store(str(store_root)).get(train).status == "rejected"

    # a bare name reads the store too; the file is named as a path
    (work / "evals.jsonl").write_text(unrelated)
    named = cli("publish", train, "--eval", "evals.jsonl", "--config", str(config), store=store_root, cwd=work)
    assert named.returncode == 2 and "write ./evals.jsonl to use the file" in one_line(named)
    as_path = cli("publish", train, "--eval", "./evals.jsonl", "--config", str(config), store=store_root, cwd=work)
    assert as_path.returncode == 0, as_path.stderr


def test_a_file_named_like_the_version_is_never_what_publish_validate_or_train_reads(store_root, tmp_path):
    long = [dict(r, chosen=r["chosen"] * 10) for r in ROWS]  # every chosen answer 10x its rejected one
    ref = imported(store_root, "c", long)
    config = waiving(tmp_path / "ratio.yaml", keep=("length_ratio",))
    work = tmp_path / "work"
    work.mkdir()
    (work / ref).write_text("".join(json.dumps(r) + "\n" for r in ROWS))  # ./c@ID: rows that pass

    # check reads the file, as it always has, and says so in one line naming both
    checked = cli("check", ref, "--config", str(config), store=store_root, cwd=work)
    assert checked.returncode == 0, checked.stderr
    notes = [line for line in checked.stderr.splitlines() if "note:" in line]
    assert len(notes) == 1 and f"{ref} is both a file here and the store version {ref}: checking the file" in notes[0]
    assert f"./{ref}" in notes[0]
    assert "note:" not in cli("check", f"./{ref}", "--config", str(config), store=store_root, cwd=work).stderr
    assert cli("check", ref, "--config", str(config), store=store_root).returncode == 1  # elsewhere: the version

    trained = cli("train", "dpo", ref, store=store_root, cwd=work)
    assert trained.returncode == 1 and f"{ref} is draft, not validated" in one_line(trained)
    published = cli("publish", ref, "--config", str(config), store=store_root, cwd=work)
    assert published.returncode == 1 and "length_ratio" in published.stderr  # the version, not the file
    assert Store(str(store_root)).get(ref).status == "rejected"


def test_the_validate_flow_reads_the_store_version_not_a_file(store_root, tmp_path, monkeypatch):
    """validate_version (the validate flow's task) resolves REF in the store only."""
    from prefdata.gate.publishing import validate_version

    long = [dict(r, chosen=r["chosen"] * 10) for r in ROWS]
    ref = imported(store_root, "c", long)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ref).write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    validation = validate_version(Store(str(store_root)), ref, config=waiving(tmp_path / "ratio.yaml", keep=("length_ratio",)),
                                  report_dir=tmp_path / "rep")
    assert not validation.passed and validation.failing == ["length_ratio"]
    assert validation.report["input"]["version"] == ref
