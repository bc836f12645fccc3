"""The rewards grpo and ppo take (`rewards: [rule:NAME, rm:DIR, world, ...]`): each a spec
(prefdata.base.specs) of a registered backend offering the reward role, parsed and checked by the one
spec parser as `collect --judge` and `check --scorer` are, and turned into a TRL reward function by its
backend; and the reward-model gate that refuses an `rm:DIR` whose card records too low a held-out
accuracy.

A reward reads the prompt as the data holds it (a verifier parses the user's question), never the text
the policy generated from, which is rendered (trainers/rendering.py): GRPO's dataset carries the
original beside the rendered prompt as the column RAW_PROMPT, which TRL hands reward functions as a
keyword; PPO hands its reward the original prompts itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.base.specs import Spec

RAW_PROMPT = "raw_prompt"  # GRPO's dataset column: the original prompt of each rendered one
OPTION = "rewards:"


def reward_specs(rewards: Sequence[str], checked: bool = True) -> list[Spec]:
    """Each of `rewards` as a spec of a backend offering the reward role (`world` is rule:world);
    `checked`: its backend's pre-flight too (a missing folder, an unregistered verifier). One line,
    UnusableInput, naming the entry otherwise."""
    from prefdata.base.specs import check_spec, parse_spec, silent

    if not checked:
        return [parse_spec(str(spec), "reward", OPTION, notice=silent) for spec in rewards]
    return [check_spec(str(spec), "reward", OPTION) for spec in rewards]


def reward_function(spec: Spec) -> Callable:
    """A TRL reward function from a reward spec's backend: (prompts, completions) -> one float each.
    It scores the original prompts: TRL's `raw_prompt` keyword (GRPO's dataset column) when given, else
    `prompts` as they come (PPO hands it the original prompts)."""
    from prefdata.base.specs import backend

    score = backend(spec.kind, OPTION).reward(spec)

    def reward(prompts, completions, completion_ids=None, **kwargs):
        originals = kwargs.get(RAW_PROMPT) or prompts
        if len(originals) != len(completions):
            raise ValueError(f"rewards: {spec.written}: {len(originals)} prompts for {len(completions)} completions")
        return score(list(originals), list(completions))

    reward.__name__ = getattr(score, "__name__", None) or spec.kind  # TRL logs each reward's mean under its name
    return reward


def rule_reward(spec: str) -> Callable:
    """A TRL reward function from a registered verifier (prompt, completion) -> bool | float: its name or
    its own 'module:function' (prefdata/base/registry.py)."""
    from prefdata.base.specs import check_spec

    return reward_function(check_spec(f"rule:{spec}", "reward", OPTION))


def rm_reward(path: str) -> Callable:
    """A TRL reward function from a reward-model folder, scored by prefdata.models.reward's
    RewardModelScorer (the one scorer of the checks, the rm trainer and PPO): each original prompt
    (`raw_prompt`) and completion rendered as the model's card records it was trained. TRL's own
    path for a model folder would score the policy's rendered text without the special tokens and
    the eos the reward model was trained with."""
    return reward_function(Spec("rm", str(path)))


DEFAULT_MIN_RM_ACCURACY = 0.6  # seed pitfall 3: a reward model should rank > 0.6 of held-out pairs right
MIN_RM_ACCURACY_HELP = ("Refuse an rm:DIR reward whose card (DIR/prefdata_train.json, written by `prefdata train rm`) "
                        "records a held-out pairwise accuracy below this, or records none; null turns the gate off "
                        "(a reward model from elsewhere, without a card).")


def check_reward_models(rewards: list[str], min_accuracy: float | None) -> None:
    """Refuse, in one line, each `rm:DIR` reward whose card says it ranks held-out pairs too poorly:
    below `min_accuracy` or no figure at all (GateFailed, exit 1); a folder with no card (or an unreadable
    one) is UnusableInput (exit 2). Reads only a JSON file: it runs before any model is loaded."""
    if min_accuracy is None:
        return
    waive = "set min_rm_accuracy: null in the config to use it anyway"
    for spec in reward_specs(rewards, checked=False):
        target = spec.target
        if spec.kind != "rm" or not Path(target).is_dir():
            continue  # other rewards have no card; a missing folder is the plugin's own one-line error
        record = Path(target) / "prefdata_train.json"
        if not record.is_file():
            raise UnusableInput(f"rewards: rm:{target} has no prefdata_train.json, so its held-out accuracy is unknown "
                                f"and min_rm_accuracy {min_accuracy:g} cannot be checked: train it with `prefdata train "
                                f"rm`, or {waive}")
        try:
            accuracy = json.loads(record.read_text(encoding="utf-8"))["metrics"].get("heldout_pairwise_accuracy")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UnusableInput(f"rewards: rm:{target}: {record.name} cannot be read ({exc}): retrain it with "
                                f"`prefdata train rm`, or {waive}") from None
        if not isinstance(accuracy, (int, float)) or isinstance(accuracy, bool):
            raise GateFailed(f"rewards: rm:{target} records no held-out pairwise accuracy in {record.name} (a version "
                             f"with no held-out pairs?), so min_rm_accuracy {min_accuracy:g} cannot be checked: retrain "
                             f"it on a version with an eval split, or {waive}")
        if accuracy < min_accuracy:
            raise GateFailed(f"rewards: rm:{target}: held-out pairwise accuracy {accuracy:.3g} is below min_rm_accuracy "
                             f"{min_accuracy:g}: it ranks unseen pairs too poorly to train against (a policy would learn "
                             f"its errors); train it longer or on more pairs, or lower min_rm_accuracy")
