"""prefdata's own backends of judge, scorer and reward specs (prefdata.base.specs says what a backend is),
registered as entry points in the group `prefdata.backends` (pyproject.toml):

    llm       an LLM judge, served (llm:MODEL@URL) or in process (llm:PATH)     judge, scorer
    rm        a reward model's scores                                           judge, scorer, reward
    lm        a causal LM's mean log-probabilities (the policy's preference)    scorer
    rule      a registered verifier's scores                                    judge, scorer, reward
    verdicts  a file of verdicts a judge already made                           scorer

They live in the gate because it is the lowest layer that sees every role's implementation: the judges
(prefdata.collect.judging), the scorers (prefdata.models) and the label-direction verdicts
(prefdata.gate.scoring). The flows, the commands and the trainers reach them by name, through the
registry. Nothing here imports more than prefdata.base at load: naming a backend costs nothing until a
role of it runs. Every pair of scores becomes a verdict by the one rule (prefdata.base.verdicts).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from prefdata.base.errors import UnusableInput
from prefdata.base.specs import Backend, Spec

_TEMPLATE = r"(?::(?P<template>[A-Za-z][\w.-]*-v\d+))?"
_SERVED = re.compile(r"^(?P<model>.+)@(?P<url>https?://.+?)" + _TEMPLATE + "$")
_LOCAL = re.compile(r"^(?P<model>.+?)" + _TEMPLATE + "$")
_ANY_URL = re.compile(r"@[a-z][\w+.-]*://")

# a judge option (the collect flow's Judge field) -> PairwiseLLMJudge's keyword
_LLM_OPTIONS = {"requests_in_flight": "concurrency", "timeout_s": "timeout", "max_retries": "max_retries",
                "api_key_env": "api_key_env", "max_tokens": "max_tokens"}


def _model_path(spec: Spec, option: str) -> None:
    """A scorer's model: a path that looks local (absolute, ./, ~, a .gguf file, more than one /) must hold
    a model; a hub name (org/name) is left for loading to judge."""
    from prefdata.models.loading import is_gguf

    target = spec.target
    path = Path(target).expanduser()
    local = path.is_absolute() or target.startswith((".", "~")) or target.count("/") > 1 or is_gguf(target)
    is_model = (path / "config.json").is_file() or (is_gguf(target) and path.is_file())
    if local and not is_model:
        raise UnusableInput(f"{option} {spec.written!r}: {target} is not a model folder (no config.json there) "
                            "or .gguf file")


class LLMJudge(Backend):
    """llm:MODEL@URL[:TEMPLATE-vN] or llm:PATH[:TEMPLATE-vN]: PairwiseLLMJudge, both orders."""

    roles = ("judge", "scorer")
    usage = "llm:MODEL@http://HOST:PORT/v1 or llm:PATH, optionally :TEMPLATE-vN"

    def parse(self, spec: Spec, option: str) -> Spec:
        if _ANY_URL.search(spec.target):
            found = _SERVED.match(spec.target)
            if not found:
                raise UnusableInput(f"{option} {spec.written!r}: a served judge is llm:MODEL@http://HOST:PORT/v1 "
                                    "(optionally :TEMPLATE-vN)")
            return replace(spec, target=found["model"], base_url=found["url"], template=found["template"])
        found = _LOCAL.match(spec.target)
        return replace(spec, target=found["model"], template=found["template"])

    def check(self, spec: Spec, role: str, option: str) -> Spec:
        if spec.template:
            from prefdata.collect.judging import Template

            Template.load(spec.template)  # an unknown template: one line naming the known ones
        if spec.base_url is not None:
            return spec
        if role != "judge":
            _model_path(spec, option)
            return spec
        from prefdata.models.loading import is_gguf

        path = Path(spec.target).expanduser()
        if not (path.is_dir() or (is_gguf(path) and path.is_file())):
            raise UnusableInput(f"{option} {spec.written!r}: {path} is no model folder or .gguf file; a served judge "
                                "is llm:MODEL@http://HOST:PORT/v1")
        return replace(spec, target=str(path.resolve()))

    def judge(self, spec: Spec, options: Mapping[str, Any]):
        from prefdata.collect.judging import PairwiseLLMJudge

        kwargs = {name: options[key] for key, name in _LLM_OPTIONS.items() if options.get(key) is not None}
        if spec.template:
            kwargs["template"] = spec.template
        return PairwiseLLMJudge(spec.base_url, spec.target, **kwargs)

    def keeps_model(self, spec: Spec) -> bool:
        return spec.base_url is None  # a model loaded in this process; a served one costs nothing to reach


class RewardModel(Backend):
    """rm:PATH: a sequence-classification reward model scores each side (prefdata/models/reward.py)."""

    roles = ("judge", "scorer", "reward")
    usage = "rm:PATH"

    def check(self, spec: Spec, role: str, option: str) -> Spec:
        path = Path(spec.target).expanduser()
        if role == "scorer":
            _model_path(spec, option)
            return spec
        if not path.is_dir():
            if role == "reward":
                raise UnusableInput(f"{option} {spec.written!r}: reward model {spec.target} not found (no such "
                                    "folder); train one with `prefdata train rm`")
            raise UnusableInput(f"{option} {spec.written!r}: {spec.target} is not a reward-model folder")
        return replace(spec, target=str(path.resolve()))

    def judge(self, spec: Spec, options: Mapping[str, Any]):
        from prefdata.collect.judging import RewardModelJudge

        return RewardModelJudge(spec.target)

    def scorer(self, spec: Spec, pairs, comparisons=None, sample_size: int = 500):
        from prefdata.gate.scoring import reward_model_verdicts

        return reward_model_verdicts(spec.target, pairs, sample_size)

    def reward(self, spec: Spec) -> Callable[[list[str], list[str]], list[float]]:
        from prefdata.models.reward import RewardModelScorer

        scorer = RewardModelScorer(spec.target)

        def reward(prompts: list[str], completions: list[str]) -> list[float]:
            return [float(s) for s in scorer(list(prompts), list(completions))]

        reward.__name__ = f"rm_{Path(spec.target).name}"
        return reward

    def keeps_model(self, spec: Spec) -> bool:
        return True


class PolicyLogprobs(Backend):
    """lm:PATH: a causal LM's mean log-probability of each response (the policy's own preference)."""

    roles = ("scorer",)
    usage = "lm:PATH"

    def check(self, spec: Spec, role: str, option: str) -> Spec:
        _model_path(spec, option)
        return spec

    def scorer(self, spec: Spec, pairs, comparisons=None, sample_size: int = 500):
        from prefdata.gate.scoring import policy_logprob_verdicts

        return policy_logprob_verdicts(spec.target, pairs, sample_size)


class Rule(Backend):
    """rule:NAME: a registered verifier (prompt, completion) -> bool | float (prefdata/base/registry.py)."""

    roles = ("judge", "scorer", "reward")
    usage = "rule:NAME"
    hackable = False  # a rule verifies; a policy cannot game it as it can a learned reward

    def check(self, spec: Spec, role: str, option: str) -> Spec:
        from prefdata.base.registry import load, resolve

        target = resolve("verifier", spec.target, f"{option} rule")  # a registered name -> its module:function
        load("verifier", target, f"{option} rule")  # imported now: fail here, before any work
        return replace(spec, target=target)

    def judge(self, spec: Spec, options: Mapping[str, Any]):
        from prefdata.base.registry import load
        from prefdata.collect.judging import RuleJudge

        return RuleJudge(load("verifier", spec.target, "judge rule"), rule_name=spec.target)

    def scorer(self, spec: Spec, pairs, comparisons=None, sample_size: int = 500):
        from prefdata.gate.scoring import rule_verdicts

        return rule_verdicts(spec.target, pairs, sample_size)

    def reward(self, spec: Spec) -> Callable[[list[str], list[str]], list[float]]:
        from prefdata.base.registry import load, resolve

        verifier = load("verifier", spec.target, "rewards: rule")
        name = resolve("verifier", spec.target, "rewards: rule").partition(":")[2]

        def reward(prompts: list[str], completions: list[str]) -> list[float]:
            return [float(verifier(p, c)) for p, c in zip(prompts, completions, strict=True)]

        reward.__name__ = f"rule_{name}"  # TRL logs each reward function's mean under its name
        return reward


class VerdictsFile(Backend):
    """verdicts:FILE: a judge's verdicts already made (prefdata.gate.scoring.verdicts_from_file)."""

    roles = ("scorer",)
    usage = "verdicts:FILE"
    reads_pairs = False  # the verdicts name the pairs by id: usable on a version checked shard by shard

    def check(self, spec: Spec, role: str, option: str) -> Spec:
        if not Path(spec.target).expanduser().is_file():
            raise UnusableInput(f"{option} {spec.written!r}: no verdicts file {spec.target}")
        return spec

    def scorer(self, spec: Spec, pairs, comparisons=None, sample_size: int = 500):
        from prefdata.gate.scoring import verdicts_from_file

        return verdicts_from_file(spec.target, comparisons)


llm = LLMJudge()
rm = RewardModel()
lm = PolicyLogprobs()
rule = Rule()
verdicts = VerdictsFile()
