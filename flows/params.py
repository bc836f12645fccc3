"""The flows' parameters: pydantic models, so the Prefect UI builds its run form from them, a
deployment's `parameters:` in prefect.yaml are checked when it is served, and a bad value fails
before any work starts, naming the field. No Prefect import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The defaults `prefdata collect` shares with the collect flow, chosen here for both: what the demo
# world needs (a few short answers) and what a real model needs. The commands build their options
# from these models' fields (prefdata/commands/options.py): each field's default and description
# are the option's, so a description reads right in the UI and on the command line alike.
WORLD = "world"         # the demo world: its prompts (Prompts.source), its SFT model (Policy.model)
WORLD_PROMPTS = 16      # prompts drawn from the world when n is not given (a file gives all of its own)
MAX_NEW_TOKENS = 256    # a candidate's most tokens when max_new_tokens is not given
WORLD_MAX_NEW_TOKENS = 6  # the same for the world's SFT model: its answers are four digits and an end


class _Params(BaseModel):
    # extra="forbid": a misspelt key in prefect.yaml or the UI is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)
    # What a field lets a run reach outside its process: "path" (a file it reads or writes), "address"
    # (a server it sends data, and maybe a key, to), "env" (a variable it reads a key from), "spec" (a
    # scorer spec, which may hold either). A deployment's run may name only what the operator allowed.
    REACH: ClassVar[dict[str, str]] = {}


def registered(kind: str, value: str | None, where: str, canonical: bool = True) -> str | None:
    """A parameter that names Python names a registered entry (prefdata/base/registry.py), never a
    module path: refused here, before the run does any work. `canonical`: the entry's module:function
    in its place, so `world` and `prefdata.world:verify` are one judge to the cache and the lineage."""
    if value is None:
        return None
    from prefdata.base.errors import UnusableInput
    from prefdata.base.registry import resolve

    try:
        target = resolve(kind, value, where)
    except UnusableInput as exc:
        raise ValueError(str(exc)) from None
    return target if canonical else value


class Prompts(_Params):
    REACH = {"source": "path"}  # what a run may name is checked by reach() below
    source: str = Field(WORLD, description='"world": fresh arithmetic prompts from the demo world (never an eval '
                                           'prompt); or a file: .txt (one prompt a line) or a table with a prompt column '
                                           '(text, or {role, content} messages as TRL\'s conversational format; or a '
                                           'messages column, cut before its last assistant turns).')
    n: int | None = Field(None, ge=1, description=f"How many prompts: a file's first n (default: all), or n drawn "
                                                  f"from the world (default: {WORLD_PROMPTS}).")

    @model_validator(mode="before")
    @classmethod
    def _world_n(cls, data: Any) -> Any:
        """n not given: the world draws WORLD_PROMPTS (a file's None stays: all of it)."""
        if isinstance(data, dict) and data.get("n") is None and data.get("source", WORLD) == WORLD:
            return {**data, "n": WORLD_PROMPTS}
        return data


def chat_as_word(data: Any) -> Any:
    """A model's `chat` given as a bool (`chat: true` in YAML) or on/off/yes/no reads as its word."""
    if isinstance(data, dict) and "chat" in data and data["chat"] is not None:
        from prefdata.models.chat import chat_mode

        try:
            return {**data, "chat": chat_mode(data["chat"])}
        except ValueError:
            return data  # the field's own error names the choices
    return data


class Policy(_Params):
    REACH = {"base_url": "address", "api_key_env": "env"}
    model: str = Field(WORLD, description='"world" (the demo world\'s SFT model), a local checkpoint folder, or the '
                                          "model name a server knows (with base_url).")
    base_url: str | None = Field(None, description="An OpenAI-compatible server (vLLM, TGI, transformers serve) to "
                                                   "sample from; None samples in process with transformers.")
    api_key_env: str | None = Field(None, description="Environment variable holding the server's API key.")
    candidates: int = Field(4, ge=2, le=64, description="Candidates per prompt.")
    pairs: Literal["all", "random"] = Field("all", description="Which candidate pairs become comparisons.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 is greedy (and gives one distinct "
                                                       "candidate per prompt).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the smallest set of tokens whose "
                                                      "probability reaches top_p; 1 is off.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 is off (transformers would "
                                            "otherwise apply its own top_k=50).")
    max_new_tokens: int | None = Field(None, ge=1, description=f"Longest candidate, in tokens (default: {MAX_NEW_TOKENS}; "
                                                               f"{WORLD_MAX_NEW_TOKENS} for the world's SFT model, whose "
                                                               "answers are four digits and an end).")
    seed: int = Field(0, description="Seed of the run: each chunk samples with a seed drawn from it and its "
                                     "prompts, and random pairing draws from it, so a rerun gives the same candidates.")
    chunk_size: int = Field(8, ge=1, description="Prompts per sampling task: the unit of caching, resuming and fan-out.")
    requests_in_flight: int = Field(4, ge=1, description="Concurrent requests per sampling task (servers only).")
    chat: Literal["auto", "true", "false"] = Field(
        "auto", description="How prompts reach the policy (prefdata.models.chat, the rendering the trainers use too): "
                            "true renders them through its tokenizer's chat template, false as plain text, auto "
                            "uses the template when it writes the assistant's turn (a served model named by a "
                            "hosted name, with no local tokenizer: its server's chat API). Recorded in the draft's "
                            "lineage and card.")
    system_prompt: str | None = Field(None, description="A system prompt put before every prompt (a system turn, or "
                                                        "the plain text's first paragraph); default: none.")
    repair: str | None = Field(None, description="A registered repair rule (prompt, reply) -> the reply edited to "
                                                 "follow the prompt (prefdata.base.registry), or None: each prompt gets one more candidate, the "
                                                 "first one the rule edits, edited (a case-only edit in place of its "
                                                 "source: ids fold case; prefdata.collect.pairing.with_repair"
                                                 "; e.g. instructions). Its pairs come from two policies: the same_policy "
                                                 "check reports them.")

    @field_validator("repair")
    @classmethod
    def _repair(cls, value: str | None) -> str | None:
        return registered("repair", value, "policy.repair")

    @model_validator(mode="before")
    @classmethod
    def _chat(cls, data: Any) -> Any:
        return chat_as_word(data)

    @model_validator(mode="before")
    @classmethod
    def _max_new_tokens(cls, data: Any) -> Any:
        """max_new_tokens not given: the one rule of the flow, `prefdata collect` and the deployments."""
        if isinstance(data, dict) and data.get("max_new_tokens") is None:
            world = data.get("model", WORLD) == WORLD and not data.get("base_url")
            return {**data, "max_new_tokens": WORLD_MAX_NEW_TOKENS if world else MAX_NEW_TOKENS}
        return data


# Judge.kind before the one vocabulary of spec kinds (prefdata.base.specs): still read, in saved
# deployments (prefect.yaml), flow-run parameters and the lineage of older drafts.
OLD_JUDGE_KINDS = {"verifier": "rule", "reward_model": "rm"}


class Judge(_Params):
    REACH = {"base_url": "address", "api_key_env": "env"}
    kind: str = Field(
        "rule", description="What decides: the KIND of a KIND:TARGET judge spec, a registered backend offering the "
                            "judge role (prefdata.base.specs). rule: a verifier decides (the demo world's arithmetic); "
                            "llm: a pairwise LLM judge, both orders, on an OpenAI-compatible server (base_url) or in "
                            "process (no base_url: model is a local path); rm: a reward model; or another registered "
                            "backend, its target in model. The older names verifier and reward_model read as rule "
                            "and rm.")
    verifier: str = Field("prefdata.world:verify", description="rule: a registered verifier (prompt, completion) -> "
                                                               "bool | float, by name (world) or its module:function.")
    base_url: str | None = Field(None, description="llm: the judge server; None runs the model in this process.")
    model: str | None = Field(None, description="llm: the judge model's name (served) or path (in process); "
                                                "rm: its folder; another backend: its spec's TARGET.")
    template: str = Field("pairwise-v1", description="llm: the versioned judge template.")
    max_tokens: int = Field(512, ge=1, description="llm: the most tokens a judge's reply may use (a reply cut short "
                                                   "decides nothing).")
    api_key_env: str | None = Field(None, description="llm: environment variable holding the judge server's API "
                                                      "key (the key itself is never a parameter).")
    chunk_size: int = Field(16, ge=1, description="Pairs per judging task: the unit of caching, resuming and fan-out.")
    requests_in_flight: int = Field(4, ge=1, description="llm: concurrent requests inside one judging task.")
    limit: int = Field(4, ge=1, description="Judging tasks running at once, across all runs and workers (a Prefect "
                                            "global concurrency limit, set to this value when collect starts).")
    limit_name: str = Field("prefdata-judge", description="Name of that global concurrency limit.")
    slot_timeout_s: float | None = Field(None, gt=0, description="Fail a judging task that waits longer than this "
                                                                 "for a slot; None waits.")
    timeout_s: float = Field(60.0, gt=0, description="llm: seconds per request to a judge server (a busy CPU server "
                                                     "needs more than the default).")
    max_retries: int = Field(4, ge=0, description="llm: retries per request (timeouts, 429, 5xx), with backoff.")
    retry_delays_s: list[float] = Field([10.0, 60.0, 300.0], description="A judging task whose pairs could not all be "
                                        "judged (server down after the per-request retries) is retried after these "
                                        "delays; it is never cached with missing verdicts.")
    then: "Judge | None" = Field(None, description="A judge for the pairs this one leaves undecided (a verifier "
                                                 "first, then an LLM judge for the pairs where both or neither "
                                                 "reply passes); what the last judge leaves goes to humans. A spec "
                                                 "string or a mapping, as `judge` itself.")

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, data: Any) -> Any:
        """A judge given as a spec string (prefdata.base.specs), the syntax of `collect --judge`:
        judge: "llm:MODEL@URL", "llm:PATH", "rm:PATH", "rule:NAME", "world", or another registered
        backend's "NAME:TARGET"."""
        if not isinstance(data, str):
            return data
        from prefdata.base.specs import parse_spec

        return cls.fields_of(parse_spec(data, "judge", "judge"))

    @classmethod
    def fields_of(cls, spec) -> dict[str, Any]:
        """A judge spec (prefdata.base.specs.Spec) as this model's fields: rule's target is the verifier,
        any other backend's is model (llm's server and template beside it)."""
        if spec.kind == "rule":
            return {"kind": "rule", "verifier": spec.target}
        return {"kind": spec.kind, "model": spec.target, "base_url": spec.base_url,
                "template": spec.template or cls.model_fields["template"].default}

    @staticmethod
    def spec_of(identity: dict, base_url: str | None = None):
        """The spec a judge's identity() (and where it is served) names: what its backend builds a judge of."""
        from prefdata.base.specs import Spec

        kind = OLD_JUDGE_KINDS.get(identity["kind"], identity["kind"])  # an identity from before the renaming
        if kind == "rule":
            return Spec("rule", identity["verifier"])
        return Spec(kind, identity["model"], base_url, identity.get("template"))

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        """An older name as today's; any kind a registered backend offering the judge role (one line listing
        them otherwise)."""
        if not isinstance(value, str):
            return value
        value = OLD_JUDGE_KINDS.get(value, value)
        from prefdata.base.errors import UnusableInput
        from prefdata.base.registry import entries, refusal
        from prefdata.base.specs import backend, offering

        try:
            if value not in entries("backend"):
                judges = offering("judge")
                raise refusal("backend", value, "judge.kind", list(judges), what="judge backend")
            if "judge" not in backend(value, "judge.kind").roles:
                raise UnusableInput(f"judge.kind {value!r}: a {' and '.join(backend(value).roles)} backend, not a "
                                    f"judge; use one of {', '.join(offering('judge'))}")
        except UnusableInput as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("verifier")
    @classmethod
    def _verifier(cls, value: str) -> str:
        return registered("verifier", value, "judge.verifier")

    @model_validator(mode="after")
    def _needs(self) -> "Judge":
        if self.kind != "rule" and not self.model:
            what = {"llm": "the served model's name (with base_url) or a local model path (in process)",
                    "rm": "the reward model's folder"}.get(self.kind, f"the TARGET of its spec {self.kind}:TARGET")
            raise ValueError(f"judge kind {self.kind!r} needs model: {what}")
        return self

    def identity(self) -> dict:
        """What decides the verdicts: the judge's cache key. Where it is served (base_url), timeouts, retries
        and concurrency are not in it: the same model and template behind another address is the same judge.
        Another backend's keeps every field its spec or options may carry."""
        keep = {"rule": ("verifier",), "llm": ("model", "template", "max_tokens"), "rm": ("model",)}
        return {"kind": self.kind, **{k: getattr(self, k) for k in keep.get(self.kind, ("model", "template", "max_tokens"))}}

    def cascade(self) -> list["Judge"]:
        """This judge and the ones after it (`then`), in the order they see the undecided pairs."""
        return [self, *(self.then.cascade() if self.then else [])]

    def lineage(self) -> dict:
        """identity(), with the judges after it under "then" (the draft's lineage)."""
        return {**self.identity(), **({"then": self.then.lineage()} if self.then else {})}


class Routing(_Params):
    min_confidence: float = Field(0.8, ge=0, le=1, description="Judge verdicts below this go to humans.")
    human_categories: list[str] = Field(["safety"], description="Categories humans always label.")
    audit_share: float = Field(0.05, ge=0, le=1, description="Share of judge-decided pairs also sent to humans.")
    seed: int = Field(0, description="Seed of the audit draw: which decided pairs go to humans (hashed with each "
                                     "pair id, so it does not depend on order).")


class SimulatedAnnotators(_Params):
    k: int = Field(3, ge=1, description="Annotators, each voting on every queued pair.")
    accuracy: float = Field(0.85, ge=0, le=1, description="Probability an annotator's a/b vote picks the right "
                                                          "side (and, when no side is better, that it says tie).")
    tie_rate: float = Field(0.05, ge=0, le=1, description="Probability an annotator is unsure and votes tie when "
                                                          "one side is right.")
    seed: int = Field(0, description="Seed of every vote (hashed with the annotator and the pair: a vote never "
                                     "changes between runs).")
    verifier: str = Field("prefdata.world:verify", description="A registered verifier that tells them the truth.")

    @field_validator("verifier")
    @classmethod
    def _verifier(cls, value: str) -> str:
        return registered("verifier", value, "humans.simulated.verifier")


class Argilla(_Params):
    REACH = {"url": "address"}
    url: str = Field(description="The Argilla server, e.g. http://127.0.0.1:6900.")
    dataset: str = Field(description="Argilla dataset name.")
    workspace: str = Field("prefdata", description="Argilla workspace: the dataset's and its annotators'.")
    overlap: int = Field(1, ge=1, description="Annotators who must submit each pair (Argilla's TaskDistribution).")
    api_key_secret: str | None = Field(None, description="A Prefect Secret block holding the API key; None reads "
                                                         "ARGILLA_API_KEY from the environment.")
    suggestions: bool = Field(True, description="Show the judge's label as a suggestion (off for blind audits).")
    wait_s: float = Field(0.0, ge=0, description="Wait up to this long for every pushed pair to get `overlap` votes; "
                                                 "0 takes the votes there are (a later run pulls the rest).")
    poll_s: float = Field(10.0, gt=0, description="Seconds between pulls while waiting.")


class Humans(_Params):
    REACH = {"queue_dir": "path"}
    queue_dir: str = Field(".prefdata/queues", description="Where the human queue is written (NAME.jsonl).")
    simulated: SimulatedAnnotators | None = Field(None, description="Answer the queue with simulated annotators.")
    argilla: Argilla | None = Field(None, description="Push the queue to Argilla and pull its votes.")
    aggregate: Literal["majority", "dawid-skene"] = Field(
        "majority", description="How a pair's votes become its label: majority (more than half agree, else it stays "
                                "unlabelled) or dawid-skene (a Dawid-Skene model fitted by EM to all the votes "
                                "weighs each annotator by its estimated quality, so a careless or random annotator "
                                "counts for little; every voted pair gets its most probable label).")

    @model_validator(mode="after")
    def _one(self) -> "Humans":
        if self.simulated is not None and self.argilla is not None:
            raise ValueError("humans: give simulated or argilla, not both")
        return self


class Engine(_Params):
    REACH = {"address": "address", "cache_dir": "path"}
    runner: Literal["threads", "dask", "ray"] = Field(
        "threads", description="threads: this process; dask: sampling and judging fan out to Dask workers; ray: to a "
                               "Ray cluster (needs prefect-ray, not installed by default).")
    address: str | None = Field(None, description="A running Dask scheduler (tcp://host:8786) or Ray head "
                                                       "(ray://host:10001); None starts a local cluster for the run.")
    dask_workers: int = Field(2, ge=1, description="dask: worker processes of the local cluster started for the "
                                                   "run (ignored with address).")
    cache_dir: str | None = Field(None, description="Where sampling and judging results persist (the resume cache); "
                                                    "None: Prefect's result storage ($PREFECT_HOME/storage).")
    refresh_cache: bool = Field(False, description="Sample and judge again even when cached.")

    @model_validator(mode="after")
    def _address(self) -> "Engine":
        if self.address and self.runner == "threads":
            raise ValueError(f"engine: address={self.address!r} needs runner 'dask' or 'ray'")
        return self


class Checks(_Params):
    REACH = {"config": "path", "report_dir": "path", "eval_data": "path", "reference_prompts": "path",
             "benchmarks": "path", "scorer": "spec"}
    # The checklist's options: `prefdata check`, `publish` and `filter` are built from these fields
    # (their defaults and help texts), and the publishing functions take the same names
    # (prefdata.gate.publishing.validate_version; tests/test_options.py holds those equal).
    config: str | None = Field(None, description="Checklist YAML (thresholds, waivers), small-data (the shipped "
                                                 "preset for smoke runs on a few dozen pairs) or world (the demo "
                                                 "world's waivers); default: the one a validated version was "
                                                 "validated with, else "
                                                 "checks/checklist.yaml.")
    strict: bool = Field(False, description="A check that cannot run (skip) fails the gate.")
    report_dir: str | None = Field(None, description="Write report.md, junit.xml, report.html and GX Data Docs here "
                                                     "(default: .prefdata/reports/NAME-VERSION).")
    scorer: str | None = Field(None, description="Independent scorer for label_direction: rm:PATH, lm:PATH, "
                                                 "llm:MODEL@URL or llm:PATH (an LLM judge, served or in process), "
                                                 "rule:NAME, world, verdicts:FILE, or KIND:TARGET of "
                                                 "a registered scorer backend.")
    eval_data: str | None = Field(None, description="Eval set (file or NAME@VERSION) for split_isolation.")
    reference_prompts: str | None = Field(None, description="Production prompts for prompt_distribution: .txt (one "
                                                            "per line) or a table with a prompt column.")
    full: bool = Field(False, description="Check every row: never take the row-local results a growing version's "
                                          "validated parent stored for the files they share (the verdict is the same, only slower).")
    benchmarks: list[str] | None = Field(None, description="Benchmark prompts for decontamination (repeatable): a "
                                                           ".jsonl, .json or .parquet with a prompt column, a .txt (one "
                                                           "prompt a line), or a folder holding one such file (named by "
                                                           "the folder: ../shared/data/ifeval).")

    @field_validator("scorer")
    @classmethod
    def _scorer(cls, value: str | None) -> str | None:
        """A registered backend offering the scorer role; a rule: scorer names a registered verifier
        (checked here, before the run starts)."""
        if value is None:
            return None
        from prefdata.base.errors import UnusableInput
        from prefdata.base.specs import parse_spec, silent

        try:
            spec = parse_spec(value, "scorer", "checks.scorer", notice=silent)
        except UnusableInput as exc:
            raise ValueError(str(exc)) from None
        if spec.kind == "rule":
            registered("verifier", spec.target, "checks.scorer rule")
        return value


class Training(_Params):
    REACH = {"config": "path", "output_dir": "path"}
    method: str = Field("dpo", description="A registered trainer plugin (prefdata.trainers).")

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        return registered("trainer", value, "training.method", canonical=False)
    config: dict | str | None = Field(None, description="The method's config: a YAML file (in a flow, a mapping too) "
                                                        "of its fields, TRL's and prefdata's (`prefdata train METHOD "
                                                        "--show-config` lists them).")
    base_model: str | None = Field(None, description="The model to start from: a folder, a .gguf file, a hub name, or "
                                                     "world (the demo world's SFT model); default: the config's.")
    output_dir: str | None = Field(None, description="Where the model and its card go (default: "
                                                     ".prefdata/runs/METHOD-NAME-VERSION).")
    chat: Literal["auto", "true", "false"] | None = Field(
        None, description="Render prompts through the base model's chat template: auto, true or false (default: "
                          "the config's chat, auto unless it says otherwise).")
    system_prompt: str | None = Field(None, description="A system prompt put before every prompt (default: the "
                                                        "config's, else the one the version records).")

    @model_validator(mode="before")
    @classmethod
    def _chat(cls, data: Any) -> Any:
        return chat_as_word(data)


class TrainTrigger(Training):
    deployment: str = Field("train/train", description="The training deployment (FLOW/DEPLOYMENT) to run.")
    wait: bool = Field(False, description="Wait for the training run to finish; False only schedules it.")

    def training(self) -> Training:
        return Training(**self.model_dump(include=set(Training.model_fields)))


# Values of a "path" field that name no file of the run's folder: the world (its prompts, or a file it
# ships: see shipped()), a shipped preset, a store ref.
NOT_A_PATH = ("world", "small-data")
# The files the demo world ships, named `world` by the deployments, so that prefect.yaml works from any
# working folder (a relative `prefdata/world/...` path there would also shadow the package itself).
WORLD_FILES = {"checklist": "checklist.yaml", "guidelines": "guidelines.md"}


def shipped(value: str | None, what: str) -> str | None:
    """`world` as the demo world's own checklist or guidelines file; any other value as it is."""
    if value != WORLD:
        return value
    from importlib import resources

    return str(resources.files("prefdata.world").joinpath(WORLD_FILES[what]))


# Keys of a trainer's config mapping that name files (the trainers' config dataclasses).
CONFIG_PATHS = ("output_dir", "general_sft", "eval_sft")


def _is_ref(value: str) -> bool:
    """NAME@VERSION, read from the store. (A value without a "/" could only name something inside the
    working folder anyway.)"""
    name, at, version = value.partition("@")
    return bool(at) and "/" not in value and bool(name)


def reach(value: Any, where: str) -> Iterator[tuple[str, str, str]]:
    """(kind, value, where) for every path, address and environment variable a parameter names, nested
    models and a trainer's config mapping included (kind as in REACH)."""
    if isinstance(value, _Params):
        for name in type(value).model_fields:
            field, kind = getattr(value, name), type(value).REACH.get(name)
            if kind and isinstance(field, (list, tuple)):  # a list of paths: each one
                for k, item in enumerate(field):
                    yield from _reach_one(kind, str(item), f"{where}.{name}[{k}]")
            elif kind and field is not None and not isinstance(field, dict):
                yield from _reach_one(kind, str(field), f"{where}.{name}")
            elif isinstance(field, dict) and name == "config":
                yield from (("path", str(field[k]), f"{where}.config.{k}") for k in CONFIG_PATHS if field.get(k))
            else:
                yield from reach(field, f"{where}.{name}")


def _reach_one(kind: str, value: str, where: str) -> Iterator[tuple[str, str, str]]:
    if kind == "path" and (value in NOT_A_PATH or _is_ref(value)):
        return
    if kind != "spec":
        yield kind, value, where
        return
    from prefdata.base.specs import parse_spec, silent

    spec = parse_spec(value, None, where, notice=silent)
    if spec.base_url:
        yield "address", spec.base_url, where
    elif spec.kind != "rule":  # a rule names a registered verifier; any other backend's target may be a path
        yield "path", spec.target, where


def check_reach(**parameters: Any) -> None:
    """Refuse (UnusableInput, one line) a deployment run's parameter that reaches a path, server or
    environment variable the operator did not allow (prefdata/base/registry.py). `store`, `guidelines`
    and `dask` are the flows' plain parameters."""
    from prefdata.base import registry

    plain = {"store": "path", "guidelines": "path", "dask": "address"}
    for name, value in parameters.items():
        found = reach(value, name) if isinstance(value, _Params) else (
            _reach_one(plain[name], str(value), name) if value is not None and name in plain else ())
        for kind, text, where in found:
            {"path": registry.check_path, "address": registry.check_address, "env": registry.check_env_name}[kind](
                text, where)
