"""The judges' global concurrency limit on a temporary Prefect server (flows.collect.set_judge_limit).

A temporary server keeps its slot counts in PREFECT_HOME's database but its leases in memory, and
revokes none: a run killed while judging left its slot held for every later run, and after `limit`
such kills collect waited forever for a slot. These tests kill a real holder and start a real
temporary server after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Holds a slot of the limit on a temporary server, then dies by SIGKILL (no release, no clean-up).
KILLED_WHILE_JUDGING = """
import os, signal
from prefect.concurrency.sync import concurrency
from prefdata.flows.collect import set_judge_limit
from prefdata.flows.server import temporary_api
with temporary_api():
    set_judge_limit.fn("prefdata-judge", 1)
    with concurrency("prefdata-judge", occupy=1, strict=True):
        os.kill(os.getpid(), signal.SIGKILL)
"""

# The next command: what the database counts as held, what set_judge_limit frees, and whether a
# judging task then gets its slot (within 10 s, not forever).
NEXT_RUN = """
import json
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefdata.flows.collect import set_judge_limit
from prefdata.flows.server import temporary_api
with temporary_api():
    with get_client(sync_client=True) as client:
        held = client.read_global_concurrency_limit_by_name("prefdata-judge").active_slots
    freed = set_judge_limit.fn("prefdata-judge", 1)
    with concurrency("prefdata-judge", occupy=1, timeout_seconds=10, strict=True):
        got = True
print(json.dumps({"held": held, "freed": freed, "got": got}))
"""


def _python(code: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a temporary server, not a harness
    env.update(PREFECT_HOME=str(home), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_a_slot_left_by_a_killed_run_is_freed_by_the_next_run_on_a_temporary_server(tmp_path):
    killed = _python(KILLED_WHILE_JUDGING, tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    after = _python(NEXT_RUN, tmp_path)
    assert after.returncode == 0, after.stderr[-2000:]
    # the kill left the slot counted (the only one of limit 1); the next run freed it and judged
    assert json.loads(after.stdout.strip().splitlines()[-1]) == {"held": 1, "freed": 1, "got": True}


def test_on_a_prefect_server_the_limit_is_set_and_held_slots_are_left_alone(prefect_api):
    """A Prefect server (here the test harness's) revokes a dead run's lease itself: a slot held by a
    live holder stays held."""
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency

    from prefdata.flows.collect import set_judge_limit

    set_judge_limit.fn("slots-test", 2)
    with concurrency("slots-test", occupy=1, strict=True):
        assert set_judge_limit.fn("slots-test", 3) == 0
        with get_client(sync_client=True) as client:
            limit = client.read_global_concurrency_limit_by_name("slots-test")
        assert (limit.limit, limit.active_slots) == (3, 1)
