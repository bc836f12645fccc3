"""Scheduling end to end, as README tells it: `prefdata serve` in one process, `prefdata run` in
another triggers a served deployment now, and the serving process executes it. Neither sets
PREFECT_HOME: prefdata's default (.prefdata/prefect in the working folder) is what lets them meet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_second_process_triggers_a_served_deployment(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_API_URL")}
    env.update(PREFDATA_STORE=str(tmp_path / "store"), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
               PREFECT_RUNNER_POLL_FREQUENCY="2")
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps({"prompt": f"q{i}?", "chosen": f"yes {i}", "rejected": f"no {i}"}) + "\n"
                           for i in range(20)))

    def prefdata(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=timeout)

    imported = prefdata("import", str(src), "--name", "pairs")
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    serving = subprocess.Popen([sys.executable, "-m", "prefdata", "serve", "--file", str(REPO / "prefect.yaml"),
                                "--only", "validate/on-demand"], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(serving.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        while not any("being served" in line for line in output):  # Prefect's word that it polls for runs
            assert serving.poll() is None and time.monotonic() < deadline, "".join(output)
            time.sleep(0.5)
        triggered = prefdata("run", "validate/on-demand", "--param", f"dataset={ref}", "--wait", "--timeout", "240")
        # 20 pairs and no card fail the default checklist: the gate's run ends Failed, and the shell that
        # started it is told why (it used to end Completed, exit 0, the reason only in the serving shell)
        assert triggered.returncode == 1, triggered.stdout + triggered.stderr + "".join(output)
        assert "validate/on-demand: flow run" in triggered.stdout and "Running" in triggered.stdout
        assert "Failed" in triggered.stdout and "the checklist failed (" in triggered.stderr
        assert "min_size" in triggered.stderr and "(checklist: default)" in triggered.stderr
        mistyped = prefdata("run", "validate/on-demand", "--param", f"datset={ref}")
        assert mistyped.returncode == 2 and "no parameter 'datset': did you mean 'dataset'?" in mistyped.stderr
        assert (tmp_path / ".prefdata" / "prefect").is_dir()  # the one home both processes used
    finally:
        serving.send_signal(signal.SIGINT)
        try:
            serving.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serving.kill()
            serving.wait()
