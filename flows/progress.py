"""Follow a flow run's stages while it runs, through Prefect's own API.

The flow runs under a tag of its own (its subflows inherit it); beside it, a thread reads the task
runs of every flow run with that tag (`read_task_runs`) about once a second and hands them to a
display (prefdata/base/progress.py). Task runs reach the API from wherever they run (this process's
threads, Dask or Ray workers), so the progress is the same for every task runner, and nothing but
Prefect carries it. Progress never breaks a run: a failed read is skipped and tried again.
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

from prefect import tags
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
from prefect.client.schemas.sorting import TaskRunSort

from prefdata.base.progress import Count, Stage, tally

PAGE = 200  # the API's default page size


def task_runs(client: SyncPrefectClient, tag: str) -> list[tuple[str, str, str]]:
    """(name, state type, state name) of every task run of the flow runs tagged `tag`."""
    runs: dict = {}
    offset = 0
    while True:  # uuid7 ids grow with time: sorted by id, the pages hold still while states change
        page = client.read_task_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])),
                                     sort=TaskRunSort.ID_DESC, limit=PAGE, offset=offset)
        for run in page:
            runs[run.id] = (run.name, run.state_type.value if run.state_type else "PENDING", run.state_name or "")
        if len(page) < PAGE:
            return list(runs.values())
        offset += PAGE


def settled(counts: list[Count]) -> bool:
    """After the flow returned: every stage that ran is seen finished, the last one included. Task run
    states reach the API as events, a moment after the run itself moved on."""
    return bool(counts) and counts[-1].seen > 0 and all(c.finished for c in counts if c.seen)


@contextmanager
def followed(stages: list[Stage], display, interval_s: float = 1.0, settle_s: float = 15.0) -> Iterator[str]:
    """Run the block's flow under a fresh tag (yielded) while `display` shows its stages; when the block
    returns, wait up to `settle_s` for the last states to arrive, and show them."""
    tag = f"progress-{uuid.uuid4().hex[:12]}"
    counts: list[Count] = []
    try:
        # Made here, not in the thread: without PREFECT_API_URL this starts Prefect's ephemeral server,
        # once, before the flow looks for it (two threads starting it at once would start two).
        with get_client(sync_client=True) as client:
            def poll() -> list[Count]:
                nonlocal counts
                try:
                    counts = tally(stages, task_runs(client, tag))
                except Exception:  # noqa: BLE001 - the API busy or gone for a moment: the next poll tries again
                    pass
                return counts

            stop = threading.Event()

            def follow() -> None:
                while not stop.wait(interval_s):
                    display.update(poll())

            thread = threading.Thread(target=follow, name="prefdata-progress", daemon=True)
            thread.start()
            ok = False
            try:
                with tags(tag):
                    yield tag
                ok = True
            finally:
                stop.set()
                thread.join()
                deadline = time.monotonic() + (settle_s if ok else 0)
                while not settled(poll()) and time.monotonic() < deadline:
                    time.sleep(interval_s / 4)
    finally:
        display.close(counts)
