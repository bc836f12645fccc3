"""`prefdata collect`: a prompts file, a policy and a judge in, a draft dataset version out.

A thin command over the collect flow (prefdata/flows/collect.py): it turns three specs into the
flow's parameters (prefdata/flows/params.py) and runs it, with its caching and resume: a rerun with
the same prompts, policy and judge takes every sampled and judged chunk from --cache-dir. While it
runs, stderr shows each stage's progress, read from the run's task runs in Prefect's API
(prefdata/flows/progress.py); stdout holds the run's result. Only typer at import; Prefect, torch
and the flow load inside the command (`prefdata --help` stays fast).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from prefdata.base import defaults
from prefdata.base.errors import UnusableInput
from prefdata.commands.options import option
from prefdata.flows.params import Humans, Judge, Policy, Prompts

WORLD = "world"  # --prompts, --policy and --judge: the embedded demo world's prompts, SFT model and verifier
# Below this share of decided pairs, the run says what a weak judge means (the rest went to humans).
WEAK_JUDGE_SHARE = 0.2


def argilla_ready(url: str) -> str:
    """The Argilla server's URL once its key is found as `argilla push` finds it ($ARGILLA_API_KEY, else the
    running local server's owner key) and checked against it; the key goes where the flow reads it (this
    process's environment), never to the screen. One line with the fix otherwise."""
    from prefdata.argilla.client import connect
    from prefdata.commands.argilla import _connection

    try:
        url, key = _connection(url, None)
    except UnusableInput:
        raise UnusableInput(f"--humans argilla: no API key for {url}: set ARGILLA_API_KEY, or start the local "
                            "server with `prefdata argilla up` (its owner key is then found)") from None
    connect(url, key, "collect --humans argilla", quick=True, url_option="--argilla-url")
    os.environ["ARGILLA_API_KEY"] = key
    return url


def judge_params(spec: str, option: str = "--judge") -> dict[str, Any]:
    """A judge spec (prefdata.base.specs: a registered backend offering the judge role) -> the collect
    flow's Judge fields, checked by its backend as far as can be before anything is sampled (a template, a
    model folder, a registered verifier); UnusableInput (one line, naming `option`) for a bad spec."""
    from prefdata.base.specs import check_spec
    from prefdata.flows.params import Judge

    return Judge.fields_of(check_spec(spec, "judge", option))


def policy_params(policy: str, model: str | None) -> dict[str, Any]:
    """--policy PATH (a local model folder, sampled in process) or URL (an OpenAI-compatible server
    serving --model)."""
    if policy == WORLD:
        if model:
            raise UnusableInput("--model names a server's model: give it with --policy URL, not world")
        return {"model": WORLD}  # built (or taken from its cache) by the flow
    if policy.startswith(("http://", "https://")):
        if not model:
            raise UnusableInput(f"--policy {policy}: a server needs --model, the model name it serves")
        return {"model": model, "base_url": policy}
    if model:
        raise UnusableInput("--model names a server's model: give it with --policy URL, not a folder")
    from prefdata.models.loading import is_gguf

    if not (Path(policy).is_dir() or (is_gguf(policy) and Path(policy).is_file())):
        raise UnusableInput(f"--policy {policy}: not a model folder, a .gguf file or an http(s):// URL")
    return {"model": str(Path(policy).resolve())}


def check_chat(policy: str, fields: dict[str, Any], chat: str, system: str | None) -> None:
    """--chat true on a policy whose tokenizer is here and cannot carry it (no template, or one that
    writes no assistant's turn): one line before anything is sampled, not a failed first chunk."""
    if chat != "true":
        return
    model = fields["model"]
    if not fields.get("base_url"):
        from prefdata.world import model_or_world

        model = model_or_world(model)
    if not Path(model).exists():
        return  # a hosted name: its server holds the template
    from prefdata.models.chat import resolve
    from prefdata.models.loading import load_tokenizer

    try:
        resolve(load_tokenizer(model), chat, system)
    except ValueError as error:
        raise UnusableInput(f"--policy {policy}: {error}") from None


def collect_command(
    prompts: Annotated[str, typer.Option(help="Prompts: .txt (one a line), a table with a prompt column (text, or "
                                              "{role, content} messages as TRL's conversational format; or a "
                                              "messages column), or world (fresh prompts from the demo world, --n "
                                              "of them).")],
    policy: Annotated[str, typer.Option(help="A local model folder, an OpenAI-compatible URL (with --model), or world "
                                             "(the demo world's SFT model).")],
    judge: Annotated[str, typer.Option(help="llm:MODEL@URL (a served judge), llm:PATH (a local model, in process), "
                                            "rm:PATH, rule:NAME, world (the demo world's verifier), or KIND:TARGET of a "
                                            "judge backend another package registers.")],
    name: Annotated[str, typer.Option(help="Dataset name: the draft becomes NAME@VERSION in the store.")],
    then_judge: Annotated[Optional[str], typer.Option(help="A second judge, same syntax, for the pairs --judge leaves "
                                                           "undecided (e.g. --judge rule:NAME --then-judge "
                                                           "llm:PATH); what it leaves goes to humans.")] = None,
    humans: Annotated[str, typer.Option(help="queue: write the human share to --queue-dir; argilla: push it to "
                                             "Argilla (--argilla-url) and pull the votes there are.")] = "queue",
    aggregate: str = option(Humans, "aggregate"),
    model: Annotated[Optional[str], typer.Option(help="The model name the --policy server serves.")] = None,
    n: Optional[int] = option(Prompts, "n"),
    candidates: int = option(Policy, "candidates"),
    max_new_tokens: Optional[int] = option(Policy, "max_new_tokens"),
    temperature: float = option(Policy, "temperature"),
    seed: int = option(Policy, "seed"),
    cache_dir: Annotated[Path, typer.Option(help="Where sampled and judged chunks persist: a rerun resumes from them.")]
    = Path(".prefdata/cache"),
    queue_dir: Path = option(Humans, "queue_dir"),
    argilla_url: Annotated[str, typer.Option(help="--humans argilla: the server (API key in $ARGILLA_API_KEY, else "
                                                  "the local server's owner key, as `prefdata argilla push`).")]
    = f"http://127.0.0.1:{defaults.ARGILLA_PORT}",
    guidelines: Annotated[Optional[Path], typer.Option(help="Annotation guidelines (Markdown) for the card and Argilla.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the run's summary here.")] = None,
    store: Annotated[Optional[str], typer.Option("--store", help="Store root or fsspec URL (default: $PREFDATA_STORE or .prefdata/store)")] = None,
    onto: Annotated[Optional[str], typer.Option(help="Grow a version: the draft holds its rows before the new ones "
                                                     "(NAME@VERSION, or previous: NAME's newest validated version, "
                                                     "if any), its files shared, as `import --onto`.")] = None,
    judge_template: Annotated[Optional[str], typer.Option(help="llm judges: the versioned template (NAME-vN; "
                                                               f"default {Judge.model_fields['template'].default}, "
                                                               "or the spec's :TEMPLATE-vN).")] = None,
    judge_max_tokens: int = option(Judge, "max_tokens", "--judge-max-tokens"),
    judge_timeout: float = option(Judge, "timeout_s", "--judge-timeout"),
    chat: str = option(Policy, "chat", metavar="[auto|true|false]"),
    system_prompt: Optional[str] = option(Policy, "system_prompt"),
) -> int:
    """Sample candidates from a policy, pair and judge them, route the doubtful share to humans, and
    store a draft version: the collect flow in one command, cached and resumable."""
    from prefdata.commands.console import terminal

    say = terminal().print
    if humans not in ("queue", "argilla"):
        raise UnusableInput(f"--humans {humans!r}: choose queue or argilla")
    if humans == "argilla":  # before any sampling: a missing key or server fails now, not after the judge
        argilla_url = argilla_ready(argilla_url)
    from prefdata.data.formats import AGGREGATES

    if aggregate not in AGGREGATES:
        raise UnusableInput(f"--aggregate {aggregate!r}: choose majority or dawid-skene")
    from prefdata.models.chat import chat_mode

    try:
        chat = chat_mode(chat)
    except ValueError as error:
        raise UnusableInput(f"--{error}") from None
    if prompts != WORLD and not Path(prompts).is_file():
        raise UnusableInput(f"--prompts {prompts}: not a file; give .txt (one prompt a line), a table with a prompt "
                            "column, or world")
    judge_fields, policy_fields = judge_params(judge), policy_params(policy, model)
    check_chat(policy, policy_fields, chat, system_prompt)
    cascade = [judge_fields, *([judge_params(then_judge, "--then-judge")] if then_judge else [])]
    llm_judges = [fields for fields in cascade if fields["kind"] == "llm"]
    if judge_template is not None and not llm_judges:
        raise UnusableInput(f"--judge-template is for llm judges; --judge {judge} has no template")
    for fields in llm_judges:  # the llm options apply to whichever judge of the cascade is an LLM
        if judge_template is not None:
            from prefdata.collect.judging import Template

            Template.load(judge_template)
            fields["template"] = judge_template
        fields.update(max_tokens=judge_max_tokens, timeout_s=judge_timeout)
    if then_judge:
        judge_fields["then"] = cascade[1]
    # as the demo does: Prefect's ephemeral server may need more than 20 s on two busy cores, and its
    # per-task INFO lines would bury the stage lines below
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefdata.commands.console import quiet_reported_failures

    quiet_reported_failures()
    from pydantic import ValidationError

    from prefdata.flows.params import Argilla, Engine
    from prefdata.data.store import check_name

    check_name(name)
    try:
        params = dict(
            prompts=Prompts(source=WORLD if prompts == WORLD else str(prompts), n=n),
            policy=Policy(**policy_fields, candidates=candidates, max_new_tokens=max_new_tokens,
                          temperature=temperature, seed=seed, chat=chat, system_prompt=system_prompt),
            judge=Judge(**judge_fields),
            humans=Humans(queue_dir=str(queue_dir), aggregate=aggregate,
                          argilla=Argilla(url=argilla_url, dataset=name) if humans == "argilla" else None),
            engine=Engine(cache_dir=str(cache_dir)),
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        raise UnusableInput(f"{'.'.join(map(str, error['loc'])) or 'collect'}: {error['msg']}") from None
    from prefdata.flows.collect import collect, shown_stages
    from prefdata.flows.progress import followed
    from prefdata.base.progress import display
    from transformers.utils import logging as hf_logging

    # the stages' progress below replaces the libraries' own bars ("Loading weights" on every model load),
    # here and in worker processes (which read the variable when they import huggingface_hub)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    hf_logging.disable_progress_bar()
    say(f"collect: prompts {prompts}, policy {policy_fields['model']}"
        f"{' at ' + policy_fields['base_url'] if 'base_url' in policy_fields else ''}, judge {judge}, "
        f"humans {humans}; cache {cache_dir}")
    say("sample + judge: running (finished chunks come from the cache)...")
    # Each stage's progress on stderr while the flow runs, read from its task runs in Prefect's API;
    # --humans queue only writes a file (no task, nothing to follow).
    stages = shown_stages(humans == "argilla", cascade=bool(then_judge))
    from prefdata.flows.server import temporary_api

    with temporary_api(), followed(stages, display(stages)):
        result = collect(name=name, guidelines=str(guidelines) if guidelines else None, store=store, onto=onto, **params)
    verdicts = result["judge"]
    say(f"sample: {result['prompts']} prompts -> {result['candidates']} candidates")
    say(f"pair: {result['comparisons']} comparisons ({result['prompts_without_pair']} prompts without a pair)")
    say(f"judge: {verdicts['decided']} decided, {verdicts['undecided']} undecided of {verdicts['n']}"
        + "".join(f"; {s['judge']['kind']} judge {i} decided {s['decided']} of the {s['pairs']} it saw"
                  for i, s in enumerate(result["judges"], 1) if len(result["judges"]) > 1))
    for stage in result["judges"]:
        if stage["judge"]["kind"] == "llm" and stage["pairs"] and stage["decided"] < WEAK_JUDGE_SHARE * stage["pairs"]:
            say(f"judge: a weak judge here ({stage['unparseable']} pairs got replies naming no response as the "
                "template asks): a small model answers the question instead of judging; the undecided pairs go "
                "to humans. Use a verifier (rule:NAME) or a larger served model")
    say(f"route: {', '.join(f'{n} {r}' for r, n in result['routes']['route'].items()) or 'nothing'}")
    say(f"humans: {result['queued']} queued ({result['queue']}), {result['votes']} votes")
    say(f"draft: {result['version']}")
    if humans == "argilla":
        say(f"argilla: dataset {name!r} in workspace {Argilla.model_fields['workspace'].default!r} at {argilla_url} "
            "(annotators' votes come in with `prefdata argilla pull`, or a later collect)")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0
