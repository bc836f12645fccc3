"""Real mounts under the store, each in a mount namespace of its own (`unshare -rm`), so that nothing
outside the test sees them. A full disk (a 1 MB tmpfs): exit 4 in one line, nothing half-written
left behind (no staging folder, no temporary key, no temporary manifest), the store as it was. A
read-only mount: publish refuses before its checklist runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

# Runs inside the namespace, where STORE is the full disk; prints what it found as JSON.
INNER = textwrap.dedent('''
    import json, os, subprocess, sys
    store, work = sys.argv[1], sys.argv[2]
    env = {**os.environ, "PREFDATA_STORE": store}
    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env)
        return {"code": done.returncode, "stderr": done.stderr.strip().splitlines(), "stdout": done.stdout}
    def listing():
        return sorted(os.path.relpath(os.path.join(d, f), store) for d, ds, fs in os.walk(store) for f in fs + ds)
    out = {}
    # 1. an import bigger than the disk
    out["big_import"] = cli("import", f"{work}/big.jsonl", "--name", "big")
    out["after_big"] = listing()
    # 2. a small draft, then the disk filled to the last byte, then publish: the key cannot be written
    out["small_import"] = cli("import", f"{work}/small.jsonl", "--name", "small")
    ref = next(l.split()[1] for l in out["small_import"]["stdout"].splitlines() if l.startswith("version:"))
    def fill():
        try:
            with open(f"{store}/filler", "ab", buffering=0) as handle:
                while True:
                    handle.write(b"x" * 4096)
        except OSError:
            pass
    fill()
    out["before_publish"] = listing()
    publish = ("--config", f"{work}/waived.yaml", "--report-dir", f"{work}/reports")
    out["publish"] = cli("publish", ref, *publish)
    out["after_publish"] = listing()
    # 3. room again: another version is published (the key is made); full again: the manifest cannot be replaced
    os.remove(f"{store}/filler")
    other = cli("import", f"{work}/other.jsonl", "--name", "small")["stdout"]
    out["other_publish"] = cli("publish", next(l.split()[1] for l in other.splitlines() if l.startswith("version:")), *publish)
    fill()
    out["before_second"] = listing()
    out["second_publish"] = cli("publish", ref, *publish)
    out["after_second"] = listing()
    out["status"] = json.load(open(f"{store}/small/{ref.split('@')[1]}/manifest.json"))["status"]
    print(json.dumps(out))
''')


def test_a_full_disk_is_exit_4_and_leaves_nothing_half_written(tmp_path):
    from prefdata.checks.checklist import _registry

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no mount namespace here (unshare -rm): a full disk cannot be made without touching the host")
    work = tmp_path / "work"
    work.mkdir()
    import random

    rng = random.Random(0)

    def noise(n: int) -> str:  # text zstd cannot shrink much
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(n))

    rows = [{"prompt": f"question {i} " + noise(200), "chosen": f"answer {i} " + noise(400),
             "rejected": f"other {i} " + noise(300)} for i in range(3000)]  # ~2.7 MB of text: over the 1 MB disk
    (work / "big.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "small.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:20]))
    (work / "other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[20:40]))
    (work / "waived.yaml").write_text("checks:\n" + "".join(f"  {c}: {{waive: a test of the disk}}\n" for c in _registry()))
    (work / "inner.py").write_text(INNER)
    store = tmp_path / "store"
    store.mkdir()
    script = f"mount -t tmpfs -o size=1m tmpfs {store} && {sys.executable} {work / 'inner.py'} {store} {work}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)

    big = out["big_import"]
    assert big["code"] == 4 and len(big["stderr"]) == 1, big
    assert big["stderr"][0].startswith("prefdata: error: no space left on the disk")
    assert [p for p in out["after_big"] if ".tmp" in p or p.startswith("big/")] in ([], ["big"]), out["after_big"]

    assert out["small_import"]["code"] == 0, out["small_import"]
    published = out["publish"]
    assert published["code"] == 4 and len(published["stderr"]) == 1, published
    # no key, no temporary key or manifest left; only the lock file every publish leaves (empty, reused)
    assert [p for p in out["after_publish"] if p != "small/.lock"] == out["before_publish"]
    assert not any(".tmp" in p for p in out["after_publish"])
    assert out["other_publish"]["code"] == 0, out["other_publish"]
    second = out["second_publish"]
    assert second["code"] == 4 and len(second["stderr"]) == 1, second
    assert out["after_second"] == out["before_second"]  # the key was there: no temporary manifest left
    assert out["status"] == "draft"


def test_publish_on_a_read_only_store_refuses_before_the_checklist(tmp_path):
    """A store on a read-only mount: publish says so (exit 2) before running the checklist, whose report
    folder is never made."""
    from prefdata.checks.checklist import _registry

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no mount namespace here (unshare -rm): a read-only mount cannot be made without touching the host")
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    (work / "pairs.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}?", "chosen": f"yes {i}", "rejected": f"no {i}"})
                                              + "\n" for i in range(30)))
    (work / "waived.yaml").write_text("checks:\n" + "".join(f"  {c}: {{waive: a test}}\n" for c in _registry()))
    env = {"PREFDATA_STORE": str(store)}
    imported = subprocess.run([sys.executable, "-m", "prefdata", "import", str(work / "pairs.jsonl"), "--name", "d"],
                              capture_output=True, text=True, timeout=120, env={**__import__("os").environ, **env})
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    publish = (f"{sys.executable} -m prefdata publish {ref} --config {work / 'waived.yaml'} "
               f"--report-dir {work / 'reports'}")
    script = f"mount --bind {store} {store} && mount -o remount,ro,bind {store} && PREFDATA_STORE={store} {publish}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "cannot write to the store" in line and "not writable" in line
    assert not (work / "reports").exists()  # refused before the checklist ran
