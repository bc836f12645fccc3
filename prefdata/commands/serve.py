"""`prefdata serve`: the deployments of prefect.yaml, with their cron schedules, served locally;
`prefdata run`: a run of one of them now, from another shell.

Both talk to the Prefect API that $PREFECT_HOME names (prefdata sets it to .prefdata/prefect when
unset, for every command, so a serving shell and a triggering one meet in the same database).
Only typer at import time: `prefdata --help` must not load Prefect.
"""

from __future__ import annotations

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
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run to end; exit 1 unless it completed.")] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.", min=1)] = 3600,
) -> int:
    """Start a run of a served (or deployed) deployment now; `prefdata serve` (or a worker) executes it."""
    import yaml

    from prefdata.base.errors import UnusableInput

    parameters = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UnusableInput(f"--param {item!r}: write KEY=VALUE")
        parameters[key] = yaml.safe_load(value)
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    try:
        flow_run = run_deployment(deployment, parameters=parameters, timeout=timeout if wait else 0)
    except ObjectNotFound:
        import os

        raise UnusableInput(f"no deployment {deployment!r} in the Prefect API of PREFECT_HOME={os.environ.get('PREFECT_HOME')}: "
                            "start `prefdata serve` (from the same folder), or name one it lists") from None
    print(f"{deployment}: flow run {flow_run.name} ({flow_run.id}): {flow_run.state.name if flow_run.state else 'scheduled'}")
    if not wait:
        return 0
    if flow_run.state is not None and flow_run.state.is_completed():
        return 0
    if flow_run.state is not None and flow_run.state.message:  # the flow's own reason, where the user is
        print(f"{deployment}: {flow_run.state.message}", file=sys.stderr)
    return 1
