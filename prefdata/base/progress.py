"""Per-stage progress of a flow run, drawn from its task runs: what a command shows while a flow runs.

A stage is one or more tasks of the flow (`Stage`); a chunked stage names each task run "STAGE i/N"
(`chunk_name`), so anyone who reads the run's task runs (this module's `tally`, the Prefect UI) knows
how many chunks the stage has as soon as one of them runs, whatever runner ran it. No Prefect here:
flows/progress.py reads the task runs from Prefect's API and hands them over as plain tuples.

Two displays, both on stderr (stdout stays the command's result): live bars when stderr is a
terminal, plain lines otherwise (CI logs, pipes: no redraws, no control characters).
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Iterable, Optional, TextIO

_CHUNK = re.compile(r"^(?P<task>\S+) (?P<index>\d+)/(?P<total>\d+)$")


@dataclass(frozen=True)
class Stage:
    label: str                 # what the user reads: "sample"
    tasks: tuple[str, ...]     # the flow's task names that make it up
    unit: str | None = None    # "chunks": a chunked stage (its runs are named by chunk_name); None: done or not


@dataclass(frozen=True)
class Count:
    """Where one stage stands. total: chunks (chunked stage; None until one has been seen) or the runs
    seen so far (other stages)."""
    stage: Stage
    seen: int = 0
    done: int = 0
    cached: int = 0
    failed: int = 0
    total: Optional[int] = None

    @property
    def finished(self) -> bool:
        return self.total is not None and self.seen >= self.total and self.done + self.failed >= self.total

    def line(self) -> str:
        """One plain line: "sample 3/5 chunks (2 from cache)", "write draft done"."""
        if self.stage.unit is None:
            state = "failed" if self.failed else "done" if self.finished else "running" if self.seen else "waiting"
            return f"{self.stage.label} {state}"
        if self.total is None:
            return f"{self.stage.label} waiting"
        return f"{self.stage.label} {self.done}/{self.total} {self.stage.unit}{self.notes()}"

    def notes(self) -> str:
        """What follows the count: ' (2 from cache, 1 failed)', or '' when there is nothing to add."""
        notes = [f"{self.cached} from cache"] * bool(self.cached) + [f"{self.failed} failed"] * bool(self.failed)
        return f" ({', '.join(notes)})" if notes else ""


def chunk_name(task: str, index: int, total: int) -> str:
    """The task run name of chunk `index` (1-based) of `total`: "sample 3/5"."""
    return f"{task} {index}/{total}"


def _task_name(run_name: str) -> tuple[str, Optional[int]]:
    """(task name, chunks) of a task run name: "sample 3/5" -> ("sample", 5); Prefect's own names,
    "write-draft-0" or a chunk's "sample-2df" before its run renames it, -> (task, None)."""
    found = _CHUNK.match(run_name)
    if found:
        return found["task"], int(found["total"])
    return run_name.rsplit("-", 1)[0], None


def tally(stages: Iterable[Stage], runs: Iterable[tuple[str, str, str]]) -> list[Count]:
    """Each stage's count from the task runs (name, state type, state name) of a flow run and its
    subflows; runs of other tasks are ignored. A cache hit is a Completed run named "Cached"."""
    stages = list(stages)
    owner = {task: stage for stage in stages for task in stage.tasks}
    counts = {stage: {"seen": 0, "done": 0, "cached": 0, "failed": 0, "total": None} for stage in stages}
    for name, state_type, state_name in runs:
        task, total = _task_name(name)
        if task not in owner:
            continue
        count = counts[owner[task]]
        count["seen"] += 1
        count["done"] += state_type == "COMPLETED"
        count["cached"] += state_type == "COMPLETED" and state_name == "Cached"
        count["failed"] += state_type in ("FAILED", "CRASHED", "CANCELLED")
        if total is not None:
            count["total"] = max(count["total"] or 0, total)
    out = []
    for stage in stages:
        count = counts[stage]
        if stage.unit is None and count["seen"]:
            count["total"] = count["seen"]
        out.append(Count(stage, **count))
    return out


class PlainLines:
    """Progress as plain lines: a stage's line when it starts and when it finishes, and the stages that
    moved every `every_s` seconds in between. For logs: nothing is redrawn."""

    def __init__(self, file: TextIO | None = None, prefix: str = "progress: ", every_s: float = 10.0):
        self.file, self.prefix, self.every_s = file, prefix, every_s
        self._said: dict[str, str] = {}   # stage label -> the last line printed for it
        self._last = time.monotonic()

    def update(self, counts: list[Count]) -> None:
        periodic = time.monotonic() - self._last >= self.every_s
        for count in counts:
            line, said = count.line(), self._said.get(count.stage.label)
            if line == said or not count.seen or (count.stage.unit and count.total is None):
                continue  # nothing new, or a chunk seen before its run took its name "sample i/N"
            starting, finishing = said is None, count.finished or count.failed
            if starting or finishing or periodic:
                self._say(count.stage.label, line)
        if periodic:
            self._last = time.monotonic()

    def close(self, counts: list[Count]) -> None:
        """The last word on every stage that ran: its final count."""
        for count in counts:
            if count.seen and self._said.get(count.stage.label) != count.line():
                self._say(count.stage.label, count.line())

    def _say(self, label: str, line: str) -> None:
        self._said[label] = line
        print(self.prefix + line, file=self.file or sys.stderr, flush=True)


class LiveBars:
    """Progress as one rich bar per stage on a terminal, redrawn in place (rich serialises the updates
    that come from the follower's thread)."""

    def __init__(self, stages: Iterable[Stage], console=None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        stages = list(stages)
        width = max(len(s.label) for s in stages)
        self.progress = Progress(TextColumn(f"{{task.description:<{width}}}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                                 console=console or Console(stderr=True, highlight=False, markup=False))
        self.bars = {s.label: self.progress.add_task(s.label, total=None, start=False, note="waiting")
                     for s in stages}
        self.progress.start()

    def update(self, counts: list[Count]) -> None:
        for count in counts:
            bar = self.bars[count.stage.label]
            if not count.seen:
                continue
            self.progress.start_task(bar)
            self.progress.update(bar, total=count.total, completed=count.done,
                                 note=(count.stage.unit or "") + count.notes())
            if count.finished:
                self.progress.stop_task(bar)  # its clock stops at the stage's end

    def close(self, counts: list[Count]) -> None:
        self.update(counts)
        self.progress.stop()


def display(stages: Iterable[Stage], file: TextIO | None = None):
    """Live bars when `file` (stderr by default) is a terminal, else plain lines."""
    file = file or sys.stderr
    try:
        terminal = file.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: plain lines
        terminal = False
    if terminal and os.environ.get("TERM") != "dumb":
        return LiveBars(stages)
    return PlainLines(file)
