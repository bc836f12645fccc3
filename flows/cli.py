"""`prefdata serve`: the deployments of prefect.yaml, with their cron schedules, served locally.

Only typer at import time: `prefdata --help` must not load Prefect.
"""

from __future__ import annotations

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
