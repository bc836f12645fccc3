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

SUMMARY_KEYS = {"task_accuracy_before", "task_accuracy_after", "general_accuracy_before", "general_accuracy_after",
                "judge_verifier_agreement", "dataset_version", "model_dir", "seconds"}


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
    (tmp_path / "demo.yaml").write_text("prompts: 80\ncandidates: 4\ntraining: {max_steps: 5}\n")
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
    assert evaluate(summary["model_dir"], world=world.root)["task_accuracy"] == summary["task_accuracy_after"]
    # The trained model came from the validated version the summary names, and says so in its card.
    from prefdata.store import Store

    assert Store(str(out / "store")).get(summary["dataset_version"]).status == "validated"
    card = json.loads((Path(summary["model_dir"]) / "prefdata_train.json").read_text())
    assert card["dataset"] == summary["dataset_version"]
    # The embedded judge ran for real: every comparison was judged in both orders and scored.
    assert summary["judge"]["n"] > 0 and 0.0 <= summary["judge_verifier_agreement"] <= 1.0
    assert (out / "judge-serve.log").is_file() and "[5/5]" in run.stdout
    # The human share went through Argilla: every queued pair got one vote per simulated annotator.
    assert summary["annotation"].startswith("argilla http://127.0.0.1:")
    queued = summary["dataset"]["queued"]
    assert queued > 0 and summary["dataset"]["votes"] == 3 * queued
    assert summary["iaa"] is not None
