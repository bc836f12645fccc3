"""Guards against the histories of real runs: every method's healthy run on the demo's validated version
(no guard may fire) and provoked failures (the named guard must fire), recorded by
bench/guard_fixtures.py into tests/fixtures/guards/ (see its README), plus the cases the fixtures
stand for written out by hand. Pure functions over logged metrics: no training here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefdata.trainers.guards import (
    Advisory, ChosenCollapse, FlatAdvantages, FlippedLabels, KLAbove, KLCollapse, defaults, first_alarm, hackable,
)

FIXTURES = Path(__file__).parent / "fixtures" / "guards"
def _expect(path: Path):
    return json.loads(path.read_text())["expect"]


HEALTHY = sorted(p for p in FIXTURES.glob("*.json") if _expect(p) is None)
PROVOKED = sorted(p for p in FIXTURES.glob("*.json") if _expect(p) not in (None, "unseen"))
UNSEEN = sorted(p for p in FIXTURES.glob("*.json") if _expect(p) == "unseen")
# Every guard, with both answers to "could the reward be hacked?".
EVERY_GUARD = [KLCollapse(), KLCollapse(hackable=False), KLAbove(), FlippedLabels(), ChosenCollapse(), FlatAdvantages()]


def replay(guards, history):
    """(step, message) of the first guard finding as the history grows log by log, as in a run."""
    for n in range(1, len(history) + 1):
        for guard in guards:
            message = guard(history[:n])
            if message:
                return n, message
    return None, None


def test_every_method_has_a_healthy_and_each_guard_a_provoked_fixture():
    methods = {json.loads(p.read_text())["method"] for p in HEALTHY}
    assert methods == {"rm", "dpo", "grpo", "ppo", "sft"}
    expected = {json.loads(p.read_text())["expect"] for p in PROVOKED}
    assert {"ChosenCollapse", "KLAbove", "FlatAdvantages", "max_kl"} <= expected
    assert [p.stem for p in UNSEEN] == ["dpo_flipped_labels"]
    assert "bench/guard_fixtures.py" in (FIXTURES / "README.md").read_text()


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.stem)
def test_no_guard_fires_on_a_healthy_run(path):
    fixture = json.loads(path.read_text())
    assert fixture["stopped"] is None and len(fixture["history"]) >= 20
    step, message = replay(EVERY_GUARD, fixture["history"])
    assert message is None, f"{path.stem}: step {step}: {message}"
    # PPO's own bound: a healthy run stays well under max_kl.
    from prefdata.trainers.ppo import PPOConfig

    if fixture["method"] == "ppo":
        assert max(row["kl"] for row in fixture["history"]) < PPOConfig().max_kl


@pytest.mark.parametrize("path", PROVOKED, ids=lambda p: p.stem)
def test_the_named_guard_stops_a_provoked_run(path):
    fixture = json.loads(path.read_text())
    history, expect = fixture["history"], fixture["expect"]
    assert fixture["stopped"], f"{path.stem}: the real run was not stopped"
    if expect == "max_kl":  # PPO's loop bound (trainers/ppo.py): the last logged step is above it
        from prefdata.trainers.ppo import PPOConfig

        assert history[-1]["kl"] > PPOConfig().max_kl and "above max_kl" in fixture["stopped"]
        assert first_alarm(defaults("ppo", fixture["rewards"]), history) is None  # no other guard got there first
        return
    guards = defaults(fixture["method"], fixture["rewards"])
    step, message = replay(guards, history)
    named = next(g for g in guards if type(g).__name__ == expect)
    assert message is not None and message == named(history[:step]), f"{path.stem}: {message}"
    assert step == len(history)  # the run stopped on the log the guard fired on
    assert message in fixture["stopped"]  # and the user saw that message


@pytest.mark.parametrize("path", UNSEEN, ids=lambda p: p.stem)
def test_a_wholly_flipped_version_is_not_visible_in_dpo_logs(path):
    """DPO fits the labels it is given: on the demo version with every pair turned round, the training
    margins grow positive as in a healthy run, so no guard fires (none claims to see it) while the
    held-out task accuracy falls below the SFT model's 0.59. Flipped data is label_direction's to catch."""
    fixture = json.loads(path.read_text())
    assert replay(EVERY_GUARD, fixture["history"]) == (None, None) and fixture["stopped"] is None
    last = fixture["history"][-5:]
    assert all(row["rewards/chosen"] > row["rewards/rejected"] for row in last)
    assert fixture["result"]["task_accuracy"] < 0.59


# -- the cases behind the fixtures, by hand -----------------------------------------------------------------


def test_kl_collapse_needs_a_real_surge():
    """Issue 16: a verifier-rewarded GRPO run on the demo version was stopped at step 28 for 'KL 0.358 ->
    0.0227 while the reward rose 0.494 -> 0.525'. A rise of 0.03 is noise, not a surge."""
    kl = [0.0, 0.1, 0.3, 0.36, 0.36, 0.35, 0.36, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.02, 0.02, 0.025, 0.02,
          0.025, 0.02, 0.02, 0.025, 0.02, 0.025, 0.02, 0.025, 0.022, 0.023, 0.022]
    reward = [0.49, 0.5, 0.49, 0.5, 0.49] + [0.5] * 18 + [0.52, 0.53, 0.52, 0.53, 0.52]
    history = [{"kl": k, "reward": r} for k, r in zip(kl, reward)]
    assert KLCollapse()(history) is None
    # The same KL with the reward shooting up is the seed's symptom, and stops the run.
    surged = [{"kl": k, "reward": 0.1 if i < 10 else 0.9} for i, k in enumerate(kl)]
    assert "hacking the reward" in KLCollapse()(surged)
    # Relative AND absolute: +0.15 on a reward of 3.0 is 5%, not a surge; +0.05 on 0.01 is tiny in absolute terms.
    for low, high in ((3.0, 3.15), (0.01, 0.06)):
        assert KLCollapse()([{"kl": k, "reward": low if i < 10 else high} for i, k in enumerate(kl)]) is None
    # A KL that never reached a meaningful level cannot collapse.
    assert KLCollapse()([{"kl": k / 100, "reward": 0.1 if i < 10 else 0.9} for i, k in enumerate(kl)]) is None


def test_kl_collapse_only_warns_when_every_reward_is_a_verifier():
    kl = [0.05] * 10 + [0.004] * 5
    history = [{"kl": k, "reward": 0.1 if i < 10 else 0.9} for i, k in enumerate(kl)]
    assert hackable(["rule:prefdata.world:verify", "rm:/x"]) and hackable(None) and not hackable(["rule:a:b"])
    finding = KLCollapse(hackable=False)(history)
    assert isinstance(finding, Advisory) and "verifier" in finding and "cannot hack" in finding
    assert first_alarm(defaults("grpo", ["rule:prefdata.world:verify"]), history) is None
    assert "hacking the reward" in first_alarm(defaults("grpo", ["rm:/some/rm"]), history)
    assert "hacking the reward" in first_alarm(defaults("ppo"), history)  # rewards unknown: hackable


def test_guards_need_a_window_not_one_noisy_log():
    # One DPO log with the margin below zero among healthy ones is noise.
    noisy = [{"rewards/chosen": 0.02 * i, "rewards/rejected": -0.02 * i} for i in range(12)]
    noisy[-1] = {"rewards/chosen": -0.01, "rewards/rejected": 0.01}
    assert FlippedLabels()(noisy) is None
    # A margin that is negative by a hair for five logs, at the very start, is not flipped labels.
    hair = [{"rewards/chosen": -0.001, "rewards/rejected": 0.0}] * 8
    assert FlippedLabels()(hair) is None
    assert KLAbove()([{"kl": 0.1}] * 5 + [{"kl": 2.0}]) is None  # one spike to twice the bound (healthy GRPO peaks at 0.5)
    assert FlatAdvantages()([{"frac_reward_zero_std": 1.0}] * 4 + [{"frac_reward_zero_std": 0.5}]) is None


def test_an_advisory_is_kept_once_and_does_not_stop_the_loop():
    """PPO's step_guard (and the Trainer callback, which shares its watch): an advisory is recorded once
    per guard, for the card, and the loop goes on; a stopping finding raises with the history."""
    from prefdata.trainers.guards import GuardTripped, step_guard

    check = step_guard(defaults("ppo", ["rule:prefdata.world:verify"]))
    kl = [0.05] * 10 + [0.004] * 8
    for step, k in enumerate(kl):
        check(step, {"kl": k, "reward_mean": 0.1 if step < 10 else 0.9})
    assert len(check.warnings) == 1 and "cannot hack" in check.warnings[0] and len(check.history) == len(kl)
    stop = step_guard([KLAbove(bound=0.2, window=1)])
    with pytest.raises(GuardTripped, match="step 0: KL 0.3 is above the bound 0.2") as raised:
        stop(0, {"kl": 0.3})
    assert raised.value.history == [{"kl": 0.3}] and raised.value.exit_code == 1
