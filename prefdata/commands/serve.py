"""`prefdata serve`: the deployments of prefect.yaml, with their cron schedules, served locally;
`prefdata run`: a run of one of them now, from another shell.

Both talk to the Prefect API that $PREFECT_HOME names (prefdata sets it to .prefdata/prefect when
unset, for every command, so a serving shell and a triggering one meet in the same database).
Only typer at import time: `prefdata --help` must not load Prefect.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer


def serve(
    file: Annotated[Path, typer.Option("--file", "-f", help="The deployments file.")] = Path("prefect.yaml"),
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Serve only FLOW/DEPLOYMENT (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check the deployments and list them; serve nothing.")] = False,
    limit: Annotated[Optional[int], typer.Option(help="At most this many runs at once (default: no limit).")] = None,
) -> int:
    """Serve prefect.yaml's deployments from this process: scheduled and triggered runs execute here."""
    from prefdata.flows.deployments import load

    served = load(file, only)
    for s in served:
        crons = ", ".join(f"{sch.cron} ({sch.timezone or 'UTC'})" for sch in s.schedules) or "no schedule"
        print(f"{s.full_name:24} {crons}")
    if dry_run:
        return 0
    from prefect import serve as prefect_serve

    prefect_serve(*[s.to_deployment() for s in served], limit=limit)
    return 0


def run(
    deployment: Annotated[str, typer.Argument(help="FLOW/DEPLOYMENT, as `prefdata serve` lists them (e.g. validate/on-demand).")],
    param: Annotated[Optional[list[str]], typer.Option("--param", "-p", help="KEY=VALUE (YAML value) over the deployment's "
                                                                             "parameters; repeatable.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run, printing each state with the time since it "
                                                      "was created; exit 1 with its reason unless it completed.")] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.", min=1)] = 3600,
) -> int:
    """Start a run of a served (or deployed) deployment now; `prefdata serve` (or a worker) executes it.
    Its parameters are checked against the flow's models first: a bad one is refused before any run exists."""
    import yaml

    from prefdata.base.errors import UnusableInput

    parameters = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UnusableInput(f"--param {item!r}: write KEY=VALUE")
        parameters[key] = yaml.safe_load(value)
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            found = client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            import os

            raise UnusableInput(f"no deployment {deployment!r} in the Prefect API of PREFECT_HOME="
                                f"{os.environ.get('PREFECT_HOME')}: start `prefdata serve` (from the same folder), or "
                                "name one it lists") from None
        _check_parameters(deployment, found, parameters)
        flow_run = run_deployment(deployment, parameters=parameters, timeout=0)
        print(f"{deployment}: flow run {flow_run.name} ({flow_run.id}): "
              f"{flow_run.state.name if flow_run.state else 'scheduled'}", flush=True)
        if not wait:
            return 0
        state = _follow(client, flow_run, deployment, timeout)
    if state is not None and state.is_completed():
        return 0
    if state is not None and state.message:  # the flow's own reason, where the user is
        print(f"{deployment}: {_reason(state.message)}", file=sys.stderr)
    elif state is None or not state.is_final():
        print(f"{deployment}: not finished after {timeout:g} s (--timeout); it goes on", file=sys.stderr)
    return 1


# How Prefect words a flow that raised: "Flow run encountered an exception: GateFailed: <our line>".
_RAISED = re.compile(r"^Flow run encountered an exception: (?:GateFailed|UnusableInput|NoSpace|PrefdataError|"
                     r"DamagedFile): ")


def _reason(message: str) -> str:
    """A failed run's message as the command would have printed it: prefdata's own errors as their one
    line, `prefdata: error: ...`; anything else (a crash, a bug) as Prefect gives it."""
    found = _RAISED.match(message)
    return f"prefdata: error: {message[found.end():]}" if found else message


def _check_parameters(name: str, deployment, given: dict) -> None:
    """The run's parameters (the deployment's, with `given` over them) against the flow's models: one
    line naming the first problem, and the nearest parameter for a mistyped name (exit 2)."""
    import difflib
    import inspect

    from prefect.flows import load_flow_from_entrypoint

    from prefdata.base.errors import UnusableInput
    from prefdata.flows.deployments import parameter_problem

    if not deployment.entrypoint:
        return
    try:
        flow = load_flow_from_entrypoint(deployment.entrypoint, use_placeholder_flow=False)
    except Exception:  # noqa: BLE001 - a flow this process cannot import: the worker's check stands
        return
    known = list(inspect.signature(flow.fn).parameters)
    for key in given:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise UnusableInput(f"{name}: no parameter {key!r}: {hint}it takes {', '.join(known)}")
    problem = parameter_problem(flow, {**(deployment.parameters or {}), **given})
    if problem:
        raise UnusableInput(f"{name}: {problem}")


def _follow(client, flow_run, name: str, timeout: float):
    """Print each state the run goes through, with seconds since it was created; its final state (None
    when `timeout` ran out first)."""
    import time

    start, last = time.monotonic(), None
    while time.monotonic() - start < timeout:
        state = client.read_flow_run(flow_run.id).state
        if state is not None and state.name != last:
            last = state.name
            print(f"{name}: {time.monotonic() - start:6.1f} s  {state.name}", flush=True)
        if state is not None and state.is_final():
            return state
        time.sleep(1.0)
    return None
