"""prefdata.base.allocator: the bulk data commands keep freed memory for reuse, and a user's own
allocator settings win. Each case runs in a fresh interpreter: the settings are per process, and
jemalloc reads its own once, when polars is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prefdata.base.allocator import JEMALLOC_KEEP_FREED

ENV = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "_RJEM_MALLOC_CONF"}

# A batch's worth of 1 MB buffers (200 MB) written and freed, ten times, in the main thread and in a
# worker thread (polars and the hashing threads allocate in both). By default glibc trims the freed
# heap at once and the next batch faults its pages in again (~0.7M faults); kept, ~0.1M.
CHURN = """
import json, resource, sys, threading
from prefdata.base.allocator import keep_freed_memory
done = keep_freed_memory() if sys.argv[1] == "keep" else None

def batches():
    for _ in range(10):
        buffers = [bytearray(b"x") * (1 << 20) for _ in range(200)]
        del buffers

before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
batches()
worker = threading.Thread(target=batches)
worker.start()
worker.join()
print(json.dumps({"done": done, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env or ENV, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_kept_memory_is_reused_not_faulted_in_again():
    default = _python(CHURN, "default")
    kept = _python(CHURN, "keep")
    assert kept["done"] == {"jemalloc": True, "glibc": True}
    assert default["faults"] > 2 * 10 * 200 * 256 / 2  # half the batches' pages faulted in again, at least
    assert kept["faults"] < default["faults"] / 4


def test_a_users_own_settings_win():
    code = ("import json, os; from prefdata.base.allocator import keep_freed_memory; "
            "print(json.dumps({'done': keep_freed_memory(), 'conf': os.environ.get('_RJEM_MALLOC_CONF')}))")
    mine = _python(code, env={**ENV, "MALLOC_ARENA_MAX": "2", "_RJEM_MALLOC_CONF": "narenas:1"})
    assert mine == {"done": {"jemalloc": False, "glibc": False}, "conf": "narenas:1"}
    after_polars = _python("import polars; " + code.replace("import json, os; ", "import json, os\n", 1))
    assert after_polars["done"]["jemalloc"] is False  # too late: jemalloc has read its settings
    assert JEMALLOC_KEEP_FREED not in after_polars["conf"]  # polars' own (dirty_decay_ms:500,...)


@pytest.mark.parametrize(("command", "kept"), [("import", True), ("versions", False)])
def test_the_bulk_data_commands_set_it_before_polars(tmp_path, command, kept):
    """The real command line (main() reading sys.argv), run to its end; what jemalloc was told is
    printed at exit."""
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "p?", "chosen": "a", "rejected": "b"}) + "\n")
    args = [command, str(data), "--name", "n"] if command == "import" else [command]
    code = ("import atexit, json, os, sys\n"
            "atexit.register(lambda: print(json.dumps({'conf': os.environ.get('_RJEM_MALLOC_CONF')})))\n"
            f"sys.argv = ['prefdata', *{args!r}]\n"
            "from prefdata.commands.cli import main\n"
            "main()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**ENV, "PREFDATA_STORE": str(tmp_path / "store")}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    conf = json.loads(run.stdout.strip().splitlines()[-1])["conf"] or ""
    assert conf.endswith(JEMALLOC_KEEP_FREED) is kept  # polars appends a setting it finds: the last wins
