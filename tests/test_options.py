"""One source for every option: the command line's defaults (and the checklist's help texts) are
held equal to the models and functions the flows and trainers use, so the two cannot drift apart.

cli.py cannot build its options from flows/params.py (importing those pydantic models would triple
`prefdata --help`'s time), so the commands are walked here instead: every option whose name (or its
name in RENAMED) is a field of a counterpart below must have that field's default, unless INTENDED
names the difference and says why.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from pydantic import BaseModel
from typer.main import get_command

from prefdata.commands.cli import app
from prefdata.flows import params
from prefdata.flows.params import Argilla, Checks, Engine, Humans, Judge, Policy, Prompts, Training

REQUIRED = "(required)"
COMMANDS = get_command(app).commands


def fields(model: type[BaseModel], prefix: str = "") -> dict:
    return {prefix + name: REQUIRED if f.is_required() else f.get_default(call_default_factory=True)
            for name, f in model.model_fields.items()}


def flow_parameters(flow) -> dict:
    """A flow's parameters but its model-typed ones (prompts=Prompts(), ...: the fields above)."""
    return {name: REQUIRED if p.default is p.empty else p.default
            for name, p in inspect.signature(flow.fn).parameters.items() if not isinstance(p.default, BaseModel)}


def keywords(fn) -> dict:
    """A library function's keyword defaults (its positional inputs are wired by the command)."""
    return {name: p.default for name, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


def counterparts() -> dict[str, dict[str, dict]]:
    """command -> {source: {name: default}}: what each command's options stand for."""
    from prefdata.data.columnar import BATCH_ROWS
    from prefdata.data.importer import import_file
    from prefdata.flows import collect, gate, train
    from prefdata.gate.filtering import filter_version
    from prefdata.trainers import train as run_trainer

    checks = {"Checks": fields(Checks)}
    return {
        "check": {**checks, "flow validate": flow_parameters(gate.validate), "columnar": {"batch_rows": BATCH_ROWS}},
        "publish": {**checks, "flow publish": flow_parameters(gate.publish)},
        "filter": {**checks, "filter_version": keywords(filter_version)},
        "collect": {"Prompts": fields(Prompts), "Policy": fields(Policy), "Judge": fields(Judge, "judge_"),
                    "Humans": fields(Humans), "Argilla": fields(Argilla, "argilla_"), "Engine": fields(Engine),
                    "flow collect": flow_parameters(collect.collect)},
        "train": {"Training": fields(Training), "flow train": flow_parameters(train.train),
                  "trainers.train": keywords(run_trainer)},
        "import": {"import_file": keywords(import_file), "columnar": {"batch_rows": BATCH_ROWS}},
    }


# (command, option) -> its name in the counterparts, where the two are spelt differently.
RENAMED = {
    ("check", "data"): "dataset",            # flow validate's dataset
    ("publish", "ref"): "dataset",           # flow publish's dataset
    ("collect", "prompts"): "source",        # --prompts is Prompts.source
    ("collect", "policy"): "model",          # --policy world|PATH becomes Policy.model (a URL: base_url, --model)
    ("collect", "judge_timeout"): "judge_timeout_s",
    ("train", "version"): "dataset",         # the positional NAME@VERSION, like every other command
    ("import", "format"): "fmt",
}

# (command, option) -> why its default differs from its counterpart's, on purpose.
INTENDED = {
    ("check", "data"): "optional only for --list-checks; without it the command says DATA is missing",
    ("collect", "prompts"): "a command asks for its inputs; the flow's defaults are the world's nightly run",
    ("collect", "policy"): "likewise",
    ("collect", "name"): "likewise (the flow's world-arithmetic is the nightly deployment's dataset)",
    ("collect", "model"): "--model is only a served model's name (with --policy URL); world comes from --policy",
    ("collect", "cache_dir"): "the command keeps its resume cache in a folder the user sees (and its stop line "
                              "names); a deployment's runs keep Prefect's result storage",
    ("collect", "argilla_url"): "the local server `prefdata argilla up` starts (test_defaults_named_in_help); "
                                "a flow must name its server",
    ("collect", "judge_template"): "None: the --judge spec's :TEMPLATE, else Judge's default (judge_params reads it)",
    ("train", "method"): "the command names its method; the flow defaults to dpo",
    ("train", "version"): "one of NAME@VERSION and --dataset is required: the command says so",
    ("train", "dataset"): "likewise: the positional's older spelling",
}


def normal(value):
    """Comparable defaults: a folder is its text, a tuple of checks their comma list."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return value


def cli_default(param):
    return REQUIRED if param.required else param.default


def compare(command: str, sources: dict[str, dict]) -> tuple[int, list[str], set]:
    """(options compared, divergences, the INTENDED entries met) of one command against its counterparts."""
    compared, problems, intended_seen = 0, [], set()
    for param in COMMANDS[command].params:
        name = RENAMED.get((command, param.name), param.name)
        for source, defaults in sources.items():
            if name not in defaults:
                continue
            compared += 1
            cli, theirs = normal(cli_default(param)), normal(defaults[name])
            if (command, param.name) in INTENDED:
                intended_seen.add((command, param.name))
                if cli == theirs:
                    problems.append(f"{command} --{param.name}: listed in INTENDED but equal to {source}'s")
            elif cli != theirs:
                problems.append(f"{command} --{param.name}: default {cli!r}, {source}.{name}: {theirs!r}")
    return compared, problems, intended_seen


def test_every_shared_option_has_its_counterparts_default():
    compared, problems, intended_seen = 0, [], set()
    for command, sources in counterparts().items():
        n, found, seen = compare(command, sources)
        compared, problems, intended_seen = compared + n, problems + found, intended_seen | seen
    assert not problems, "\n".join(problems)
    assert set(INTENDED) == intended_seen, f"INTENDED names options with no counterpart: {set(INTENDED) - intended_seen}"
    assert compared > 40


def test_train_options_have_every_methods_config_default():
    """`train`'s options against each built-in method's config dataclass (TRL's fields and prefdata's):
    base_model, output_dir, chat and system_prompt today. Loads TRL, hence a test of its own."""
    from prefdata.trainers import load, methods

    configs = {f"{m} config": {f.name: f.default for f in dataclasses.fields(load(m).config_class)} for m in methods()}
    compared, problems, _ = compare("train", configs)
    # --chat and --max-steps are None (the config's value) so that a config's `chat: false` or `max_steps`
    # is not overridden by a default
    assert problems == [f"train --{field}: default None, {m} config.{name}: {default!r}"
                        for field, name in (("chat", "chat"), ("max_steps", "max_steps"))
                        for m in methods() for default in [configs[f"{m} config"][name]]], "\n".join(problems)
    assert compared >= 2 * len(methods())


def test_the_checklist_options_have_checks_help():
    """check, publish and filter show Checks' descriptions as help: one text, in the UI and the terminal."""
    own = {("check", "report_dir"): "check writes no reports unless asked; publish always writes them (the default "
                                    "folder its field names)"}
    seen = 0
    for command in ("check", "publish", "filter"):
        for param in COMMANDS[command].params:
            if param.name in Checks.model_fields and (command, param.name) not in own:
                assert param.help == Checks.model_fields[param.name].description, f"{command} --{param.name}"
                seen += 1
    assert seen == 17  # check 7 (its report_dir is its own), publish 8, filter 2 (config, benchmarks)
    assert "none" in next(p.help for p in COMMANDS["check"].params if p.name == "report_dir")


def test_defaults_named_in_help():
    """Where the command line's default is None and the model resolves it, the help names the resolved value."""
    from prefdata.argilla.server import DEFAULT_PORT
    from prefdata.checks.checklist import default_config

    help_of = lambda command, name: next(p.help for p in COMMANDS[command].params if p.name == name)  # noqa: E731
    assert f"default: {params.MAX_NEW_TOKENS}; {params.WORLD_MAX_NEW_TOKENS} for --policy world" in help_of(
        "collect", "max_new_tokens")
    assert f"(default: {params.WORLD_PROMPTS})" in help_of("collect", "n")
    assert f"default {Judge.model_fields['template'].default}" in help_of("collect", "judge_template")
    template_fit = default_config()["checks"]["template_fit"]["max_length"]
    assert f"the config's, {template_fit})" in help_of("check", "max_length")
    argilla_url = next(p.default for p in COMMANDS["collect"].params if p.name == "argilla_url")
    assert argilla_url == f"http://127.0.0.1:{DEFAULT_PORT}"
    humans = next(p.default for p in COMMANDS["collect"].params if p.name == "humans")
    assert humans == "queue" and Humans().argilla is None and Humans().simulated is None  # the queue file only


def test_one_rule_for_what_collect_samples_when_not_told():
    """The flow, `prefdata collect` and the deployments: max_new_tokens and n resolved in the models."""
    assert Policy().max_new_tokens == params.WORLD_MAX_NEW_TOKENS  # the world's SFT model
    assert Policy(model="/some/model").max_new_tokens == params.MAX_NEW_TOKENS
    assert Policy(model=params.WORLD, base_url="http://h/v1").max_new_tokens == params.MAX_NEW_TOKENS  # a served "world"
    assert Policy(max_new_tokens=8).max_new_tokens == 8
    assert Policy.model_validate(Policy().model_dump()) == Policy()  # a dumped policy (a cache key) reads back the same
    assert Prompts().n == params.WORLD_PROMPTS and Prompts(n=3).n == 3
    assert Prompts(source="prompts.txt").n is None  # all of a file


def test_a_judge_spec_without_template_takes_judges_default():
    from prefdata.commands.collect import judge_params

    assert judge_params("llm:j@http://127.0.0.1:8000/v1")["template"] == Judge.model_fields["template"].default
    assert Judge.model_validate("llm:j@http://127.0.0.1:8000/v1").template == Judge.model_fields["template"].default


def test_checks_are_the_publishing_functions_keywords():
    """The flows pass Checks.model_dump() to validate_version: the same names, the same defaults."""
    from prefdata.gate.publishing import validate_version

    theirs = keywords(validate_version)
    assert {name: theirs.get(name, "(missing)") for name in Checks.model_fields} == fields(Checks)


def test_the_checklist_fits_pairs_to_the_trainers_max_length():
    from prefdata.checks.checklist import default_config
    from prefdata.trainers import load

    trainers = {f.default for m in ("dpo", "rm", "sft") for f in dataclasses.fields(load(m).config_class)
                if f.name == "max_length"}
    assert trainers == {default_config()["checks"]["template_fit"]["max_length"]}
