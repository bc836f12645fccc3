"""The store against someone who edits it by hand: a forged status or a swapped check report never
passes verify, train or the flows; the key that signs statuses stays private; stray files, killed
writers, odd names and a store this user cannot write are each one clear line with the right code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.data.store import KEY_ENV, KEY_FILE, Store, check_name, parse_ref

ROWS = [{"prompt": f"question {i}", "chosen": f"good answer {i}", "rejected": f"bad {i}"} for i in range(20)]
REPORT = {"passed": True, "checks": [{"id": "min_size", "status": "pass", "metric": 20, "threshold": 10}]}


def cli(*args: str, store: Path, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    full = {**os.environ, "PREFDATA_STORE": str(store), **(env or {})}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=full,
                          timeout=300, **kw)


def imported(store: Path, name: str = "demo", rows: list[dict] = ROWS, env: dict | None = None) -> str:
    src = store.parent / f"{name}-{len(rows)}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = cli("import", str(src), "--name", name, store=store, env=env)
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


def manifest_path(store: Path, ref: str) -> Path:
    return Path(Store(str(store)).path(ref)) / "manifest.json"


def sed(path: Path, old: str, new: str) -> None:
    """What `sed -i 's/old/new/'` does to the manifest."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


# -- 1. a forged status ----------------------------------------------------------------------------


def test_a_hand_edited_status_fails_verify_and_train_refuses_it_first(store_root):
    ref = imported(store_root)
    sed(manifest_path(store_root, ref), '"status": "draft"', '"status": "validated"')

    verified = cli("verify", ref, store=store_root)
    assert verified.returncode == 1 and "status" in verified.stdout and "no signature" in verified.stdout
    # train checks the dataset before anything else: the base model does not exist and is never looked at
    trained = cli("train", "dpo", "--dataset", ref, "--base-model", "/nonexistent/model", store=store_root)
    assert trained.returncode == 1, trained.stderr
    assert len(trained.stderr.strip().splitlines()) == 1 and "Traceback" not in trained.stderr
    assert ref in trained.stderr and "signature" in trained.stderr and "base" not in trained.stderr

    # publish refuses it too (a refused publish is the gate's exit 1), and does not take it as "already validated"
    published = cli("publish", ref, store=store_root)
    assert published.returncode == 1 and "signature" in published.stderr and "already" not in published.stdout

    from prefdata.trainers.data import load_validated

    with pytest.raises(GateFailed, match="signature"):
        load_validated(ref, str(store_root))


def test_a_signed_status_verifies_and_the_key_stays_private(store_root):
    ref = imported(store_root)
    store = Store()
    v = store.set_status(ref, "validated", report=REPORT)
    key_file = store_root / KEY_FILE
    assert key_file.is_file() and (key_file.stat().st_mode & 0o777) == 0o600
    key = key_file.read_text().strip()
    assert len(key) >= 32
    text = manifest_path(store_root, ref).read_text()
    assert key not in text and v.manifest["status_signature"]["mac"] in text
    assert store.verify(ref) == []
    done = cli("verify", ref, store=store_root)
    assert done.returncode == 0 and key not in done.stdout + done.stderr

    from prefdata.trainers.data import load_validated

    assert load_validated(ref, str(store_root)).ref == ref


def test_a_swapped_report_or_a_record_copied_from_another_version_is_detected(store_root):
    good = imported(store_root, "demo")
    other = imported(store_root, "demo", ROWS[:12])
    store = Store()
    store.set_status(good, "validated", report=REPORT)
    store.set_status(other, "rejected", report={"passed": False, "checks": [{"id": "min_size", "status": "fail"}]})

    # the other version's rejected report, made to say it passed
    sed(manifest_path(store_root, other), '"status": "fail"', '"status": "pass"')
    assert any("does not match its signature" in p for p in store.verify(other))

    # a validated version's whole status record (status, report, history, signature) pasted onto the other
    signed = json.loads(manifest_path(store_root, good).read_text())
    forged = json.loads(manifest_path(store_root, other).read_text())
    for field in ("status", "check_report", "status_history", "status_signature"):
        forged[field] = signed[field]
    manifest_path(store_root, other).write_text(json.dumps(forged))
    assert any("does not match its signature" in p for p in store.verify(other))
    assert cli("train", "dpo", "--dataset", other, store=store_root).returncode == 1

    # a validated version whose signature is dropped
    stripped = json.loads(manifest_path(store_root, good).read_text())
    del stripped["status_signature"]
    manifest_path(store_root, good).write_text(json.dumps(stripped))
    assert any("no signature" in p for p in store.verify(good))


def test_the_key_can_come_from_the_environment(store_root, monkeypatch):
    import secrets

    ci_key = secrets.token_hex(32)
    ref = imported(store_root, env={KEY_ENV: ci_key})  # signed from its creation with the environment's key
    monkeypatch.setenv(KEY_ENV, ci_key)
    Store().set_status(ref, "validated", report=REPORT)
    assert not (store_root / KEY_FILE).exists()  # the environment's key is used, no key file made
    assert Store().verify(ref) == []
    assert cli("verify", ref, store=store_root, env={KEY_ENV: ci_key}).returncode == 0
    assert ci_key not in manifest_path(store_root, ref).read_text()

    # another key (or none): the status cannot be trusted
    monkeypatch.setenv(KEY_ENV, secrets.token_hex(32))
    assert any("another key" in p for p in Store().verify(ref))
    monkeypatch.delenv(KEY_ENV)
    assert any("no key" in p for p in Store().verify(ref))

    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(UnusableInput, match=f"{KEY_ENV} is too short"):
        Store().set_status(ref, "validated")


def test_a_key_file_other_users_can_read_is_refused(store_root):
    ref = imported(store_root)
    Store().set_status(ref, "rejected", report=REPORT)
    (store_root / KEY_FILE).chmod(0o644)
    with pytest.raises(UnusableInput, match="chmod 600"):
        Store().verify(ref)
    done = cli("verify", ref, store=store_root)
    assert done.returncode == 2 and "chmod 600" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- 2. extra files, dot or not ---------------------------------------------------------------------


def test_dot_files_and_empty_folders_in_a_version_fail_verify(store_root):
    ref = imported(store_root)
    folder = Path(Store().path(ref))
    (folder / ".evil").touch()
    (folder / "data" / ".evil.parquet").touch()
    (folder / ".hidden").mkdir()
    problems = Store().verify(ref)
    assert {"extra: .evil", "extra: data/.evil.parquet", "extra: .hidden/"} <= set(problems), problems
    done = cli("verify", ref, store=store_root)
    assert done.returncode == 1 and "extra: data/.evil.parquet" in done.stdout


def test_set_status_leaves_nothing_of_its_own_in_the_version_folder(store_root):
    ref = imported(store_root)
    store = Store()
    for status in ("rejected", "draft", "validated"):
        store.set_status(ref, status, report=REPORT)
    assert store.verify(ref) == []
    names = {p.name for p in (store_root / "demo").iterdir()}
    assert names == {ref.split("@")[1], ".lock"}, names


# -- 3. staging left by a killed import --------------------------------------------------------------

HANG_BEFORE_RENAME = """
import sys, time
from prefdata.data import store as s
s.Store._rename = lambda self, staging, final: time.sleep(3600)  # a writer stuck (or killed) just before publishing
from prefdata.commands.cli import main
main(["import", sys.argv[1], "--name", "race"])
"""


def staging_of(root: Path) -> set[str]:
    return {p.name for p in (root / "race").iterdir() if p.name.startswith(".tmp-")} if (root / "race").exists() else set()


def start_hung_writer(root: Path, src: Path) -> tuple[subprocess.Popen, str]:
    before = staging_of(root)
    proc = subprocess.Popen([sys.executable, "-c", HANG_BEFORE_RENAME, str(src)],
                            env={**os.environ, "PREFDATA_STORE": str(root)})
    for _ in range(600):  # until its staging folder holds a whole version (the manifest is written last)
        new = staging_of(root) - before
        if new and (root / "race" / next(iter(new)) / "manifest.json").exists():
            return proc, next(iter(new))
        assert proc.poll() is None, "the writer exited before staging"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the writer never staged its version")


def test_a_killed_import_leaves_staging_that_the_next_write_removes_but_a_live_ones_stays(store_root, tmp_path):
    srcs = []
    for k, rows in enumerate([ROWS, ROWS[:9], ROWS[2:]]):
        srcs.append(tmp_path / f"s{k}.jsonl")
        srcs[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    killed, dead_staging = start_hung_writer(store_root, srcs[0])
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert dead_staging in staging_of(store_root)  # a whole version's files, left behind
    live, live_staging = start_hung_writer(store_root, srcs[1])
    try:
        assert dead_staging not in staging_of(store_root)  # the next writer removed the dead one's
        # staging in the old form (no writer recorded): removed only once it is old
        old, fresh = store_root / "race" / ".tmp-0123456789abcdef", store_root / "race" / ".tmp-fedcba9876543210"
        for folder in (old, fresh):
            (folder / "data").mkdir(parents=True)
            (folder / "data" / "train-00000-of-00001.parquet").write_bytes(b"partial")
        long_ago = time.time() - 3 * 24 * 3600
        for path in (old / "data" / "train-00000-of-00001.parquet", old / "data", old):
            os.utime(path, (long_ago, long_ago))
        assert {live_staging, old.name, fresh.name} <= staging_of(store_root)

        done = cli("import", str(srcs[2]), "--name", "race", store=store_root)
        assert done.returncode == 0, done.stderr
        left = staging_of(store_root)
        assert old.name not in left  # untouched for three days: stale
        assert live_staging in left and fresh.name in left  # a live writer's work is never touched
        assert live.poll() is None
    finally:
        live.kill()
        live.wait()
    for v in Store().versions("race"):
        assert Store().verify(v.ref) == []


# -- 4. names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["abc\n", "abc\n@1234", "abc@1234\n", "abc@12345678\n"])
def test_a_trailing_newline_is_not_a_name_or_a_version(bad):
    with pytest.raises(UnusableInput):
        parse_ref(bad)


def test_import_refuses_a_name_with_a_newline(store_root, tmp_path):
    with pytest.raises(UnusableInput):
        check_name("abc\n")
    src = tmp_path / "d.jsonl"
    src.write_text(json.dumps(ROWS[0]) + "\n")
    done = cli("import", str(src), "--name", "abc\n", store=store_root)
    assert done.returncode == 2 and "not allowed" in done.stderr and not (store_root / "abc\n").exists()


# -- 5. status history ------------------------------------------------------------------------------


def test_the_same_status_again_adds_no_history(store_root):
    ref = imported(store_root)
    store = Store()
    store.set_status(ref, "rejected", report={"passed": False, "checks": []})
    store.set_status(ref, "rejected", report={"passed": False, "checks": []})
    store.set_status(ref, "validated", report=REPORT)
    store.set_status(ref, "validated", report=REPORT)
    store.set_status(ref, "validated", report={"passed": True, "checks": []})  # validated is final: nothing changes
    m = store.get(ref).manifest
    assert [h["status"] for h in m["status_history"]] == ["draft", "rejected", "validated"]
    assert m["check_report"] == REPORT and store.verify(ref) == []

    before = manifest_path(store_root, ref).read_bytes()
    again = cli("publish", ref, store=store_root)
    assert again.returncode == 0 and "already validated" in again.stdout
    assert manifest_path(store_root, ref).read_bytes() == before


# -- 6. a store this user cannot write -----------------------------------------------------------------


def test_an_import_into_a_read_only_store_is_one_line_and_exit_2(tmp_path):
    if os.geteuid() != 0:
        drop = []  # already an ordinary user: a folder without write permission is enough
    else:
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # Outside pytest's tmp_path (mode 0700, owned by root) so that the other uid can reach it.
    top = Path(tempfile.mkdtemp(prefix="prefdata-ro-"))
    try:
        top.chmod(0o755)
        src = top / "pairs.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
        src.chmod(0o644)
        store = top / "store"
        (store / "existing").mkdir(parents=True)
        for folder in (store / "existing", store):
            folder.chmod(0o555)  # nobody (root aside) writes here
        env = {**os.environ, "PREFDATA_STORE": str(store), "HOME": str(top)}
        for name in ("fresh", "existing"):
            done = subprocess.run([*drop, sys.executable, "-m", "prefdata", "import", str(src), "--name", name],
                                  capture_output=True, text=True, env=env, timeout=300, cwd=top)
            assert done.returncode == 2, done.stderr
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
            assert "cannot write" in done.stderr and str(store) in done.stderr and "--store" in done.stderr
    finally:
        for folder in (top / "store", top / "store" / "existing"):
            if folder.exists():
                folder.chmod(0o755)
        import shutil

        shutil.rmtree(top, ignore_errors=True)


def test_a_validated_version_copied_under_another_name_is_not_validated_there(store_root):
    import shutil

    ref = imported(store_root, "good")
    Store().set_status(ref, "validated", report=REPORT)
    version = ref.split("@")[1]
    shutil.copytree(store_root / "good" / version, store_root / "other" / version)
    problems = Store().verify(f"other@{version}")
    assert any(p.startswith("manifest: it names good@") for p in problems), problems
    assert cli("train", "dpo", "--dataset", f"other@{version}", store=store_root).returncode == 1


# -- every manifest field is signed; a damaged manifest harms only itself (issue 23) ----------------


@pytest.mark.parametrize(("old", "new"), [
    ('"created_at": "20', '"created_at": "29'),        # "latest" is picked by this date
    ('"kept": 20', '"kept": 19'),                      # counts
    ('"importer": "trl"', '"importer": "hh-rlhf"'),    # lineage
    ('"prompt": "String"', '"prompt": "Int64"'),       # schema
])
def test_every_manifest_field_is_signed(store_root, old, new):
    ref = imported(store_root)
    Store().set_status(ref, "validated", report=REPORT)
    assert cli("verify", ref, store=store_root).returncode == 0
    sed(manifest_path(store_root, ref), old, new)
    verified = cli("verify", ref, store=store_root)
    assert verified.returncode == 1 and "does not match its signature" in verified.stdout
    listed = cli("versions", store=store_root)
    assert f"{ref}  validated?" in listed.stdout


def test_a_signature_from_before_every_field_was_signed_still_verifies(store_root):
    """A manifest signed by the older scheme (status record only) keeps verifying on those fields."""
    from prefdata.data.store import _SIGNED_V1, Store, key_id, status_mac

    ref = imported(store_root)
    store = Store()
    v = store.set_status(ref, "validated", report=REPORT)
    manifest = json.loads(manifest_path(store_root, ref).read_text())
    key = store._key(create=False)
    manifest["status_signature"] = {"alg": "hmac-sha256", "key_id": key_id(key), "signed": list(_SIGNED_V1),
                                    "mac": status_mac(manifest, key, _SIGNED_V1)}
    manifest_path(store_root, ref).write_text(json.dumps(manifest))
    assert store.verify(v.ref) == []
    for forged in (["name", "version", "status"], [{"a": 1}], "name"):  # lists no prefdata signs, and no list
        manifest["status_signature"]["signed"] = forged
        manifest_path(store_root, ref).write_text(json.dumps(manifest))
        assert "no prefdata signs" in store.verify(v.ref)[0]


@pytest.mark.parametrize("damage", ["{not json", "[]", '{"status": "draft"}'])
def test_a_damaged_manifest_is_listed_as_damaged_and_its_siblings_still_work(store_root, damage):
    good = imported(store_root, rows=ROWS)
    bad = imported(store_root, rows=ROWS[:15])
    manifest_path(store_root, bad).write_text(damage)

    listed = cli("versions", store=store_root)
    assert listed.returncode == 0, listed.stderr
    assert f"{bad}  damaged!" in listed.stdout and f"{good}  draft" in listed.stdout
    assert cli("verify", good, store=store_root).returncode == 0
    assert cli("show", "demo", store=store_root).returncode == 0  # latest: the readable one
    verified = cli("verify", bad, store=store_root)
    assert verified.returncode == 1 and "manifest.json is damaged" in verified.stdout
    shown = cli("show", bad, store=store_root)
    assert shown.returncode == 1 and len(shown.stderr.strip().splitlines()) == 1
    published = cli("publish", bad, store=store_root)
    assert published.returncode == 1 and "damaged" in published.stderr and "Traceback" not in published.stderr


def test_the_full_version_id_wins_over_a_folder_it_is_a_prefix_of(store_root):
    ref = imported(store_root)
    name, version = ref.split("@")
    folder = Path(Store().path(ref))
    import shutil

    shutil.copytree(folder, folder.parent / f"{version}ab")  # a look-alike whose name starts with the id
    assert Store().get(ref).version == version
    assert cli("verify", ref, store=store_root).returncode == 0


def test_versions_marks_a_status_it_cannot_check(store_root, monkeypatch):
    ref = imported(store_root)
    Store().set_status(ref, "validated", report=REPORT)
    listed = cli("versions", store=store_root, env={KEY_ENV: "short"})  # a key that cannot be used
    assert listed.returncode == 0
    assert f"{ref}  validated?" in listed.stdout and "? the status could not be checked" in listed.stdout
