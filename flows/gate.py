"""The validate and publish flows: the checklist on a draft, reported as Prefect artifacts, and the
gate that makes it a validated version, which may start the training deployment.

They wire prefdata.gate (the same checklist run as `prefdata check` and `prefdata publish`) and the
store; nothing here decides a check.
"""

from __future__ import annotations

import re
from pathlib import Path

from prefect import flow, get_run_logger, task

from prefdata.flows.params import Checks, TrainTrigger


def artifact_key(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes only (Prefect's rule)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


@task(name="run-checklist")
def run_checklist(ref: str, checks: Checks, store: str | None) -> dict:
    from prefdata.checks.checklist import load_config
    from prefdata.gate import load_inputs, run_gate
    from prefdata.store import Store

    v = Store(store).get(ref)
    report_dir = Path(checks.report_dir or Path(".prefdata") / "reports" / f"{v.name}-{v.version}").resolve()
    config = load_config(checks.config)
    inputs, info = load_inputs(v.ref, eval_data=checks.eval_data, scorer=checks.scorer, store=store,
                               reference_prompts=Path(checks.reference_prompts) if checks.reference_prompts else None,
                               docs_dir=report_dir / "gx")
    outcome = run_gate(inputs, config, strict=checks.strict, report_dir=report_dir, title=f"validate {v.ref}")
    report = {**outcome.report, "config": config, "strict": checks.strict or bool(config.get("strict")), "input": info}
    return {"dataset": v.ref, "passed": outcome.passed, "report": report, "report_dir": str(report_dir),
            "reports": {k: str(p) for k, p in outcome.reports.items()}}


def _artifacts(result: dict) -> None:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    checks = result["report"]["checks"]
    key = artifact_key(f"checklist-{result['dataset'].split('@')[0]}")
    create_table_artifact(
        key=key, description=f"Checklist of {result['dataset']}",
        table=[{k: c.get(k) for k in ("id", "status", "metric", "threshold", "n_offending", "message")} for c in checks])
    failing = [c["id"] for c in checks if c["status"] in ("fail", "error")]
    lines = [f"# Checklist: {result['dataset']}", "",
             f"**{'passed' if result['passed'] else 'FAILED'}**: " + ", ".join(
                 f"{sum(c['status'] == s for c in checks)} {s}" for s in ("pass", "fail", "error", "skip")), ""]
    if failing:
        lines += [f"Failing: {', '.join(failing)}", ""]
    lines += [f"Report folder: [{result['report_dir']}](file://{result['report_dir']})", ""]
    lines += [f"- [{kind}](file://{path})" for kind, path in result["reports"].items()]
    create_markdown_artifact(key=f"{key}-summary", markdown="\n".join(lines),
                             description=f"Checklist summary of {result['dataset']}")


@flow(name="validate", description="Run the checklist on a dataset version; report it as artifacts.")
def validate(dataset: str, checks: Checks = Checks(), store: str | None = None) -> dict:
    result = run_checklist(dataset, checks, store)
    _artifacts(result)
    get_run_logger().info("%s: checklist %s (report %s)", result["dataset"],
                          "passed" if result["passed"] else "FAILED", result["report_dir"])
    return result


@task(name="set-status")
def set_status(ref: str, status: str, report: dict, store: str | None) -> None:
    from prefdata.store import Store

    Store(store).set_status(ref, status, report=report)


@task(name="trigger-training")
def trigger_training(ref: str, trigger: TrainTrigger, store: str | None) -> str:
    from prefect.deployments import run_deployment

    parameters = {"dataset": ref, "training": trigger.training().model_dump(), "store": store}
    # timeout=0 only schedules the run: a worker or `prefdata serve` picks it up.
    run = run_deployment(trigger.deployment, parameters=parameters, timeout=None if trigger.wait else 0)
    return str(run.id)


@flow(name="publish", description="Validate a draft; mark it validated only when the gate passes; maybe train.")
def publish(dataset: str, checks: Checks = Checks(), train: TrainTrigger | None = None,
            store: str | None = None) -> dict:
    from prefdata.errors import GateFailed
    from prefdata.store import Store

    logger = get_run_logger()
    st = Store(store)
    v = st.get(dataset)
    problems = st.verify(v.ref)
    if problems:
        raise GateFailed(f"{v.ref} fails verification ({problems[0]}); run `prefdata verify {v.ref}`")
    if v.status == "validated":
        logger.info("%s is already validated", v.ref)
        return {"dataset": v.ref, "status": "validated", "train_flow_run": None}
    result = validate(v.ref, checks, store)
    if not result["passed"]:
        set_status(v.ref, "rejected", result["report"], store)
        failing = [c["id"] for c in result["report"]["checks"] if c["status"] in ("fail", "error")]
        raise GateFailed(f"{v.ref} not published: the checklist failed ({', '.join(failing)}); marked rejected")
    set_status(v.ref, "validated", result["report"], store)
    logger.info("%s: validated", v.ref)
    run_id = trigger_training(v.ref, train, store) if train is not None else None
    return {"dataset": v.ref, "status": "validated", "report_dir": result["report_dir"], "train_flow_run": run_id}
