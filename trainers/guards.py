"""Guards from the seed's KL tuning table, as pure functions over the run's logged metrics.

Each guard reads the history of logged steps (dicts of metric -> value) and returns a message when
its symptom shows, else None. `GuardCallback` runs them after every log of a transformers Trainer
and stops training; `step_guard` does the same for the PPO loop. The run then ends with
GuardTripped (exit 1), whose message says what the symptom means and what to change. A guard may
instead return an Advisory (KLCollapse when every reward is a rule verifier): logged and recorded on
the card while the run goes on. Every level is a mean over a window of logs, and the thresholds are
held against the logged histories of real healthy and provoked runs on the demo version
(tests/fixtures/guards/, recorded by bench/guard_fixtures.py).

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

from prefdata.base.errors import GateFailed

History = Sequence[dict]
Guard = Callable[[History], "str | None"]


class GuardTripped(GateFailed):
    """A guard stopped training; the message says why and what to change. `history` holds the logged
    steps the guards saw, up to the one that fired (bench/guard_fixtures.py records it)."""

    def __init__(self, message: str, history: Sequence[dict] = ()) -> None:
        super().__init__(message)
        self.history = list(history)


def _series(history: History, *keys: str) -> list[float]:
    """The first of `keys` each logged step has, in order (TRL renames metrics between versions)."""
    out = []
    for row in history:
        for key in keys:
            if row.get(key) is not None:
                out.append(float(row[key]))
                break
    return out


class Advisory(str):
    """A guard's finding that does not stop the run: logged once and recorded on the model card."""


def _rolling_means(values: list[float], window: int) -> list[float]:
    return [mean(values[i:i + window]) for i in range(len(values) - window + 1)]


@dataclass(frozen=True)
class KLCollapse:
    """KL fell to below `ratio` x its peak while the reward surged: seed pitfall 1 ("KL 0.05 -> 0.005
    while an RM's reward shoots up"). Every level is a mean over `window` logs, so one noisy log
    neither makes nor breaks it. The KL must have reached `min_peak_kl` (a run that never left the
    reference cannot collapse), and the reward must have risen by at least `min_rise` AND by
    `min_rel_rise` x its early level: a drift of a few hundredths is noise, not a surge.

    With `hackable` False (only rule/verifier rewards) it returns an Advisory instead of stopping:
    an exact verifier cannot be gamed, so a rising verified reward with a falling KL is the policy
    settling on right answers, not hacking."""

    window: int = 5
    ratio: float = 0.1
    min_peak_kl: float = 0.02
    min_rise: float = 0.1
    min_rel_rise: float = 0.25
    hackable: bool = True
    kl_keys: tuple = ("kl", "objective/kl")
    reward_keys: tuple = ("reward", "reward_mean", "objective/scores")

    def __call__(self, history: History) -> str | None:
        kl, reward = _series(history, *self.kl_keys), _series(history, *self.reward_keys)
        w = self.window
        if len(kl) < 3 * w or len(reward) < 3 * w:
            return None
        peak_kl, late_kl = max(_rolling_means(kl[:-w], w)), mean(kl[-w:])
        early_r, late_r = mean(reward[:w]), mean(reward[-w:])
        rise = late_r - early_r
        surged = rise >= self.min_rise and rise >= self.min_rel_rise * abs(early_r)
        if not (peak_kl >= self.min_peak_kl and late_kl < self.ratio * peak_kl and surged):
            return None
        what = (f"KL collapsed from {peak_kl:.4g} to {late_kl:.4g} (means over {w} logs) while the reward rose "
                f"{early_r:.3g} -> {late_r:.3g}")
        if not self.hackable:
            return Advisory(f"warning: {what}; not stopping: the only rewards are rule verifiers, which a policy "
                            f"cannot hack, so this is the policy settling on verified answers; check the held-out "
                            f"evaluation")
        return f"{what}: the policy is hacking the reward; double the KL coefficient (beta)"


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
    """DPO: the chosen reward stays below the rejected one, clearly, once training is under way: below by
    more than `min_margin` on average and on every one of the last `window` logs (one noisy batch, or a
    margin a hair under zero in the first steps, is not a symptom).

    What it can see: DPO fits the labels it is given, so on a wholly flipped version the margins of the
    training batches grow positive like a healthy run's (tests/fixtures/guards/dpo_flipped_labels.json);
    a wholesale flip is the data check's to catch (`prefdata check --scorer ...`: label_direction). It
    fires when the run cannot make the labels' side win: labels at odds with each other or the model."""

    window: int = 5
    skip: int = 2  # the first steps sit at zero margin by construction
    min_margin: float = 0.01  # DPO rewards are beta x log-ratios: 0.01 is a tenth of a nat at beta 0.1

    def __call__(self, history: History) -> str | None:
        chosen, rejected = _series(history, "rewards/chosen"), _series(history, "rewards/rejected")
        if len(chosen) < self.skip + self.window:
            return None
        margins = [c - r for c, r in zip(chosen[-self.window:], rejected[-self.window:])]
        if mean(margins) < -self.min_margin and all(m < 0 for m in margins):
            return (f"DPO's chosen reward mean is below the rejected one over the last {self.window} logs "
                    f"(margin {mean(margins):.3g}): the run cannot make the labelled side win; the labels look "
                    f"flipped (`prefdata check` runs label_direction) or the learning rate is too high to follow them")
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


def hackable(rewards: Sequence[str] | None) -> bool:
    """Whether a policy could game the rewards: a learned reward (rm:PATH) can be, a rule verifier
    (rule:NAME, world) cannot; each entry's backend says (prefdata.base.specs, `hackable`). Unknown
    rewards (None), and an entry that is no reward spec, count as hackable."""
    if rewards is None:
        return True
    from prefdata.base.errors import UnusableInput
    from prefdata.base.specs import backend, parse_spec, silent

    for reward in rewards:
        try:
            spec = parse_spec(str(reward), "reward", "rewards:", notice=silent)
            if getattr(backend(spec.kind), "hackable", True):
                return True
        except UnusableInput:
            return True
    return False


def defaults(method: str, rewards: Sequence[str] | None = None) -> list[Guard]:
    collapse = KLCollapse(hackable=hackable(rewards))
    return {
        "dpo": [FlippedLabels(), ChosenCollapse()],
        "grpo": [KLAbove(), collapse, FlatAdvantages()],
        "ppo": [collapse],  # PPO's own max_kl bound stops a run whose KL runs away (trainers/ppo.py)
    }.get(method, [])


def first_alarm(guards: Sequence[Guard], history: History) -> str | None:
    """The first finding that stops the run (an Advisory does not)."""
    for guard in guards:
        message = guard(history)
        if message and not isinstance(message, Advisory):
            return message
    return None


class _Watch:
    """Runs the guards over a growing history: `alarm` is the first stopping finding, `warnings` the
    first Advisory of each guard (one line per guard, not one per log)."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards, self.history, self.alarm, self.warnings = list(guards), [], None, []
        self._warned: set[int] = set()

    def add(self, row: dict) -> str | None:
        self.history.append(dict(row))
        for i, guard in enumerate(self.guards):
            message = guard(self.history)
            if isinstance(message, Advisory):
                if i not in self._warned:
                    self._warned.add(i)
                    self.warnings.append(f"step {len(self.history)}: {message}")
            elif message and self.alarm is None:
                self.alarm = message
        return self.alarm


def guard_callback(guards: Sequence[Guard]):
    """A transformers TrainerCallback that records every log and stops training when a guard fires;
    the plugin raises GuardTripped(callback.alarm) after `train()` returns. Advisories collect in
    `callback.warnings` for the card."""
    from transformers import TrainerCallback

    class GuardCallback(TrainerCallback, _Watch):
        def __init__(self) -> None:
            _Watch.__init__(self, guards)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "train_runtime" not in logs:  # the summary log at the end is not a step
                if self.add(logs):
                    control.should_training_stop = True
            return control

    return GuardCallback()


def step_guard(guards: Sequence[Guard]):
    """For loops of our own (PPO): call with (step, metrics); raises GuardTripped when a guard fires.
    The returned callable keeps `history` and `warnings` (Advisories) as attributes."""
    watch = _Watch(guards)

    def check(step: int, metrics: dict) -> None:
        if watch.add(metrics):
            raise GuardTripped(f"step {step}: {watch.alarm}", history=watch.history)

    check.history, check.warnings = watch.history, watch.warnings
    return check
