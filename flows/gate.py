"""The validate and publish flows: the checklist on a draft, reported as Prefect artifacts, and the
gate that makes it a validated version, which may start the training deployment.

They wire prefdata.gate.publishing, the one publish path `prefdata publish` takes too (its checklist run
is `prefdata check`'s, prefdata.gate.runner); nothing here decides a check or a status.
"""

from __future__ import annotations

import re

from prefect import flow, get_run_logger, task

from prefdata.flows.params import Checks, TrainTrigger, check_reach


def artifact_key(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes only (Prefect's rule)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def _settings(checks: Checks) -> dict:
    """The publishing functions' settings from the flow's parameters (the same names)."""
    return checks.model_dump()


@task(name="run-checklist")
def run_checklist(ref: str, checks: Checks, store: str | None, dask: str | None = None) -> dict:
    from prefdata.gate.publishing import validate_version
    from prefdata.data.store import Store

    return validate_version(Store(store), ref, **_settings(checks), dask=dask).as_dict()


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
def validate(dataset: str, checks: Checks = Checks(), store: str | None = None, dask: str | None = None) -> dict:
    """`dask`: run the checks that read every row on Dask, local:N or a scheduler's address (as
    `prefdata check --dask`); the workers must reach the store's files."""
    from prefect.runtime import deployment

    if deployment.id:  # a run anyone with the API could create: only what the operator allowed
        check_reach(checks=checks, store=store, dask=dask)
    result = run_checklist(dataset, checks, store, dask)
    _artifacts(result)
    get_run_logger().info("%s: checklist %s (report %s)", result["dataset"],
                          "passed" if result["passed"] else "FAILED", result["report_dir"])
    return result


@task(name="publish-version")
def publish_version(ref: str, checks: Checks, store: str | None) -> dict:
    """prefdata.gate.publishing.publish_version; the checklist's outcome becomes artifacts before the status is set."""
    from prefdata.gate.publishing import publish_version as publish_stored
    from prefdata.data.store import Store

    published = publish_stored(Store(store), ref, show=lambda validation: _artifacts(validation.as_dict()),
                               **_settings(checks))
    return {"dataset": published.dataset, "status": published.status,
            "report_dir": None if published.validation is None else str(published.validation.report_dir)}


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
    from prefect.runtime import deployment

    if deployment.id:  # a run anyone with the API could create: only what the operator allowed
        check_reach(checks=checks, train=train, store=store)
    logger = get_run_logger()
    result = publish_version(dataset, checks, store)
    if result["report_dir"] is None:
        logger.info("%s is already validated", result["dataset"])
        return {"dataset": result["dataset"], "status": "validated", "train_flow_run": None}
    logger.info("%s: validated", result["dataset"])
    run_id = trigger_training(result["dataset"], train, store) if train is not None else None
    return {**result, "train_flow_run": run_id}
