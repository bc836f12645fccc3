"""One source for every option. A command's option that stands for a field of a flow's model is built
from it (prefdata/commands/options.py: its default and help), a default shared with a module
too heavy for `--help` is read from prefdata/base/defaults.py, and no command writes a default out:
test_no_command_writes_a_default_out reads their source and fails on any, but for the few named in
COMMAND_ONLY or INTENDED, each with its reason. What the commands cannot build from (the flows'
own parameters, library functions' keywords, the trainers' TRL configs) is compared with them here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from pydantic import BaseModel
from typer.main import get_command

from prefdata.commands.cli import app
from prefdata.flows import params
from prefdata.flows.params import Argilla, Checks, Engine, Humans, Judge, Policy, Prompts, Training

REQUIRED = "(required)"


def commands(command=None, path: tuple[str, ...] = ()) -> dict:
    """"world judge" -> its click command, for every command and subcommand of `prefdata`."""
    command = command or get_command(app)
    if not hasattr(command, "commands"):
        return {" ".join(path): command}
    return {name: c for sub, child in command.commands.items() for name, c in commands(child, (*path, sub)).items()}


COMMANDS = commands()


def fields(model: type[BaseModel], prefix: str = "") -> dict:
    """A model's fields as (default, description)."""
    return {prefix + name: (REQUIRED if f.is_required() else f.get_default(call_default_factory=True), f.description)
            for name, f in model.model_fields.items()}


def flow_parameters(flow) -> dict:
    """A flow's parameters but its model-typed ones (prompts=Prompts(), ...: the fields above)."""
    return {name: REQUIRED if p.default is p.empty else p.default
            for name, p in inspect.signature(flow.fn).parameters.items() if not isinstance(p.default, BaseModel)}


def keywords(fn) -> dict:
    """A library function's keyword defaults (its positional inputs are wired by the command)."""
    return {name: p.default for name, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


# command -> {model: fields}: the models its options are built from (default and help both).
MODELS = {
    "check": {"Checks": fields(Checks)},
    "publish": {"Checks": fields(Checks)},
    "filter": {"Checks": fields(Checks)},
    "import": {"Humans": fields(Humans)},
    "collect": {"Prompts": fields(Prompts), "Policy": fields(Policy), "Judge": fields(Judge, "judge_"),
                "Humans": fields(Humans), "Argilla": fields(Argilla, "argilla_"), "Engine": fields(Engine)},
    "train": {"Training": fields(Training)},
    **{f"argilla {c}": {"Argilla": fields(Argilla)} for c in ("push", "pull", "add-user")},
}


def functions() -> dict[str, dict[str, dict]]:
    """command -> {source: {name: default}}: the plain functions behind each command, whose defaults
    are written in code the command line does not import (Prefect's flows, polars, torch)."""
    from prefdata.data.importer import import_file
    from prefdata.flows import collect, gate, train
    from prefdata.gate.filtering import filter_version
    from prefdata.trainers import train as run_trainer
    from prefdata.world.judge import measure_served_judge

    return {
        "check": {"flow validate": flow_parameters(gate.validate)},
        "publish": {"flow publish": flow_parameters(gate.publish)},
        "filter": {"filter_version": keywords(filter_version)},
        "collect": {"flow collect": flow_parameters(collect.collect)},
        "train": {"flow train": flow_parameters(train.train), "trainers.train": keywords(run_trainer)},
        "import": {"import_file": keywords(import_file)},
        "world judge": {"measure_served_judge": keywords(measure_served_judge)},
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

# (command, option) -> why it is not its counterpart's default (or help), on purpose.
INTENDED = {
    ("check", "data"): "optional only for --list-checks; without it the command says DATA is missing",
    ("check", "report_dir"): "check writes no reports unless asked (its help says so); publish always writes them "
                             "(the default folder its field names)",
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
    **{(f"argilla {c}", "url"): "found as the other argilla commands find it ($ARGILLA_API_URL, else the local "
                                "server's); a flow must name its server" for c in ("push", "pull", "add-user")},
}

# (command, option) -> why the command writes its default out: no model, config or library holds it.
COMMAND_ONLY = {
    ("check", "chat"): "template_fit's rendering for this one check: auto reads the version's lineage",
    ("collect", "humans"): "where the command sends the human share; the flow takes Humans' fields instead",
    ("demo", "out"): "the demo's own folder",
    ("demo", "world"): "which demo runs",
    ("serve", "file"): "the deployments file of the working folder",
    ("run", "timeout"): "how long `run --wait` follows a run",
    ("argilla add-user", "role"): "the role a new user gets",
    ("argilla push", "seed"): "the push's own draw (A/B order, --sample)",
    # copies of measure_served_judge's keywords (prefdata.world loads torch), held equal by
    # test_every_shared_option_is_its_counterparts
    ("world judge", "n"): "measure_served_judge's n",
    ("world judge", "concurrency"): "measure_served_judge's concurrency",
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


def compare(command: str, sources: dict[str, dict], with_help: bool) -> tuple[int, list[str], set]:
    """(options compared, divergences, the INTENDED entries met) of one command against its counterparts:
    {source: {name: default}}, or {source: {name: (default, help)}} `with_help`."""
    compared, problems, intended_seen = 0, [], set()
    for param in COMMANDS[command].params:
        name = RENAMED.get((command, param.name), param.name)
        for source, values in sources.items():
            if name not in values:
                continue
            compared += 1
            theirs, help_text = values[name] if with_help else (values[name], None)
            cli, theirs = normal(cli_default(param)), normal(theirs)
            if (command, param.name) in INTENDED:
                intended_seen.add((command, param.name))
                if cli == theirs and (not with_help or param.help == help_text):
                    problems.append(f"{command} --{param.name}: listed in INTENDED but equal to {source}'s")
            elif cli != theirs:
                problems.append(f"{command} --{param.name}: default {cli!r}, {source}.{name}: {theirs!r}")
            elif with_help and param.help != help_text:
                problems.append(f"{command} --{param.name}: help {param.help!r}, {source}.{name}: {help_text!r}")
    return compared, problems, intended_seen


def compare_all(sources_by_command: dict, with_help: bool) -> tuple[int, list[str], set]:
    compared, problems, intended_seen = 0, [], set()
    for command, sources in sources_by_command.items():
        n, found, seen = compare(command, sources, with_help)
        compared, problems, intended_seen = compared + n, problems + found, intended_seen | seen
    return compared, problems, intended_seen


def test_every_option_of_a_model_field_is_built_from_it():
    """Its default and its help are the field's (option(Model, field)), unless INTENDED says why not."""
    compared, problems, _ = compare_all(MODELS, with_help=True)
    assert not problems, "\n".join(problems)
    assert compared > 40


def test_every_shared_option_is_its_counterparts():
    """Options whose counterparts are the flows' parameters or library functions' keywords."""
    compared, problems, intended_seen = compare_all(functions(), with_help=False)
    assert not problems, "\n".join(problems)
    assert compared > 20
    intended_seen |= compare_all(MODELS, with_help=True)[2]
    assert set(INTENDED) == intended_seen, f"INTENDED names options with no counterpart: {set(INTENDED) - intended_seen}"


def written_out(node: ast.expr, bound: set[str]) -> bool:
    """Whether an expression is a value written out: built from constants alone (4, "auto",
    Path(".prefdata/demo"), f"http://h:{6900}"), or a name this file binds to one. A name or attribute
    of anything else (defaults.BATCH_ROWS, option(Policy, "seed")) reads its value from its source."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "option":
            return False
        parts = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(node.func, ast.Attribute) and not isinstance(node.func.value, (ast.Name, ast.Attribute)):
            parts.append(node.func.value)  # ",".join(...): the text it is called on
        return all(written_out(part, bound) for part in parts)
    if isinstance(node, ast.Name):
        return node.id in bound
    if isinstance(node, ast.Attribute):
        return False
    return all(written_out(child, bound) for child in ast.iter_child_nodes(node))


def the_default(node: ast.expr) -> ast.expr:
    """typer.Option(4, ...) as a parameter's default (typer's older style) defaults to its first argument."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("typer.Option", "typer.Argument") and node.args:
        return node.args[0]
    return node


def written_out_defaults() -> dict[tuple[str, str], str]:
    """(command, option) -> its default's source text, for every command option whose default is
    written out in prefdata/commands/ (None, False and a required option's ... are not defaults)."""
    found, trees = {}, {}
    for command, click_command in COMMANDS.items():
        fn = inspect.unwrap(click_command.callback)
        path = inspect.getsourcefile(fn)
        if path not in trees:
            tree = ast.parse(Path(path).read_text(encoding="utf-8"))
            bound: set[str] = set()
            for statement in tree.body:  # module constants, in order: ROWS = 100_000; LIMIT = ROWS * 2
                if isinstance(statement, ast.Assign) and written_out(statement.value, bound):
                    bound |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
            trees[path] = (tree, bound)
        tree, bound = trees[path]
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == fn.__name__)
        arguments = [*node.args.posonlyargs, *node.args.args]
        pairs = [*zip(arguments[len(arguments) - len(node.args.defaults):], node.args.defaults),
                 *((a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None)]
        for argument, default in pairs:
            value = the_default(default)
            if isinstance(value, ast.Constant) and any(value.value is v for v in (None, False, ...)):  # 0 is no False
                continue
            if written_out(value, bound):
                found[(command, argument.arg)] = ast.unparse(default)
    return found


def test_no_command_writes_a_default_out():
    """A default is read from its source (option(Model, field), prefdata.base.defaults), never
    written out, but for the options named in COMMAND_ONLY and INTENDED, each with its reason."""
    found = written_out_defaults()
    assert found, "the scan found no default at all: it reads the wrong files"
    unexplained = {key: text for key, text in found.items() if key not in COMMAND_ONLY and key not in INTENDED}
    assert not unexplained, "\n".join(f"{c} --{o} = {text}: read it from its source (prefdata/commands/options.py, "
                                      "prefdata/base/defaults.py), or say why in COMMAND_ONLY"
                                      for (c, o), text in unexplained.items())
    assert set(COMMAND_ONLY) <= set(found), f"COMMAND_ONLY names defaults no command writes out: " \
                                            f"{set(COMMAND_ONLY) - set(found)}"


def test_the_scan_finds_a_default_written_out():
    """The rule itself: a literal, a Path of one, a text built from them or a name bound to one is
    written out; a default read from a model, defaults or another module is not."""
    source = ("ROWS = 1_000\nHOME = Path('.prefdata')\n"
              "def f(a=4, b=Path('x'), c=ROWS, d=HOME / 'q', e=f'http://h:{6900}', g=typer.Option(8, help='h'), "
              "h=option(Policy, 'seed'), i=defaults.BATCH_ROWS, j=','.join(defaults.FILTER_DROP), "
              "k=','.join(('a', 'b')), l=f'http://h:{defaults.ARGILLA_PORT}', m=WORLD):\n    pass\n")
    tree = ast.parse(source)
    bound = {"ROWS", "HOME"}
    fn = tree.body[-1]
    written = {a.arg for a, d in zip(fn.args.args, fn.args.defaults) if written_out(the_default(d), bound)}
    assert written == {"a", "b", "c", "d", "e", "g", "k"}


def test_train_options_have_every_methods_config_default():
    """`train`'s options against each built-in method's config dataclass (TRL's fields and prefdata's):
    base_model, output_dir, chat and system_prompt today. Loads TRL, hence a test of its own."""
    from prefdata.trainers import load, methods

    configs = {f"{m} config": {f.name: f.default for f in dataclasses.fields(load(m).config_class)} for m in methods()}
    compared, problems, _ = compare("train", configs, with_help=False)
    # --chat and --max-steps are None (the config's value) so that a config's `chat: false` or `max_steps`
    # is not overridden by a default
    assert problems == [f"train --{field}: default None, {m} config.{name}: {default!r}"
                        for field, name in (("chat", "chat"), ("max_steps", "max_steps"))
                        for m in methods() for default in [configs[f"{m} config"][name]]], "\n".join(problems)
    assert compared >= 2 * len(methods())


def test_heavy_modules_read_their_defaults_from_the_one_home():
    from prefdata.argilla.server import DEFAULT_PORT
    from prefdata.base import defaults
    from prefdata.data.columnar import BATCH_ROWS
    from prefdata.data.importer import DEFAULT_MAX_TEXT_BYTES
    from prefdata.gate.filtering import DEFAULT_DROP

    assert (BATCH_ROWS, DEFAULT_MAX_TEXT_BYTES, DEFAULT_DROP, DEFAULT_PORT) == (
        defaults.BATCH_ROWS, defaults.MAX_TEXT_BYTES, defaults.FILTER_DROP, defaults.ARGILLA_PORT)


def test_defaults_named_in_help():
    """Where the command line's default is None and the model resolves it, the help names the resolved value."""
    from prefdata.argilla.server import DEFAULT_PORT
    from prefdata.checks.checklist import default_config

    help_of = lambda command, name: next(p.help for p in COMMANDS[command].params if p.name == name)  # noqa: E731
    assert f"default: {params.MAX_NEW_TOKENS}; {params.WORLD_MAX_NEW_TOKENS} for the world's SFT model" in help_of(
        "collect", "max_new_tokens")
    assert f"(default: {params.WORLD_PROMPTS})" in help_of("collect", "n")
    assert f"default {Judge.model_fields['template'].default}" in help_of("collect", "judge_template")
    template_fit = default_config()["checks"]["template_fit"]["max_length"]
    assert f"the config's, {template_fit})" in help_of("check", "max_length")
    argilla_url = next(p.default for p in COMMANDS["collect"].params if p.name == "argilla_url")
    assert argilla_url == f"http://127.0.0.1:{DEFAULT_PORT}"
    humans = next(p.default for p in COMMANDS["collect"].params if p.name == "humans")
    assert humans == "queue" and Humans().argilla is None and Humans().simulated is None  # the queue file only
    assert "none are written" in help_of("check", "report_dir")


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
    assert {name: theirs.get(name, "(missing)") for name in Checks.model_fields} == {
        name: default for name, (default, _) in fields(Checks).items()}


def test_the_checklist_fits_pairs_to_the_trainers_max_length():
    from prefdata.checks.checklist import default_config
    from prefdata.trainers import load

    trainers = {f.default for m in ("dpo", "rm", "sft") for f in dataclasses.fields(load(m).config_class)
                if f.name == "max_length"}
    assert trainers == {default_config()["checks"]["template_fit"]["max_length"]}
