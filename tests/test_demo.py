"""`prefdata demo` as a user runs it: a real process, the real flows, judge server and trainer, on the
default demo world, shrunk by a config file to a few dozen prompts and a few training steps, with a
real local Argilla up (as after `prefdata argilla up`): the simulated annotators label the human
share through Argilla's API, each as its own user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import local_argilla

from prefdata.data.store import Store

SUMMARY_KEYS = {"task_accuracy_before", "task_accuracy_after", "general_accuracy_before", "general_accuracy_after",
                "judge_verifier_agreement", "judge", "audit", "labels", "rounds", "dataset_version", "model_dir", "sft_model_dir",
                "seconds"}
JUDGE_KEYS = {"decided_share", "agreement_decided", "first_position_rate", "longer_preference", "comparisons", "decided"}


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def argilla_workdir(tmp_path_factory):
    """A real argilla-server, started as `prefdata argilla up` starts it, in its own working folder."""
    from prefdata.argilla.server import free_port

    workdir = tmp_path_factory.mktemp("argilla")
    server = local_argilla(workdir)
    server.start(port=free_port(), log=print)
    yield workdir
    server.stop()


def test_demo_runs_the_whole_pipeline_and_leaves_a_summary(tmp_path, argilla_workdir):
    # A large audit share, so the judge-human kappa has enough audited pairs on 80 prompts.
    (tmp_path / "demo.yaml").write_text("prompts: 80\ncandidates: 4\nrounds: 2\naudit_share: 0.5\n"
                                         "training: {max_steps: 5}\n")
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFDATA_ARGILLA": str(argilla_workdir)}
    run = subprocess.run([sys.executable, "-m", "prefdata", "demo", "--out", str(out), "--config", str(tmp_path / "demo.yaml")],
                         capture_output=True, text=True, env=env, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    for key in ("task_accuracy_before", "task_accuracy_after", "general_accuracy_before", "general_accuracy_after"):
        assert 0.0 <= summary[key] <= 1.0
    # The accuracies are the verifier's on the world's held-out prompts: recompute "after" independently.
    from prefdata.world import build_world, evaluate

    world = build_world()
    assert summary["task_accuracy_before"] == world.info()["metrics"]["task_accuracy"]
    assert summary["sft_model_dir"] == str(world.sft)
    assert evaluate(summary["model_dir"], world=world.root)["task_accuracy"] == summary["task_accuracy_after"]
    # The trained model came from the validated version the summary names, and says so in its card.
    assert Store(str(out / "store")).get(summary["dataset_version"]).status == "validated"
    card = json.loads((Path(summary["model_dir"]) / "prefdata_train.json").read_text())
    assert card["dataset"] == summary["dataset_version"]
    # The shipped reference judge ran for real behind transformers serve, both orders per pair, and
    # judged: it decided most comparisons, and what it decided the verifier confirms.
    judge = summary["judge"]
    assert JUDGE_KEYS <= set(judge) and judge["template"] == "world-judge-v2" and judge["model"] == str(world.judge)
    assert judge["n"] > 0 and 0.0 <= summary["judge_verifier_agreement"] <= 1.0
    assert judge["decided_share"] >= 0.5 and judge["agreement_decided"] >= 0.85
    assert judge["first_position_rate"] == 0.5  # the reference judge answers the same question in both orders
    assert judge["longer_preference"] is None or 0.0 <= judge["longer_preference"] <= 1.0
    assert (out / "round1" / "judge-serve.log").is_file() and "[9/9]" in run.stdout
    # The summary's figures are the comparisons table's: recompute the decided share and who labelled.
    store = Store(str(out / "store"))
    rows = [row for r in summary["rounds"] for row in store.load(r["draft"], "comparisons").to_dicts()]
    assert judge["comparisons"] == len(rows) == sum(r["comparisons"] for r in summary["rounds"])
    assert judge["decided"] == sum(r["judge_label"] is not None for r in rows)
    labels = summary["labels"]
    assert labels["from_humans"] == sum(r["label_source"] == "human" and r["label"] is not None for r in rows)
    assert labels["from_judge"] + labels["from_humans"] == labels["n"] and 0.0 < labels["human_share"] < 1.0
    # The audit share went to humans too: its agreement with the judge is Cohen's kappa, measured.
    audit = summary["audit"]
    assert audit["n"] == sum(r["route"] == "both" for r in rows) > 0
    assert audit["judge_human_agreement"] is not None and -1.0 <= audit["judge_human_agreement"] <= 1.0, audit
    # A clean terminal: stage lines and one line per figure; the trainer's per-step dicts are in the log.
    assert len(run.stdout.splitlines()) <= 80, run.stdout
    assert "'loss'" not in run.stdout
    assert all("'loss'" in (out / f"round{n}" / "model" / "train.log").read_text() for n in (1, 2))
    # Two turns of the flywheel: round 2 samples from round 1's model and follows round 1's version.
    first, second = summary["rounds"]
    assert first["policy"] == summary["sft_model_dir"] and first["parent"] is None
    assert second["policy"] == first["model_dir"] and second["parent"] == first["dataset_version"]
    assert summary["model_dir"] == second["model_dir"] and summary["dataset_version"] == second["dataset_version"]
    assert summary["task_accuracy_after"] == second["task_accuracy"]
    lineage = store.get(second["draft"]).manifest["lineage"]
    assert lineage["parent"] == first["dataset_version"]
    assert {c["model"] for c in lineage["components"]["sampler"]} == {first["model_dir"]}
    for r in summary["rounds"]:
        assert store.get(r["dataset_version"]).status == "validated" and r["pairs"] > 0
        assert 0.0 <= r["judge_decided_share"] <= 1.0 and 0.0 <= r["human_share"] <= 1.0
        assert 0.0 <= r["task_accuracy"] <= 1.0 and 0.0 <= r["general_accuracy"] <= 1.0
    for line in ("judge decided:", "judge agrees with verifier:", "judge first-position rate:", "audit (judge and humans):",
                 "labels from humans:"):
        assert line in run.stdout
    # The human share went through Argilla: every queued pair got one vote per simulated annotator.
    assert summary["annotation"].startswith("argilla http://127.0.0.1:")
    queued = summary["dataset"]["queued"]
    assert queued > 0 and summary["dataset"]["votes"] == 3 * queued
    assert summary["iaa"] is not None
