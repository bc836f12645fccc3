"""Training you can watch: where a run's TensorBoard log goes, the writer for loops of our own (PPO),
and the curves of a finished run drawn into one PNG beside its model card.

TRL's trainers write TensorBoard events themselves (`report_to: tensorboard`, transformers'
TensorBoardCallback, under OUTPUT_DIR/trainer/runs/); PPO's loop is prefdata's, so `tensorboard_callback`
writes its per-step figures there too. matplotlib and TensorBoard are imported only when used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CURVES_FILE = "curves.png"  # beside the model card, which shows it

# Panels, in order: a title and the logged keys it draws (the first ones a run logged). Loss, the
# reward or margin, KL, the SFT term mixed in against the alignment tax, and the signals the guards
# watch (the chosen reward that must not sink, the reward spread GRPO needs, entropy).
PANELS = (
    ("loss", ("loss", "policy_loss")),
    ("reward / margin", ("rewards/margins", "reward", "reward_mean", "accuracy")),
    ("KL to the reference", ("kl", "objective/kl")),
    ("SFT term (alignment tax)", ("sft_loss", "ptx_loss")),
    ("guards: chosen reward", ("rewards/chosen",)),
    ("guards: reward spread", ("reward_std",)),
    ("entropy", ("entropy", "rollout_entropy")),
)
MAX_PANELS = 6


def tensorboard_dir(output_dir: Path) -> Path:
    """The folder to point TensorBoard at: the run folder, under which TRL's trainers write their events
    (OUTPUT_DIR/trainer/runs/<time>_<host>, transformers' default under the trainer's folder) and PPO's
    loop writes its own (OUTPUT_DIR/runs/<time>_<host>); TensorBoard finds both."""
    return Path(output_dir)


def reports_to(report_to: Any, tracker: str) -> bool:
    trackers = [report_to] if isinstance(report_to, str) else list(report_to or ())
    return tracker in trackers or "all" in trackers


def tensorboard_callback(output_dir: Path) -> Callable[[int, dict], None]:
    """A per-step callback for our own loops (PPO's `callbacks`): each numeric figure as a scalar."""
    from torch.utils.tensorboard import SummaryWriter

    from transformers.integrations.integration_utils import default_logdir

    writer = SummaryWriter(str(Path(output_dir) / default_logdir()))

    def write(step: int, metrics: dict) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                writer.add_scalar(f"train/{key}", value, step)
        writer.flush()

    write.close = writer.close  # type: ignore[attr-defined]
    return write


def _series(log: Sequence[dict], keys: Sequence[str]) -> tuple[str, list[tuple[float, float]]] | None:
    for key in keys:
        points = []
        for i, row in enumerate(log):
            value = _number(row.get(key))
            if value is not None:
                points.append((_number(row.get("step")) or float(i + 1), value))
        if len(points) >= 2:
            return key, points
    return None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def draw_curves(log: Sequence[dict], before: dict, after: dict, path: Path, title: str = "") -> Path | None:
    """One PNG: a panel per logged figure of PANELS (two points or more), and the held-out shares
    (accuracies, between 0 and 1) before and after training as paired bars. None when there is
    nothing to draw."""
    panels = [(name, found) for name, keys in PANELS if (found := _series(log, keys))][:MAX_PANELS]
    # the shares (accuracies) on one scale; losses and lengths stay in the card's figures
    heldout = [k for k in after if all(0.0 <= (_number(side.get(k)) if _number(side.get(k)) is not None else -1) <= 1.0
                                       for side in (before, after))]
    if not panels and not heldout:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display: a file
    import matplotlib.pyplot as plt

    count = len(panels) + bool(heldout)
    columns = 2 if count > 1 else 1
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 2.6 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (name, (key, points)) in zip(flat, panels):
        ax.plot([p[0] for p in points], [p[1] for p in points], linewidth=1.2)
        ax.set_title(f"{name} ({key})", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    if heldout:
        ax = flat[len(panels)]
        xs = range(len(heldout))
        ax.bar([x - 0.2 for x in xs], [_number(before[k]) for k in heldout], width=0.4, label="before")
        ax.bar([x + 0.2 for x in xs], [_number(after[k]) for k in heldout], width=0.4, label="after")
        ax.set_xticks(list(xs), [k.replace("_", " ") for k in heldout], fontsize=7, rotation=15)
        ax.set_title("held-out, before and after", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    for ax in flat[count:]:
        ax.axis("off")
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
