"""A check from outside the package (checks/registry.py CHECKS: the built-ins plus the generic
registry's kind "check"): registered through the operator's PREFDATA_REGISTRY file, it runs in
`prefdata check FILE` beside the built-ins, its finding in the report and the exit code following
its status, with its defaults from its own declaration; a sharded run, which its traits leave out,
skips it in one line; a built-in's name or an entry that is no Check is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prefdata.base.errors import UnusableInput
from prefdata.checks.registry import BUILT_IN

PLUGIN = textwrap.dedent('''
    import polars as pl

    from prefdata.checks.base import CheckResult
    from prefdata.checks.registry import Check


    def check_no_shouting(pairs: pl.DataFrame, max_share: float = 0.0, marker: str = "!!!") -> CheckResult:
        """Chosen replies that shout (hold `marker`): fails above `max_share` of the rows."""
        loud = pairs.filter(pl.col("chosen").str.contains(marker, literal=True))
        share = loud.height / pairs.height
        return CheckResult("no_shouting", "fail" if share > max_share else "pass", share, max_share,
                           tuple(loud["id"].to_list()), f"{loud.height} chosen replies shout {marker}")


    no_shouting = Check(check_no_shouting, lambda inputs: {"pairs": inputs.pairs}, reads="the chosen replies")
    not_a_check = check_no_shouting
''')
ONLY_THE_PLUGIN = {"checks": {c: {"waive": "not this test"} for c in BUILT_IN}}  # the built-ins waived


@pytest.fixture
def plugin(tmp_path, register, monkeypatch) -> Path:
    """The plugin's module on the path (here and in the subprocesses) and registered as `no_shouting`."""
    (tmp_path / "shouting_checks.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return register(checks={"no_shouting": "shouting_checks:no_shouting"})


def prefdata(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(cwd / "store")}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def write_pairs(path: Path, loud: int, rows: int = 20) -> Path:
    path.write_text("".join(json.dumps({"id": f"p{k}", "prompt": f"Question {k}?",
                                        "chosen": f"Answer {k}{'!!!' if k < loud else '.'}",
                                        "rejected": f"No idea about {k}."}) + "\n" for k in range(rows)))
    return path


def test_a_registered_check_runs_in_check_and_its_status_sets_the_exit_code(plugin, tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl", loud=2)
    only = tmp_path / "only.json"
    only.write_text(json.dumps(ONLY_THE_PLUGIN))

    failed = prefdata("check", str(data), "--config", str(only), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAIL  no_shouting" in failed.stdout and "2 chosen replies shout !!!" in failed.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    [mine] = [c for c in report["checks"] if c["id"] == "no_shouting"]
    assert mine["offending"] == ["p0", "p1"] and mine["threshold"] == 0.0 and mine["status"] == "fail"

    # a config sets its parameters as a built-in's (checked against its function's defaults' types)
    lenient = tmp_path / "lenient.json"
    lenient.write_text(json.dumps({"checks": {**ONLY_THE_PLUGIN["checks"], "no_shouting": {"max_share": 0.5}}}))
    passed = prefdata("check", str(data), "--config", str(lenient), cwd=tmp_path)
    assert passed.returncode == 0 and "PASS  no_shouting" in passed.stdout, passed.stdout + passed.stderr
    lenient.write_text(json.dumps({"checks": {"no_shouting": {"max_share": "half"}}}))
    refused = prefdata("check", str(data), "--config", str(lenient), cwd=tmp_path)
    assert refused.returncode == 2 and "no_shouting.max_share must be a number" in refused.stderr, refused.stderr

    # its defaults are its own declaration's (its function's keyword defaults): listed, and in the report
    listed = prefdata("check", "--list-checks", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("no_shouting"))
    assert "max_share=0.0" in line and "marker=!!!" in line
    assert "reads: the chosen replies" in listed.stdout


def test_a_sharded_run_skips_a_check_its_engines_leave_out(plugin, tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl", loud=2, rows=40)
    only = tmp_path / "only.json"
    only.write_text(json.dumps(ONLY_THE_PLUGIN))
    done = prefdata("check", str(data), "--config", str(only), "--batch-rows", "10", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "SKIP no_shouting" in out and "not run on a sharded run" in out and "engines are memory" in out


def test_a_built_ins_name_or_an_entry_that_is_no_check_is_refused_in_one_line(plugin, register, tmp_path):
    from prefdata.checks.registry import CHECKS

    assert list(CHECKS)[-1] == "no_shouting" and list(CHECKS)[:len(BUILT_IN)] == list(BUILT_IN)
    register(checks={"min_size": "shouting_checks:no_shouting"})
    with pytest.raises(UnusableInput, match="'min_size' is a built-in check's name; register it under another name"):
        list(CHECKS)
    done = prefdata("check", "--list-checks", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "built-in check's name" in done.stderr and "Traceback" not in done.stderr

    register(checks={"loud": "shouting_checks:not_a_check"})
    with pytest.raises(UnusableInput, match="is a function, not a prefdata.checks.registry.Check"):
        list(CHECKS)
