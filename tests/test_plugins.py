"""A judge backend, a check and a trainer added from outside the package, the way another team's package
adds them: one module and its entry points (an installed distribution's `entry_points.txt`), nothing
in prefdata changed. Each then runs through the command line: the check in `prefdata check`, the
backend as `check --scorer` and `collect --judge`, the trainer as `prefdata train`. docs/architecture.md's
"Where to add" says the same three files (the code, its registration, its test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prefdata.checks.registry import BUILT_IN

REPO = Path(__file__).resolve().parents[1]

PLUGIN = textwrap.dedent('''
    """Another team's additions to prefdata: a check, a judge backend and a training method."""
    import json
    from dataclasses import dataclass
    from pathlib import Path

    import polars as pl

    from prefdata.base.specs import Backend
    from prefdata.checks.base import CheckResult
    from prefdata.checks.registry import Check
    from prefdata.collect.judging import Verdict
    from prefdata.trainers import Plugin


    # -- a check: chosen replies that shout --------------------------------------------------------------
    def check_no_shouting(pairs: pl.DataFrame, max_share: float = 0.0) -> CheckResult:
        loud = pairs.filter(pl.col("chosen").str.contains("!!!", literal=True))
        share = loud.height / max(pairs.height, 1)
        return CheckResult("no_shouting", "fail" if share > max_share else "pass", share, max_share,
                           tuple(loud["id"].to_list()), f"{loud.height} chosen replies shout")


    no_shouting = Check(check_no_shouting, lambda inputs: {"pairs": inputs.pairs}, reads="the chosen replies")


    # -- a judge backend: the shorter reply wins (shorter:ANY) -------------------------------------------
    class ShorterJudge:
        def judge(self, items):
            out = []
            for item in items:
                a, b = len(item.response_a), len(item.response_b)
                label = None if a == b else ("a" if a < b else "b")
                out.append(Verdict(item.pair_id, label, None if label is None else 1.0,
                                   "shorter" if label else "tie", "rule", "shorter", scores=(-a, -b)))
            return out


    class Shorter(Backend):
        roles = ("judge", "scorer")
        usage = "shorter:ANY"

        def judge(self, spec, options):
            return ShorterJudge()


    shorter = Shorter()


    # -- a training method: writes what it was given ----------------------------------------------------
    @dataclass
    class EchoConfig:
        base_model: str | None = None
        output_dir: str | None = None
        chat: str = "auto"
        system_prompt: str | None = None
        greeting: str = "hello"


    def run(cfg, data, output_dir, log):
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        pairs = len(data.train) + len(data.eval)
        (output_dir / "echo.json").write_text(json.dumps({"pairs": pairs, "greeting": cfg.greeting}))
        log(f"echo: {pairs} pairs")
        return output_dir, {"pairs": pairs}


    plugin = Plugin("echo", EchoConfig, run, "writes what it was given")
''')

ENTRY_POINTS = """\
[prefdata.checks]
no_shouting = team_additions:no_shouting

[prefdata.backends]
shorter = team_additions:shorter

[prefdata.trainers]
echo = team_additions:plugin
"""


@pytest.fixture
def installed(tmp_path, monkeypatch) -> Path:
    """team_additions as an installed distribution (a module and its dist-info) on the path, here and in
    every subprocess."""
    site = tmp_path / "site"
    dist = site / "team_additions-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "team_additions.py").write_text(PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: team-additions\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("PREFDATA_REGISTRY", raising=False)
    return site


def prefdata(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(cwd / "store")}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def write_pairs(path: Path) -> Path:
    """Eight pairs: the chosen reply is the shorter in six and shouts in two."""
    rows = [{"id": f"p{k}", "prompt": f"Question {k}?", "chosen": "Yes." if k < 6 else f"Yes, {k}!!!",
             "rejected": f"I would rather not say about {k}."} for k in range(6)]
    rows += [{"id": f"p{k}", "prompt": f"Question {k}?", "chosen": f"Yes indeed, {k}!!!", "rejected": "No."}
             for k in (6, 7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_outside_check_and_judge_backend_run_in_prefdata_check(installed, tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl")
    config = tmp_path / "config.json"  # the built-ins waived but label_direction: the plugins' findings alone
    config.write_text(json.dumps({"checks": {c: {"waive": "not this test"} for c in BUILT_IN
                                             if c != "label_direction"}}))

    listed = prefdata("check", "--list-checks", cwd=tmp_path)
    assert listed.returncode == 0 and "no_shouting" in listed.stdout, listed.stdout + listed.stderr

    result = prefdata("check", str(data), "--config", str(config), "--scorer", "shorter:any",
                      "--json", str(tmp_path / "report.json"), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr  # no_shouting fails: two of eight shout
    report = {c["id"]: c for c in json.loads((tmp_path / "report.json").read_text())["checks"]}
    assert report["no_shouting"]["status"] == "fail" and report["no_shouting"]["offending"] == ["p6", "p7"]
    # the shorter-reply judge agrees with six labels of eight: its verdicts reached label_direction
    direction = report["label_direction"]
    assert direction["metric"] == pytest.approx(6 / 8) and direction["offending"] == ["p6", "p7"], direction


def test_an_outside_judge_backend_judges_a_collect_run(installed, prefect_api, tiny_llama, tmp_path, capsys):
    from tests.test_collect_cli import cli

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is 2+2?\nName a colour.\nSay hi.\n")
    code, out, err = cli(capsys, "collect", "--prompts", str(prompts), "--policy", str(tiny_llama),
                         "--judge", "shorter:any", "--name", "shorter-judged", "--candidates", "2",
                         "--max-new-tokens", "4", "--cache-dir", str(tmp_path / "cache"),
                         "--queue-dir", str(tmp_path / "queues"), "--store", str(tmp_path / "store"),
                         "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["judge"]["n"] == 3
    from prefdata.data.store import Store

    lineage = Store(str(tmp_path / "store")).get(run["version"]).manifest["lineage"]
    assert "shorter" in json.dumps(lineage), lineage  # the draft records which judge decided


def test_an_outside_trainer_trains_from_a_validated_version(installed, tiny_llama, tmp_path):
    from tests.test_trainers import TINY, world_pairs

    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in world_pairs(TINY, 64)))
    imported = prefdata("import", "pairs.jsonl", "--name", "arith", "--card",
                        str(REPO / "prefdata/world/guidelines.md"), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    published = prefdata("publish", ref, "--config", str(REPO / "prefdata/world/checklist.yaml"), cwd=tmp_path)
    assert published.returncode == 0, published.stdout + published.stderr

    trained = prefdata("train", "echo", ref, "--base-model", str(tiny_llama), "--set", "greeting=hi",
                       "--output-dir", str(tmp_path / "echo"), cwd=tmp_path)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert json.loads((tmp_path / "echo" / "echo.json").read_text()) == {"pairs": 64, "greeting": "hi"}
    card = json.loads((tmp_path / "echo" / "prefdata_train.json").read_text())
    assert card["dataset"] == ref and card["method"] == "echo"
