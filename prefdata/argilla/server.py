"""A real argilla-server on 127.0.0.1 for users with nothing: `prefdata argilla up|down|status`.

Everything lives in one working folder ($PREFDATA_ARGILLA, default .prefdata/argilla):

    venv/          the server's own virtual environment (argilla-server pins fastapi, pydantic and
                   typer versions prefdata cannot share), built on first use from
                   server-constraints.txt and rebuilt when that file changes
    home/          ARGILLA_HOME_PATH: the SQLite database argilla.db
    tmp/           TMPDIR: each import of argilla_server copies its 14 MB web UI into a new
                   temporary folder and never deletes it; `down` empties this one
    owner.json     the owner's username, password and API key, mode 0600 (never logged)
    server.json    pid, port and URL of the running server
    server.log     the server's output

The database holds every user's API key in plain text (Argilla's design), so the folder is its
user's alone: 0700, its files 0600. The server and its CLI run with umask 077, and every `up`
repairs the modes of a folder made before (or by hand with a looser umask).

The server is stopped by its own pid, after checking that the pid is still our launcher (a pid
can be reused by another program once ours has exited).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prefdata.base import defaults
from prefdata.base.errors import PrefdataError

SERVER_VERSION = "2.8.0"
DEFAULT_PORT = defaults.ARGILLA_PORT  # Argilla's own (one home, which the commands read too)
DEFAULT_WORKSPACE = "prefdata"
OWNER = "owner"
HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "server-constraints.txt"
LAUNCHER = HERE / "launch.py"


def default_workdir() -> Path:
    return Path(os.environ.get("PREFDATA_ARGILLA", os.path.join(".prefdata", "argilla")))


@dataclass(frozen=True)
class ServerInfo:
    url: str
    pid: int
    username: str
    password: str
    api_key: str

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        return f"ServerInfo(url={self.url!r}, pid={self.pid}, username={self.username!r})"


class LocalArgilla:
    """One local server. `venv` may live elsewhere than `workdir`, so tests share one built venv."""

    def __init__(self, workdir: str | Path | None = None, venv: str | Path | None = None, host: str = "127.0.0.1"):
        self.workdir = Path(workdir) if workdir is not None else default_workdir()
        self.venv = Path(venv) if venv is not None else self.workdir / "venv"
        self.host = host

    # -- paths ----------------------------------------------------------------------------------------
    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def home(self) -> Path:
        return self.workdir / "home"

    @property
    def tmp(self) -> Path:
        return self.workdir / "tmp"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def _state_path(self) -> Path:
        return self.workdir / "server.json"

    @property
    def _owner_path(self) -> Path:
        return self.workdir / "owner.json"

    # -- the server's environment -----------------------------------------------------------------
    def ensure_venv(self, log: Callable[[str], None] = print) -> Path:
        """Build the server's virtual environment unless one built from the same constraints exists.
        Built beside its final place and renamed, so a half-built one is never used."""
        from filelock import FileLock

        stamp_value = hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest()
        stamp = self.venv / ".prefdata-constraints"
        self.venv.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.venv) + ".lock"):
            if stamp.exists() and stamp.read_text() == stamp_value and self.python.exists():
                return self.python
            log(f"building argilla-server {SERVER_VERSION} in {self.venv} (once; about a minute)")
            building = self.venv.with_name(self.venv.name + ".building")
            shutil.rmtree(building, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(building)], "create the server's virtual environment")
            _run([str(building / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "-c", str(CONSTRAINTS), f"argilla-server=={SERVER_VERSION}", "fakeredis"],
                 "install argilla-server (needs PyPI; see the output above)")
            (building / ".prefdata-constraints").write_text(stamp_value)
            shutil.rmtree(self.venv, ignore_errors=True)
            building.rename(self.venv)
        return self.python

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARGILLA_") or k == "ARGILLA_REDIS_URL"}
        env.update({
            "ARGILLA_HOME_PATH": str(self.home.resolve()),
            "ARGILLA_DATABASE_URL": f"sqlite+aiosqlite:///{(self.home / 'argilla.db').resolve()}",
            "ARGILLA_SEARCH_ENGINE": "prefdata-sql",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "TMPDIR": str(self.tmp.resolve()),
            "PYTHONNOUSERSITE": "1",
        })
        env.pop("PYTHONPATH", None)
        return env

    def _make_private(self) -> None:
        """The folder 0700 and the files of the server (home/ entirely) 0600: argilla.db holds the
        users' API keys in plain text. The venv's files stay as they are (the folder shuts it)."""
        if not self.workdir.is_dir():
            return
        self.workdir.chmod(0o700)
        for path in self.workdir.iterdir():
            if path.is_file() and not path.is_symlink():
                path.chmod(0o600)
        for folder in (self.home, self.tmp):
            if folder.is_dir():
                folder.chmod(0o700)
        if self.home.is_dir():
            for path in self.home.rglob("*"):
                if not path.is_symlink():
                    path.chmod(0o700 if path.is_dir() else 0o600)

    def _set_up_database(self, log: Callable[[str], None]) -> None:
        """Migrate the database and create the owner, with the server's own CLI, on first use."""
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        migrated = self.home / ".migrated"
        if not migrated.exists() or migrated.read_text() != SERVER_VERSION:
            log("setting up the database")
            # umask 077: this creates argilla.db, which will hold the users' API keys
            _run([str(self.python), "-m", "argilla_server", "database", "migrate"], "migrate the database",
                 env=self._env(), umask=0o077)
            migrated.write_text(SERVER_VERSION)
        if self._owner_path.exists():
            return
        owner = {"username": OWNER, "password": secrets.token_urlsafe(12), "api_key": secrets.token_urlsafe(32)}
        # The password and key go in on stdin, never on a command line: any user of the machine reads
        # those (`ps`, /proc/PID/cmdline) while the process runs.
        _run([str(self.python), "-c", CREATE_OWNER], "create the owner user", env=self._env(), umask=0o077,
             stdin=json.dumps({**owner, "workspace": DEFAULT_WORKSPACE}))
        _write_private(self._owner_path, json.dumps(owner))

    # -- start, stop, status ----------------------------------------------------------------------
    def status(self) -> ServerInfo | None:
        """The running server, or None (a stale server.json left by a crash is removed)."""
        try:
            state = json.loads(self._state_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if not _is_our_launcher(state["pid"]):
            self._state_path.unlink(missing_ok=True)
            return None
        owner = json.loads(self._owner_path.read_text())
        return ServerInfo(url=state["url"], pid=state["pid"], username=owner["username"], password=owner["password"],
                          api_key=owner["api_key"])

    def start(self, port: int = DEFAULT_PORT, timeout: float = 180.0, log: Callable[[str], None] = print) -> ServerInfo:
        """Start the server (building its environment on first use) and wait until it answers.
        Returns the running one when it is already up. Either way the folder is made private."""
        self._make_private()
        running = self.status()
        if running is not None:
            return running
        # A server that just died (a crash, `kill`) can hold its port for a few seconds while the
        # kernel closes the connections it was answering: wait that long before calling it taken.
        if not _wait_port_free(self.host, port, PORT_WAIT_SECONDS):
            raise PrefdataError(f"port {port} on {self.host} is in use: stop what holds it, or start with --port PORT")
        self.ensure_venv(log)
        self.tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._set_up_database(log)
        self._make_private()
        url = f"http://{self.host}:{port}"
        with os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
            process = subprocess.Popen([str(self.python), str(LAUNCHER), self.host, str(port)], env=self._env(),
                                       stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True,  # survives the CLI; stopped by pid
                                       umask=0o077)  # the database, its WAL and tmp/: for this user only
        _write_private(self._state_path, json.dumps({"pid": process.pid, "url": url, "port": port}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._state_path.unlink(missing_ok=True)
                raise PrefdataError(f"argilla-server exited at start (code {process.returncode}): "
                                    f"{_last_line(self.log_path)} (full log: {self.log_path})")
            if _answers(url):
                return self.status()
            time.sleep(0.5)
        self.stop()
        raise PrefdataError(f"argilla-server did not answer at {url} within {timeout:.0f} s; see {self.log_path}")

    def stop(self, timeout: float = 20.0) -> bool:
        """Stop the server by its pid (TERM, then KILL) and empty tmp/. False if none was running."""
        running = self.status()
        if running is not None:
            _terminate(running.pid, timeout)
        self._state_path.unlink(missing_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return running is not None

    def kill(self) -> None:
        """SIGKILL, as a crash would: for fault tests. State files stay, as after a real crash."""
        running = self.status()
        if running is not None:
            # the whole session (start_new_session=True): no child keeps the listening socket
            os.killpg(running.pid, signal.SIGKILL)
            _wait_gone(running.pid, 10.0)


# argilla-server's own `database users create` (the pinned version's), fed from stdin.
CREATE_OWNER = """
import asyncio, json, sys
from argilla_server.cli.database.users.create import _create
from argilla_server.models import UserRole
o = json.load(sys.stdin)
asyncio.run(_create(first_name="Owner", username=o["username"], role=UserRole.owner, password=o["password"],
                    api_key=o["api_key"], workspace=[o["workspace"]]))
"""


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None, umask: int = -1, stdin: str | None = None) -> None:
    result = subprocess.run(cmd, env=env, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                            capture_output=True, text=True, umask=umask)
    if result.returncode != 0:
        # the server CLI's own output may hold the key it was given: show only its error's last line
        tail = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise PrefdataError(f"could not {what}: {tail[-1] if tail else 'exit code ' + str(result.returncode)}")


def _write_private(path: Path, text: str) -> None:
    """Create the file 0600 from the start, so the key is never readable by others, even briefly."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


PORT_WAIT_SECONDS = 15.0


def _wait_port_free(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _port_free(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
    return True


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        # as uvicorn binds: connections in TIME_WAIT from a server just stopped do not hold the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/version", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _is_our_launcher(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(LAUNCHER).encode() in cmdline


def _terminate(pid: int, timeout: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not _wait_gone(pid, timeout):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)


def _wait_gone(pid: int, timeout: float) -> bool:
    """True once the process has fully exited. Not "its cmdline is gone": a dying process loses its
    memory (and /proc cmdline) before its sockets close, and the port would still be held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our child (tests): reaped, so gone
                return True
        except ChildProcessError:
            pass
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):  # exited; only its parent's wait is left
            return True
        time.sleep(0.1)
    return False


def _last_line(path: Path) -> str:
    """The server's last exception message (uvicorn's own last line only says that start-up failed)."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return "no log"
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b.*:", line)]
    return (errors or lines or ["no output"])[-1]
