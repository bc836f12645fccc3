"""Run parameters are data, never code (issue 44, item 1): a spec, a config or a flow run's parameters
name only what the operator registered (prefdata/base/registry.py), and a deployment's run reaches only
the paths, servers and environment variables the operator allowed. Each reach the audit found is
refused through the command line and through a flow run created via Prefect's API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prefdata.base import registry
from prefdata.base.errors import UnusableInput

REPO = Path(__file__).resolve().parents[1]
API_RUN = """
import json, sys
from prefect.deployments import run_deployment
run = run_deployment(sys.argv[1], parameters=json.loads(sys.argv[2]), timeout=240)
print(run.state.type.value)
print(run.state.message)
"""
# A prompt that is also Python: `rule:timeit:timeit` ran it (the audit's probe).
PWNING_PROMPT = "open('PWNED', 'w').write('x'); 1/0"


def pairs_file(folder: Path, n: int = 12) -> Path:
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps({"prompt": PWNING_PROMPT if i == 0 else f"q{i}?", "chosen": f"yes {i}",
                                        "rejected": f"no {i}"}) + "\n" for i in range(n)))
    return path


def prefdata(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


# ---- the registry ------------------------------------------------------------------------------------

def test_builtins_resolve_by_name_or_their_own_target_and_nothing_else():
    assert registry.resolve("verifier", "world", "--judge") == "prefdata.world:verify"
    assert registry.resolve("verifier", "prefdata.world:verify", "--judge") == "prefdata.world:verify"
    assert registry.resolve("repair", "instructions", "repair") == "prefdata.world.instructions:repair"
    assert set(registry.entries("trainer")) >= {"rm", "dpo", "grpo", "ppo", "sft"}
    for kind, spec in (("verifier", "timeit:timeit"), ("verifier", "prefdata.world:evaluate"),
                       ("repair", "os:system"), ("evaluator", "builtins:exec"), ("trainer", "prefdata.world:verify")):
        with pytest.raises(UnusableInput) as refused:
            registry.resolve(kind, spec, "where")
        message = str(refused.value)
        assert "\n" not in message and f"where {spec!r} is not a registered" in message
        assert "PREFDATA_REGISTRY" in message and f"prefdata.{registry.KINDS[kind].section}" in message
    with pytest.raises(UnusableInput, match="did you mean 'world'"):
        registry.resolve("verifier", "wrold", "--judge")


def test_the_operators_file_adds_names_and_may_not_shadow_a_builtin(tmp_path, register):
    register(verifiers={"mine": "my_rules:verify"})
    assert registry.resolve("verifier", "mine", "--judge") == "my_rules:verify"
    assert registry.resolve("verifier", "my_rules:verify", "--judge") == "my_rules:verify"
    register(verifiers={"world": "os:system"})
    with pytest.raises(UnusableInput, match=r"\[verifiers\] world is already registered by prefdata"):
        registry.resolve("verifier", "world", "--judge")
    register(scripts={"x": "os:system"})
    with pytest.raises(UnusableInput, match=r"unknown table \[scripts\]"):
        registry.entries("verifier")
    (tmp_path / "registry.toml").write_text("[verifiers\n")
    with pytest.raises(UnusableInput, match="not valid TOML"):
        registry.entries("verifier")


def test_a_run_reaches_only_what_the_operator_allowed(tmp_path, monkeypatch, register):
    """A deployment's run: loopback servers, the working folder and the store; environment variables
    and other addresses and roots only when listed in [allow]."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFDATA_STORE", str(tmp_path / "store"))
    registry.check_path("reports/x", "checks.report_dir")
    registry.check_path(str(tmp_path / "store" / "a"), "store")
    registry.check_address("http://127.0.0.1:8000/v1", "judge.base_url")
    registry.check_address("http://[::1]:8000/v1", "judge.base_url")
    registry.check_address("local:2", "dask")
    refusals = [(registry.check_path, "/etc/passwd"), (registry.check_path, "../outside"),
                (registry.check_address, "http://198.51.100.7/v1"), (registry.check_address, "tcp://sched:8786"),
                (registry.check_env_name, "HOME")]
    (tmp_path / "link").symlink_to("/etc")
    refusals.append((registry.check_path, "link/passwd"))  # a link inside that points out is outside
    for check, value in refusals:
        with pytest.raises(UnusableInput, match="PREFDATA_REGISTRY"):
            check(value, "param")
    register(allow={"api_key_env": ["OPENAI_API_KEY"], "addresses": ["https://api.example.com/v1"],
                    "paths": ["/etc"]})
    registry.check_env_name("OPENAI_API_KEY", "judge.api_key_env")
    registry.check_address("https://api.example.com/v1/chat", "judge.base_url")
    registry.check_path("/etc/passwd", "prompts.source")
    for value in ("https://api.example.com/v10", "https://api.example.com.evil/v1"):
        with pytest.raises(UnusableInput):
            registry.check_address(value, "judge.base_url")
    with pytest.raises(UnusableInput):
        registry.check_env_name("HOME", "judge.api_key_env")


def test_every_reaching_parameter_of_the_flows_is_checked(tmp_path, monkeypatch):
    """check_reach walks the flows' parameter models: every field that names a path, a server or an
    environment variable, nested ones and a trainer's config mapping included, is refused outside."""
    from prefdata.flows.params import Checks, Engine, Humans, Judge, Policy, Prompts, Training, check_reach

    monkeypatch.chdir(tmp_path)
    outside = str(tmp_path.parent / "elsewhere")
    cases = {
        "prompts.source": {"prompts": Prompts(source="/etc/passwd")},
        "policy.base_url": {"policy": Policy(model="m", base_url="http://198.51.100.7:80/v1")},
        "policy.api_key_env": {"policy": Policy(model="m", base_url="http://127.0.0.1:1/v1", api_key_env="AWS_SECRET")},
        "judge.then.base_url": {"judge": Judge(then={"kind": "llm", "model": "j", "base_url": "http://198.51.100.7/v1"})},
        "humans.queue_dir": {"humans": Humans(queue_dir=outside)},
        "humans.argilla.url": {"humans": Humans(argilla={"url": "http://198.51.100.7:6900", "dataset": "d"})},
        "engine.address": {"engine": Engine(runner="dask", address="tcp://198.51.100.7:8786")},
        "engine.cache_dir": {"engine": Engine(cache_dir=outside)},
        "checks.report_dir": {"checks": Checks(report_dir=outside)},
        "checks.config": {"checks": Checks(config="/etc/hosts")},
        "checks.scorer": {"checks": Checks(scorer="llm:m@http://198.51.100.7/v1")},
        "checks.reference_prompts": {"checks": Checks(reference_prompts="/etc/hosts")},
        "training.output_dir": {"training": Training(output_dir=outside)},
        "training.config.general_sft": {"training": Training(config={"general_sft": "/etc/hosts"})},
        "store": {"store": outside},
        "guidelines": {"guidelines": "/etc/hosts"},
        "dask": {"dask": "tcp://198.51.100.7:8786"},
    }
    for where, parameters in cases.items():
        with pytest.raises(UnusableInput, match=f"^{where} ") as refused:
            check_reach(**parameters)
        assert "\n" not in str(refused.value)
    check_reach(prompts=Prompts(), policy=Policy(), judge=Judge(), humans=Humans(), engine=Engine(),
                checks=Checks(config="small-data", eval_data="evals@0123abcd", report_dir="reports"),
                training=Training(config={"output_dir": "runs/x"}), store="store", guidelines="guide.md", dask="local:2")


def test_parameter_models_refuse_unregistered_code_before_the_run():
    from pydantic import ValidationError

    from prefdata.flows.params import Checks, Judge, Policy, SimulatedAnnotators, Training

    assert Judge(verifier="world").verifier == "prefdata.world:verify"  # one judge to the cache and lineage
    assert Judge.model_validate("rule:world").verifier == "prefdata.world:verify"
    for build in (lambda: Judge(verifier="timeit:timeit"), lambda: Judge.model_validate("rule:os:system"),
                  lambda: Policy(repair="os:system"), lambda: SimulatedAnnotators(verifier="timeit:timeit"),
                  lambda: Checks(scorer="rule:timeit:timeit"), lambda: Training(method="os:system")):
        with pytest.raises(ValidationError, match="is not a registered"):
            build()


# ---- through the command line ------------------------------------------------------------------------

def test_the_command_line_never_runs_an_unregistered_verifier(tmp_path):
    data = pairs_file(tmp_path)
    for args in (["check", str(data), "--scorer", "rule:timeit:timeit"],
                 ["collect", "--prompts", "world", "--n", "2", "--policy", "world", "--judge", "rule:timeit:timeit", "--name", "x",
                  "--store", str(tmp_path / "store")]):
        out = prefdata(*args, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and "is not a registered verifier" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    assert not (tmp_path / "PWNED").exists()


def test_a_registered_verifier_runs_by_name_from_the_command_line(tmp_path, register):
    (tmp_path / "my_rules.py").write_text("def says_yes(prompt, completion):\n    return completion.startswith('yes')\n")
    register(verifiers={"says_yes": "my_rules:says_yes"})
    report = tmp_path / "report.json"
    out = prefdata("check", str(pairs_file(tmp_path)), "--scorer", "rule:says_yes", "--json", str(report),
                   cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stdout + out.stderr
    direction = next(c for c in json.loads(report.read_text())["checks"] if c["id"] == "label_direction")
    assert direction["status"] == "pass", direction


# ---- through a flow run created via Prefect's API -------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`prefdata serve` of the validate deployment in its own working folder and Prefect home; yields a
    function that creates a run through Prefect's API (`prefdata run --param ... --wait`)."""
    folder = tmp_path_factory.mktemp("served")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_API_URL", "PREFDATA_REGISTRY")}
    env.update(PREFDATA_STORE=str(folder / "store"), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
               PREFECT_RUNNER_POLL_FREQUENCY="2")
    imported = prefdata("import", str(pairs_file(folder)), "--name", "pairs", cwd=folder, env=env)
    assert imported.returncode == 0, imported.stderr
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    serving = subprocess.Popen([sys.executable, "-m", "prefdata", "serve", "--file", str(REPO / "prefect.yaml"),
                                "--only", "validate/on-demand", "--only", "train/train", "--only", "collect/nightly"], env=env, cwd=folder,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(serving.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        while not any("being served" in line for line in output):
            assert serving.poll() is None and time.monotonic() < deadline, "".join(output)
            time.sleep(0.5)

        def run(deployment: str, **params) -> subprocess.CompletedProcess:
            """A flow run created through Prefect's API (run_deployment), as the UI or any API client
            creates one: no command-line check on the way. Prints the final state's type and message."""
            home = {"PREFECT_HOME": str(folder / ".prefdata" / "prefect")}  # the one `prefdata serve` uses here
            return subprocess.run([sys.executable, "-c", API_RUN, deployment, json.dumps(params)], capture_output=True,
                                  text=True, cwd=folder, env={**env, **home}, timeout=300)

        def cli(*args: str) -> subprocess.CompletedProcess:
            return prefdata(*args, cwd=folder, env=env)
        yield folder, ref, run, cli, output
    finally:
        serving.send_signal(signal.SIGINT)
        try:
            serving.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serving.kill()
            serving.wait()


def test_a_flow_run_cannot_name_code(served):
    folder, ref, run, cli, output = served
    out = run("validate/on-demand", dataset=ref, checks={"scorer": "rule:timeit:timeit"})
    assert out.stdout.startswith("FAILED"), out.stdout + out.stderr + "".join(output)
    assert "is not a registered verifier" in out.stdout, out.stdout
    out = run("train/train", dataset=ref, training={"method": "os:system"})
    assert out.stdout.startswith("FAILED") and "is not a registered trainer plugin" in out.stdout, out.stdout
    # `prefdata run` checks the parameters before it creates a run at all: the same line, exit 2
    out = cli("run", "validate/on-demand", "--param", f"dataset={ref}", "--param", "checks={scorer: 'rule:timeit:timeit'}")
    assert out.returncode == 2 and "is not a registered verifier" in out.stderr and "flow run" not in out.stdout
    assert not (folder / "PWNED").exists()


def test_a_flow_run_cannot_write_or_read_outside_its_folder(served):
    folder, ref, run, cli, output = served
    outside = folder.parent / "written-by-a-run"
    out = run("validate/on-demand", dataset=ref, checks={"report_dir": str(outside)})
    assert out.stdout.startswith("FAILED"), out.stdout + out.stderr + "".join(output)
    assert "checks.report_dir" in out.stdout and "may read and write only inside" in out.stdout, out.stdout
    assert not outside.exists()
    out = run("validate/on-demand", dataset=ref, checks={"reference_prompts": "/etc/hostname"})
    assert out.stdout.startswith("FAILED") and "checks.reference_prompts" in out.stdout, out.stdout
    inside = run("validate/on-demand", dataset=ref, checks={"report_dir": "reports/mine"})  # inside: allowed
    assert (folder / "reports" / "mine" / "report.md").is_file(), inside.stdout + inside.stderr


def test_a_collect_run_cannot_name_code_a_key_or_a_server(served):
    """The collect deployment, through Prefect's API: a judge naming unregistered code, and a policy
    sending an environment variable's value to a server nobody allowed."""
    folder, ref, run, cli, output = served
    out = run("collect/nightly", judge={"kind": "verifier", "verifier": "timeit:timeit"})
    assert out.stdout.startswith("FAILED") and "is not a registered verifier" in out.stdout, out.stdout + out.stderr
    out = run("collect/nightly", policy={"model": "m", "base_url": "http://198.51.100.7:80/v1", "api_key_env": "HOME"})
    assert out.stdout.startswith("FAILED") and "policy.base_url" in out.stdout, out.stdout + out.stderr
    out = run("collect/nightly", policy={"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "HOME"})
    assert out.stdout.startswith("FAILED") and "policy.api_key_env 'HOME'" in out.stdout, out.stdout + out.stderr
    assert not (folder / "PWNED").exists()


def test_a_second_process_triggers_a_served_deployment(served):
    """Scheduling end to end, as README tells it: `prefdata serve` in one process, `prefdata run` in
    another triggers a served deployment now, and the serving process executes it. Neither sets
    PREFECT_HOME: prefdata's default (.prefdata/prefect in the working folder) is what lets them meet.
    (Here, beside the runs above: one served deployment, one Prefect server, for both.)"""
    folder, ref, run, cli, output = served
    triggered = cli("run", "validate/on-demand", "--param", f"dataset={ref}", "--wait", "--timeout", "240")
    # 12 pairs and no card fail the default checklist: the gate's run ends Failed, and the shell that
    # started it is told why (it used to end Completed, exit 0, the reason only in the serving shell)
    assert triggered.returncode == 1, triggered.stdout + triggered.stderr + "".join(output)
    assert "validate/on-demand: flow run" in triggered.stdout and "Running" in triggered.stdout
    assert "Failed" in triggered.stdout and "the checklist failed (" in triggered.stderr
    assert "min_size" in triggered.stderr and "(checklist: default)" in triggered.stderr
    mistyped = cli("run", "validate/on-demand", "--param", f"datset={ref}")
    assert mistyped.returncode == 2 and "no parameter 'datset': did you mean 'dataset'?" in mistyped.stderr
    assert (folder / ".prefdata" / "prefect").is_dir()  # the one home both processes used
