"""The validate and publish flows: the checklist on a draft, reported as Prefect artifacts, and the
gate that makes it a validated version, which may start the training deployment.

They wire prefdata.gate.publishing, the one publish path `prefdata publish` takes too (its checklist run
is `prefdata check`'s, prefdata.gate.runner); nothing here decides a check or a status.
"""

from __future__ import annotations

import re

from prefect import flow, get_run_logger, task

from prefdata.flows.params import Checks, TrainTrigger, check_reach, shipped


def artifact_key(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes only (Prefect's rule)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def _settings(checks: Checks) -> dict:
    """The publishing functions' settings from the flow's parameters (the same names)."""
    return {**checks.model_dump(), "config": shipped(checks.config, "checklist")}


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
    """The checklist on a stored version, reported as artifacts; the run ends Failed, naming the failing
    checks, when the checklist fails (a gate that fails never ends Completed).

    Args:
        dataset: NAME@VERSION, or NAME alone for its newest version.
        checks: The checklist's settings; with no config, a version validated (or rejected) before is
            held to the checklist it was published with, recorded in its signed report.
        store: The store root or fsspec URL, as every command's --store; None: $PREFDATA_STORE, else
            .prefdata/store in the run's working folder.
        dask: Run the checks that read every row on Dask, local:N or a scheduler's address (as
            `prefdata check --dask`); the workers must reach the store's files.
    """
    from prefect.runtime import deployment

    if deployment.id:  # a run anyone with the API could create: only what the operator allowed
        check_reach(checks=checks, store=store, dask=dask)
    result = run_checklist(dataset, checks, store, dask)
    _artifacts(result)
    get_run_logger().info("%s: checklist %s (report %s)", result["dataset"],
                          "passed" if result["passed"] else "FAILED", result["report_dir"])
    if not result["passed"]:  # a gate that fails must not end Completed; its report is an artifact already
        from prefdata.base.errors import GateFailed

        failing = [c["id"] for c in result["report"]["checks"] if c["status"] in ("fail", "error")]
        raise GateFailed(f"{result['dataset']}: the checklist failed ({', '.join(failing)}); report "
                         f"{result['report_dir']} (checklist: {result['report'].get('config_source')})")
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
    """The gate: a draft becomes validated only when the checklist passes (else rejected, and the run
    ends Failed with the ways out); a validated version may start the training deployment.

    Args:
        dataset: NAME@VERSION, or NAME alone for its newest version.
        checks: The checklist's settings (config, strict, scorer, eval set...).
        train: Start this training deployment on the version once validated; None trains nothing.
        store: The store root or fsspec URL, as every command's --store; None: $PREFDATA_STORE, else
            .prefdata/store in the run's working folder.
    """
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
