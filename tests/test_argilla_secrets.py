"""Secrets never on a command line (issue 44, item 6): the local Argilla server's owner password and API
key went to argilla-server's `database users create --password X --api-key Y`, which any user of the
machine reads with `ps`. A watcher reads every process's /proc/PID/cmdline while the owner is created."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from conftest import local_argilla


def _cmdlines() -> list[str]:
    seen = []
    for pid in Path("/proc").iterdir():
        if pid.name.isdigit():
            try:
                seen.append((pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return seen


def test_the_owners_password_and_key_never_reach_a_command_line(tmp_path):
    server = local_argilla(tmp_path / "argilla")
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(_cmdlines())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        server._set_up_database(log=lambda _: None)
    finally:
        done.set()
        watcher.join()
    owner = json.loads((tmp_path / "argilla" / "owner.json").read_text())
    assert (tmp_path / "argilla" / "owner.json").stat().st_mode & 0o777 == 0o600
    creating = [line for line in seen if "argilla_server" in line and ("users create" in line or "users.create" in line)]
    assert creating, "the watcher never saw the process that created the owner"  # it would have seen the secrets
    leaked = [line for line in seen if owner["password"] in line or owner["api_key"] in line]
    assert not leaked, f"{len(leaked)} command line(s) held the owner's password or key"
