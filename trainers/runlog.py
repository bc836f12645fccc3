"""The run's log, DIR/train.log: stage lines on the console and in the file, per-step lines (TRL's
metric dicts, PPO's step lines) in the file and on the console only with --verbose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


class RunLog:
    """The run's log: stage lines (`log(line)`) go to the console and DIR/train.log; per-step lines
    (`log.step(line)`: TRL's metric dict per logged step, PPO's per-step line) go to train.log, and to
    the console only when `verbose`. The file opens on the first line, so a run refused before it
    starts leaves no folder behind. Plugins that only call `log(line)` work as before."""

    def __init__(self, path: Path, echo: Callable[[str], None], verbose: bool = False) -> None:
        self.path, self.echo, self.verbose = Path(path), echo, verbose
        self._main: bool | None = None
        self._started = False
        self._preface: list[str] = []

    def preface(self, line: str) -> None:
        """A line about the run said before it starts (its waivers, where its curves go): on the console
        now, in the file only once the run writes its first line, so a refused run still leaves no folder."""
        self._preface.append(str(line))
        self.echo(line)

    def _write(self, line: str) -> None:
        if self._preface:
            lines, self._preface = self._preface, []
            for early in lines:
                self._write(early)
        if self._main is None:
            # Under torchrun / `accelerate launch` (both set RANK), rank 0 alone writes the file. Read from the
            # environment, not accelerate's PartialState, so logging never sets up the process group early.
            import os

            self._main = os.environ.get("RANK", "0") == "0"
        if self._main:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a" if self._started else "w", encoding="utf-8") as out:  # a rerun starts it afresh
                out.write(line + "\n")
            self._started = True

    def __call__(self, line: str) -> None:
        self._write(str(line))
        self.echo(line)

    def step(self, line: str) -> None:
        self._write(str(line))
        if self.verbose:
            self.echo(line)


def route_step_logs(trainer, log: Callable[[str], None]) -> None:
    """Send a transformers Trainer's per-step metric dicts to `log.step` instead of stdout: its
    ProgressCallback prints each log dict through tqdm.write (stdout) and PrinterCallback prints it.
    The progress bar itself (stderr) stays. A plain `log` callable (no .step) leaves TRL as it is."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

    step = getattr(log, "step", None)
    if step is None:
        return

    class BarOnly(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    class StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs:
                step(str({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in logs.items() if k != "total_flos"}))

    names = {type(cb) for cb in trainer.callback_handler.callbacks}
    if ProgressCallback in names:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(BarOnly)
    if PrinterCallback in names:
        trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StepLog)
