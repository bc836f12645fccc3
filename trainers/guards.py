"""Guards from the seed's KL tuning table, as pure functions over the run's logged metrics.

Each guard reads the history of logged steps (dicts of metric -> value) and returns a message when
its symptom shows, else None. `GuardCallback` runs them after every log of a transformers Trainer
and stops training; `step_guard` does the same for the PPO loop. The run then ends with
GuardTripped (exit 1), whose message says what the symptom means and what to change.

    symptom (seed)                                   guard
    KL collapses toward 0 while reward climbs        kl_collapse      the policy is hacking the reward
    KL drifts too high                               kl_above         the policy left the reference
    DPO chosen reward mean < rejected reward mean    flipped_labels   the labels look flipped
    DPO chosen reward falls below 0 and keeps going  chosen_collapse  both likelihoods pushed down
    GRPO advantages all near 0                       flat_advantages  group too small / rewards constant
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Callable, Sequence

from prefdata.errors import GateFailed

History = Sequence[dict]
Guard = Callable[[History], "str | None"]


class GuardTripped(GateFailed):
    """A guard stopped training; the message says why and what to change."""


def _series(history: History, *keys: str) -> list[float]:
    """The first of `keys` each logged step has, in order (TRL renames metrics between versions)."""
    out = []
    for row in history:
        for key in keys:
            if row.get(key) is not None:
                out.append(float(row[key]))
                break
    return out


@dataclass(frozen=True)
class KLCollapse:
    """KL fell below `ratio` x its early level while the reward rose: seed pitfall 1 (0.05 -> 0.005)."""

    window: int = 5
    ratio: float = 0.1
    min_early_kl: float = 1e-3  # below this the run never left the reference; nothing can collapse
    kl_keys: tuple = ("kl", "objective/kl")
    reward_keys: tuple = ("reward", "reward_mean", "objective/scores")

    def __call__(self, history: History) -> str | None:
        kl, reward = _series(history, *self.kl_keys), _series(history, *self.reward_keys)
        if len(kl) < 3 * self.window or len(reward) < 3 * self.window:
            return None
        early_kl, late_kl = max(kl[self.window:2 * self.window]), mean(kl[-self.window:])
        early_r, late_r = mean(reward[:self.window]), mean(reward[-self.window:])
        if early_kl >= self.min_early_kl and late_kl < self.ratio * early_kl and late_r > early_r:
            return (f"KL collapsed from {early_kl:.4g} to {late_kl:.4g} while the reward rose {early_r:.3g} -> "
                    f"{late_r:.3g}: the policy is hacking the reward; double the KL coefficient (beta)")
        return None


@dataclass(frozen=True)
class KLAbove:
    """Mean KL over the last `window` steps above `bound`."""

    bound: float = 1.0
    window: int = 3
    kl_keys: tuple = ("kl", "objective/kl")

    def __call__(self, history: History) -> str | None:
        kl = _series(history, *self.kl_keys)
        if len(kl) >= self.window and mean(kl[-self.window:]) > self.bound:
            return (f"KL {mean(kl[-self.window:]):.3g} is above the bound {self.bound:g}: the policy drifted far from "
                    f"the reference; halve the learning rate or double the KL coefficient")
        return None


@dataclass(frozen=True)
class FlippedLabels:
    """DPO: the chosen reward mean stays below the rejected one once training is under way."""

    window: int = 5
    skip: int = 2  # the first steps sit at zero margin by construction

    def __call__(self, history: History) -> str | None:
        chosen, rejected = _series(history, "rewards/chosen"), _series(history, "rewards/rejected")
        if len(chosen) < self.skip + self.window:
            return None
        margin = mean(c - r for c, r in zip(chosen[-self.window:], rejected[-self.window:]))
        if margin < 0 and all(c < r for c, r in zip(chosen[-self.window:], rejected[-self.window:])):
            return (f"DPO's chosen reward mean is below the rejected one over the last {self.window} logs "
                    f"(margin {margin:.3g}): the labels look flipped; stop and check the label direction "
                    f"(`prefdata check` runs label_direction)")
        return None


@dataclass(frozen=True)
class ChosenCollapse:
    """DPO: the chosen reward falls below `floor` and keeps falling. The margin can grow while both
    likelihoods drop (a known failure on near-identical pairs); the chosen answers get less likely."""

    window: int = 5
    floor: float = -1.0

    def __call__(self, history: History) -> str | None:
        chosen = _series(history, "rewards/chosen")
        if len(chosen) < 2 * self.window:
            return None
        recent, before = mean(chosen[-self.window:]), mean(chosen[-2 * self.window:-self.window])
        if recent < self.floor and recent < before:
            return (f"DPO's chosen reward fell to {recent:.3g} (from {before:.3g}) and keeps falling: training is "
                    f"pushing the chosen answers down with the rejected ones; add the sft loss term "
                    f"(loss_type: [sigmoid, sft]), lower the learning rate or raise beta")
        return None


@dataclass(frozen=True)
class FlatAdvantages:
    """GRPO: nearly every group has zero reward spread, so every advantage is ~0 and nothing is learned."""

    window: int = 5
    share: float = 0.95

    def __call__(self, history: History) -> str | None:
        flat = _series(history, "frac_reward_zero_std")
        if len(flat) >= self.window and min(flat[-self.window:]) >= self.share:
            return (f"GRPO advantages are all ~0: {mean(flat[-self.window:]):.0%} of groups had one reward for every "
                    f"completion over the last {self.window} logs; raise num_generations or temperature, or use a "
                    f"reward that separates completions")
        return None


def defaults(method: str) -> list[Guard]:
    common = [KLAbove()]
    return {
        "dpo": [FlippedLabels(), ChosenCollapse()],
        "grpo": common + [KLCollapse(), FlatAdvantages()],
        "ppo": [KLCollapse()],  # PPO's own max_kl bound stops a run whose KL runs away (trainers/ppo.py)
    }.get(method, [])


def first_alarm(guards: Sequence[Guard], history: History) -> str | None:
    for guard in guards:
        message = guard(history)
        if message:
            return message
    return None


def guard_callback(guards: Sequence[Guard]):
    """A transformers TrainerCallback that records every log and stops training when a guard fires;
    the plugin raises GuardTripped(callback.alarm) after `train()` returns."""
    from transformers import TrainerCallback

    class GuardCallback(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict] = []
            self.alarm: str | None = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "train_runtime" not in logs:  # the summary log at the end is not a step
                self.history.append(dict(logs))
                self.alarm = self.alarm or first_alarm(guards, self.history)
                if self.alarm:
                    control.should_training_stop = True
            return control

    return GuardCallback()


def step_guard(guards: Sequence[Guard]):
    """For loops of our own (PPO): call with (step, metrics); raises GuardTripped when a guard fires."""
    history: list[dict] = []

    def check(step: int, metrics: dict) -> None:
        history.append(dict(metrics))
        message = first_alarm(guards, history)
        if message:
            raise GuardTripped(f"step {step}: {message}")

    return check
