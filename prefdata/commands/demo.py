"""`prefdata demo`: the whole pipeline on the embedded demo world, in a few minutes on two CPU cores.

    world     load the shipped SFT and judge models (prefdata/world/weights) prefdata.world
    collect   sample candidates, pair them, judge each pair in both orders  flows.collect
              with the world's reference judge behind a real `transformers
              serve` (it solves the problem; the template's parser names the
              matching response), route what it leaves undecided and an audit
              share of what it decided to humans: simulated annotators,
              through the real Argilla API when it is up
    publish   the checklist (the world's config states what a toy cannot    flows.gate.publish
              meet), then a validated version
    train     DPO (or the configured method) from the validated version     flows.train
    evaluate  held-out task and general-skill accuracy, before and after    prefdata.world.evaluate

collect to evaluate is one turn of the flywheel; `rounds` (default 2) turns it again: round k samples
fresh prompts from round k-1's trained model, and its draft names round k-1's validated version as
its parent. summary.json's top-level figures describe the final model; `rounds` has one entry per
round; `judge`, `audit` and `labels` count every round's comparisons.

The demo is the world's; the pieces it wires are not: the collect flow's Policy and Judge take any
model path or OpenAI-compatible endpoint, the checklist and the trainers any config, and
prefect.yaml runs the same flows on a real model. Writes DIR/summary.json and DIR/summary.md; the
training's per-step metrics go to DIR/train.log (and the model card), not to the terminal.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

WORLD_DIR = Path(__file__).parents[1] / "world"


@dataclass
class DemoConfig:
    name: str = field(default="demo-arithmetic", metadata={"help": "Dataset name in the store."})
    prompts: int = field(default=600, metadata={"help": "Sampling prompts (never an eval prompt)."})
    candidates: int = field(default=4, metadata={"help": "Candidates per prompt; every distinct pair is compared."})
    annotators: int = field(default=3, metadata={"help": "Simulated annotators voting on each pair sent to humans."})
    annotator_accuracy: float = field(default=0.92, metadata={"help": "How often a simulated annotator is right."})
    judge_concurrency: int = field(default=4, metadata={"help": "Judge requests in flight."})
    rounds: int = field(default=2, metadata={"help": "Turns of the flywheel: each samples from the model the "
                                                      "previous one trained."})
    audit_share: float = field(default=0.15, metadata={"help": "Share of judge-decided pairs also sent to humans, "
                                                                 "to measure judge-human agreement."})
    method: str = field(default="dpo", metadata={"help": "Trainer plugin to run on the validated version."})
    training: dict = field(default_factory=dict, metadata={"help": "Overrides of the method's config."})
    checklist: str = field(default=str(WORLD_DIR / "checklist.yaml"), metadata={"help": "Checklist config."})
    guidelines: str = field(default=str(WORLD_DIR / "guidelines.md"), metadata={"help": "Annotation guidelines."})
    argilla: str = field(default="auto", metadata={"help": "auto: use the local Argilla when `prefdata argilla up` "
                                                            "runs; off: simulated annotators answer the queue directly."})


def load_demo_config(path: Path | None, kind: type = DemoConfig):
    """A demo's config (DemoConfig, or the chat demo's) from YAML; none: the defaults."""
    import yaml

    from prefdata.base.errors import UnusableInput

    if path is None:
        return kind()
    from prefdata.base.yamlkeys import load_yaml

    try:
        values = load_yaml(Path(path).read_text(), f"demo config {path}") or {}
        return kind(**values)
    except (OSError, yaml.YAMLError, TypeError, ValueError) as exc:
        raise UnusableInput(f"demo config {path}: {exc}") from None


class Stages:
    """One progress line per stage, with its time; the times go to summary["stage_seconds"]."""

    def __init__(self, total: int, say: Callable[[str], None]):
        self.total, self.say, self.seconds, self.n = total, say, {}, 0

    @contextmanager
    def stage(self, name: str, what: str):
        self.n += 1
        self.say(f"[{self.n}/{self.total}] {what}")
        started = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - started, 1)
        self.say(f"      done in {self.seconds[name]:.1f} s")


def _local_argilla(mode: str):
    """The local Argilla started by `prefdata argilla up` (ServerInfo), when mode allows and it runs."""
    if mode not in ("auto", "off"):
        from prefdata.base.errors import UnusableInput

        raise UnusableInput(f"demo config: argilla must be 'auto' or 'off', not {mode!r}")
    if mode == "off":
        return None
    from prefdata.argilla import LocalArgilla

    return LocalArgilla().status()


@contextmanager
def _humans(config, out_dir: Path, say: Callable[[str], None], truth: str | None = None):
    """Who answers the human queue: simulated annotators, through the real Argilla API when it is up.
    `truth`: the 'module:function' verifier the annotators go by (None: the demo world's)."""
    from prefdata.flows.params import Argilla, Humans, SimulatedAnnotators
    from prefdata.world import annotator_pool

    queue_dir = str(out_dir / "queues")
    server = _local_argilla(config.argilla)
    if server is None:
        told = {"verifier": truth} if truth else {}
        yield Humans(queue_dir=queue_dir, simulated=SimulatedAnnotators(k=config.annotators, accuracy=config.annotator_accuracy,
                                                                        **told)), "simulated"
        return
    from prefdata.argilla.crowd import SimulatedCrowd

    dataset = f"{config.name}-review"
    say(f"      Argilla is up at {server.url}: the human share goes to dataset {dataset!r}")
    os.environ["ARGILLA_API_KEY"] = server.api_key  # read by the flow's Argilla tasks; never logged
    pool = annotator_pool(config.annotators, config.annotator_accuracy)
    from prefdata.collect.collection import import_target

    with SimulatedCrowd(server.url, server.api_key, dataset, pool, verifier=import_target(truth) if truth else None):
        yield Humans(queue_dir=queue_dir, argilla=Argilla(url=server.url, dataset=dataset, overlap=config.annotators,
                                                          wait_s=600, poll_s=1.0)), f"argilla {server.url}"


def run_demo(out_dir: Path, config: DemoConfig | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    _quiet_libraries()
    config = config or DemoConfig()
    if config.rounds < 1:
        from prefdata.base.errors import UnusableInput

        raise UnusableInput(f"demo config: rounds must be >= 1, got {config.rounds}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stages = Stages(1 + 4 * config.rounds, say)
    world, before = _world_stage(stages, say)
    general = _general_sft_file(out_dir)
    # Each round samples from the model the previous round trained, on fresh prompts, and its draft
    # names the previous round's validated version as its parent.
    rounds, policy, parent = [], str(world.sft), None
    from prefdata.flows.server import temporary_api

    with temporary_api():  # one Prefect server for every round's flows, out of reach of group signals
        for number in range(1, config.rounds + 1):
            done = _round(number, config, world, policy, parent, out_dir, general, stages, say)
            rounds.append(done)
            policy, parent = done["model_dir"], done["dataset_version"]
    summary = _demo_summary(config, world, before, rounds, stages, time.perf_counter() - started)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out_dir / "summary.md").write_text(render_summary(summary))
    say(render_summary(summary))
    # the demo keeps its versions in a store of its own, beside its models and reports
    say(f"versions: PREFDATA_STORE={out_dir / 'store'} prefdata versions   (train from them: README, Training)")
    return summary


def _quiet_libraries() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see prefdata/world/build.py
    # Prefect's ephemeral API server gets 20 s to start by default; on two busy cores it can need more.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # The stages print their own progress; Prefect's per-task INFO lines would bury it (its UI has them).
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefdata.commands.console import quiet_reported_failures

    quiet_reported_failures()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars on every from_pretrained: noise here


def _world_stage(stages: Stages, say: Callable[[str], None]):
    """The demo world (built once, then reused) and its SFT model's metrics before any round."""
    from prefdata.world import build_world

    with stages.stage("world", "the demo world: the shipped SFT (policy) and judge models"):
        world = build_world(log=lambda msg: say(f"      {msg}"))
        before = world.info()["metrics"]
        say(f"      {world.root}: SFT task accuracy {before['task_accuracy']:.3f}, judge solves "
            f"{world.info()['judge']['metrics']['task_accuracy']:.3f} of held-out problems")
    return world, before


def _general_sft_file(out_dir: Path) -> Path:
    """General SFT examples (the world's "reverse" task), mixed into training against forgetting."""
    from prefdata.trainers.data import write_sft_file
    from prefdata.world import WorldConfig, sft_data

    return write_sft_file(out_dir / "general_sft.jsonl",
                          [(e.prompt, e.completion) for e in sft_data(WorldConfig()) if e.kind == "reverse"])


def _demo_summary(config: DemoConfig, world, before: dict, rounds: list[dict], stages: Stages, seconds: float) -> dict:
    """The run's summary: before and after, the judge, audit and labels over every round's comparisons."""
    last = rounds[-1]
    rows = [row for r in rounds for row in r.pop("_rows")]
    judge_stats = {**judge_summary(rows), "first_position_rate": _mean_rate(rounds),
                   "model": str(world.judge), "template": last["judge_template"]}
    return {
        "task_accuracy_before": before["task_accuracy"],
        "task_accuracy_after": last["task_accuracy"],
        "general_accuracy_before": before["general_accuracy"],
        "general_accuracy_after": last["general_accuracy"],
        "judge_verifier_agreement": judge_stats["agreement"],
        "judge": judge_stats,  # judge, audit, labels: over every round's comparisons
        "audit": audit_summary(rows),
        "labels": label_sources(rows),
        "iaa": last["iaa"],
        "dataset_version": last["dataset_version"],
        "dataset": last["dataset"],
        "annotation": last["annotation"],
        "method": config.method,
        "model_dir": last["model_dir"],
        "sft_model_dir": str(world.sft),
        "report_dir": last["report_dir"],
        "rounds": [{k: v for k, v in r.items() if k not in ("dataset", "annotation", "report_dir", "judge_template",
                                                            "_first_position")} for r in rounds],
        "seconds": round(seconds, 1),
        "stage_seconds": stages.seconds,
        "config": asdict(config),
    }


def _round(number: int, config: DemoConfig, world, policy: str, parent: str | None, out_dir: Path, general: Path,
           stages: Stages, say: Callable[[str], None]) -> dict:
    """One turn of the flywheel: collect from `policy`, gate and publish, train from it, evaluate."""
    from prefdata.world import evaluate
    from prefdata.world.judge import JUDGE_TEMPLATE_NAME

    tag = "" if config.rounds == 1 else f"_{number}"  # stage names; one round keeps the plain ones
    where = out_dir if config.rounds == 1 else out_dir / f"round{number}"
    where.mkdir(parents=True, exist_ok=True)
    store = str(out_dir / "store")
    collected, via = _collect_stage(number, config, world, policy, parent, out_dir, where, tag, stages, say)
    rows = _comparisons(store, collected["version"])
    published = _publish_stage(collected["version"], config, where, store, tag, stages, say)
    trained = _train_stage(published["dataset"], config, world, policy, general, where, store, tag, stages)
    with stages.stage(f"evaluate{tag}", "held-out accuracy of the trained model (the verifier, greedy)"):
        after = evaluate(trained["model_dir"], world=world.root)
    decided = sum(r["judge_label"] is not None for r in rows)
    return {
        "round": number, "policy": policy, "parent": parent, "draft": collected["version"],
        "dataset_version": published["dataset"], "pairs": _pairs_in(store, published["dataset"]),
        "comparisons": len(rows), "judge_decided_share": decided / len(rows) if rows else None,
        "human_share": label_sources(rows)["human_share"],
        "task_accuracy": after["task_accuracy"], "general_accuracy": after["general_accuracy"],
        "model_dir": trained["model_dir"], "iaa": _iaa(store, published["dataset"]),
        "dataset": {"draft": collected["version"],
                    **{k: collected[k] for k in ("prompts", "candidates", "comparisons", "queued", "votes", "routes")}},
        "annotation": via, "report_dir": published.get("report_dir"), "judge_template": JUDGE_TEMPLATE_NAME,
        # weighted by the pairs whose two replies both parsed (the rate's denominator, ties aside)
        "_first_position": (collected["judge"].get("first_position_rate"),
                            collected["judge"]["consistent"] + collected["judge"]["inconsistent"]), "_rows": rows,
    }


def _collect_stage(number: int, config: DemoConfig, world, policy: str, parent: str | None, out_dir: Path,
                   where: Path, tag: str, stages: Stages, say: Callable[[str], None]) -> tuple[dict, str]:
    """The collect flow from `policy` with the world's LLM judge behind `transformers serve`; returns
    its result and who answered the human queue."""
    from prefdata.flows.collect import collect
    from prefdata.flows.collect import shown_stages
    from prefdata.flows.params import WORLD_MAX_NEW_TOKENS, Engine, Judge, Policy, Routing
    from prefdata.flows.progress import followed
    from prefdata.collect.local_serve import TransformersServe
    from prefdata.base.progress import display
    from prefdata.world.judge import JUDGE_TEMPLATE_NAME

    prompts = _round_prompts(number, config.prompts, where)
    who = "the SFT model" if parent is None else f"round {number - 1}'s model"
    with stages.stage(f"collect{tag}", f"collect: {config.prompts} prompts x {config.candidates} candidates from "
                                       f"{who}, the reference LLM judge (both orders) behind transformers serve, "
                                       f"undecided pairs and an audit share to {config.annotators} simulated annotators"):
        with TransformersServe(where / "judge-serve.log") as server, _humans(config, where, say) as (humans, via):
            judge = Judge(kind="llm", base_url=server.base_url, model=str(world.judge.resolve()),
                          template=JUDGE_TEMPLATE_NAME, requests_in_flight=config.judge_concurrency, timeout_s=120)
            # the stage runs about a minute: its chunks' progress on stderr, as `prefdata collect` shows it
            shown = shown_stages(via.startswith("argilla"), cascade=False)
            with followed(shown, display(shown)):
                collected = collect(name=config.name, prompts=prompts,
                                    policy=Policy(model=policy, candidates=config.candidates,
                                                  max_new_tokens=WORLD_MAX_NEW_TOKENS),
                                    judge=judge, routing=Routing(audit_share=config.audit_share), humans=humans,
                                    engine=Engine(cache_dir=str(out_dir / "cache")),
                                    guidelines=config.guidelines, store=str(out_dir / "store"), parent=parent)
        say(f"      {collected['comparisons']} comparisons, judge decided {collected['judge']['decided']}, "
            f"{collected['queued']} to humans ({via}), {collected['votes']} votes -> {collected['version']}")
    return collected, via


def _publish_stage(draft: str, config: DemoConfig, where: Path, store: str, tag: str, stages: Stages,
                   say: Callable[[str], None], drop: tuple[str, ...] | None = None) -> dict:
    """Filter the draft into a child version (`drop`: the row checks it quarantines on; default the
    filter's own), then the publish flow (the checklist gate) on it."""
    from prefdata.checks.checklist import load_config
    from prefdata.gate.filtering import DEFAULT_DROP, filter_version
    from prefdata.flows.gate import publish
    from prefdata.flows.params import Checks
    from prefdata.data.store import Store

    _quiet_great_expectations()
    with stages.stage(f"publish{tag}", "filter duplicates and degenerate pairs, run the checklist gate, publish"):
        filtered, counts = filter_version(Store(store), draft, drop or DEFAULT_DROP,
                                          config=load_config(Path(config.checklist)))
        say(f"      filter: {counts['read']} pairs = {counts['kept']} kept + {counts['quarantined']} quarantined "
            f"{counts['reasons']} -> {filtered.ref}")
        return publish(filtered.ref, Checks(config=config.checklist, report_dir=str(where / "report")), store=store)


def _train_stage(dataset: str, config: DemoConfig, world, policy: str, general: Path, where: Path, store: str,
                 tag: str, stages: Stages) -> dict:
    """The train flow from the published version, the world's evaluator and general SFT data mixed in."""
    from prefdata.flows.params import Training
    from prefdata.flows.train import train

    training = {"evaluator": "prefdata.world:evaluate", "evaluator_kwargs": {"world": str(world.root)},
                "general_sft": str(general), **config.training}
    # The trainer writes its per-step metrics to MODEL/train.log; what libraries still print (progress
    # bars, warnings) goes to console.log beside it, so the terminal keeps only the stage lines.
    with stages.stage(f"train{tag}", f"{config.method} from {dataset} (per-step log: {where / 'model' / 'train.log'})"):
        with _quiet(where / "console.log"):
            return train(dataset, Training(method=config.method, config=training, base_model=policy,
                                           output_dir=str(where / "model")), store=store)


def _pairs_in(store: str, ref: str) -> int | None:
    from prefdata.data.store import Store

    return Store(store).get(ref).manifest["counts"].get("pairs")


def _quiet_great_expectations() -> None:
    """GE sets its data-context logger to INFO when imported, so every checklist run would print a line
    about a temporary docs folder; import it first, then quiet it."""
    import logging

    try:
        import great_expectations.data_context.types.base  # noqa: F401
    except ImportError:  # another GE layout: at worst one extra line
        return
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)


def _round_prompts(number: int, n: int, where: Path):
    """Round 1: the world's first n sampling prompts; round k: the k-th n, written to a prompts file,
    so no round samples a prompt an earlier round used (none is ever an eval prompt)."""
    from prefdata.flows.params import Prompts
    from prefdata.world import WorldConfig, sampling_prompts

    if number == 1:
        return Prompts(source="world", n=n)
    path = where / "prompts.txt"
    path.write_text("\n".join(sampling_prompts(WorldConfig(), number * n)[(number - 1) * n:]) + "\n")
    return Prompts(source=str(path), n=n)


def _mean_rate(rounds: list[dict]) -> float | None:
    """The first-position rate over all rounds, each round's rate weighted by its replies."""
    pairs = [(rate, n) for rate, n in (r["_first_position"] for r in rounds) if rate is not None and n]
    return sum(rate * n for rate, n in pairs) / sum(n for _, n in pairs) if pairs else None


@contextmanager
def _quiet(log_file: Path):
    """Python-level stdout/stderr (the trainer's per-step metric dicts and progress bars) and warnings
    (which Prefect's logging would print) into a log file."""
    import warnings

    def to_sink(message, category, filename, lineno, file=None, line=None):
        sink.write(warnings.formatwarning(message, category, filename, lineno, line))

    with open(log_file, "a", encoding="utf-8") as sink, redirect_stdout(sink), redirect_stderr(sink), \
            warnings.catch_warnings():
        warnings.showwarning = to_sink
        yield


def _comparisons(store: str, ref: str) -> list[dict]:
    from prefdata.data.store import Store

    return Store(store).load(ref, "comparisons").to_dicts()


def judge_summary(rows: list[dict], verifier: str = "prefdata.world:verify") -> dict:
    """The judge's verdicts on every collected comparison (the version's comparisons table): how much
    it decided, how often the verifier agrees, and whether it prefers the longer response."""
    from types import SimpleNamespace

    from prefdata.collect.collection import import_target
    from prefdata.collect.judging import PairToJudge
    from prefdata.world import verdict_agreement

    items = [PairToJudge(r["prompt"], r["response_a"], r["response_b"], r["pair_id"]) for r in rows]
    verdicts = [SimpleNamespace(label=r["judge_label"], reason=r["judge_reason"]) for r in rows]
    decided = [r for r in rows if r["judge_label"] in ("a", "b", "tie")]
    uneven = [r for r in decided if r["judge_label"] in ("a", "b") and len(r["response_a"]) != len(r["response_b"])]
    longer = sum((r["judge_label"] == "a") == (len(r["response_a"]) > len(r["response_b"])) for r in uneven)
    return {
        **verdict_agreement(items, verdicts, import_target(verifier)),
        "comparisons": len(rows),
        "decided": len(decided),
        "decided_share": len(decided) / len(rows) if rows else None,
        # among decided a/b verdicts on responses of different lengths: 0.5 is no length bias
        "longer_preference": longer / len(uneven) if uneven else None,
        "longer_preference_n": len(uneven),
    }


def audit_summary(rows: list[dict]) -> dict:
    """Judge against the annotators' majority on the audit share (pairs the judge decided that went to
    humans too): Cohen's kappa over a/b/tie, and raw agreement."""
    import math

    from prefdata.checks.agreement import cohen_kappa

    audited = [r for r in rows if r["route"] == "both" and r["label_source"] == "human" and r["label"] is not None]
    judge, human = [r["judge_label"] for r in audited], [r["label"] for r in audited]
    kappa = cohen_kappa(judge, human, categories=("a", "b", "tie")) if audited else math.nan
    return {
        "n": sum(r["route"] == "both" for r in rows),
        "n_with_majority": len(audited),
        "judge_human_agreement": None if math.isnan(kappa) else kappa,  # Cohen's kappa; None when undefined
        "raw_agreement": sum(j == h for j, h in zip(judge, human)) / len(audited) if audited else None,
    }


def label_sources(rows: list[dict]) -> dict:
    """Who labelled the comparisons that got a label: the judge alone, or the humans' majority."""
    labelled = [r for r in rows if r["label"] is not None]
    humans = sum(r["label_source"] == "human" for r in labelled)
    return {"n": len(labelled), "from_judge": len(labelled) - humans, "from_humans": humans,
            "human_share": humans / len(labelled) if labelled else None}


def _iaa(store: str, ref: str) -> float | None:
    from prefdata.data.store import Store

    report = Store(store).get(ref).manifest.get("check_report") or {}
    for check in report.get("checks", []):
        if check.get("id") == "agreement":
            return check.get("metric")
    return None


def render_summary(s: dict) -> str:
    j, audit, labels = s["judge"], s["audit"], s["labels"]
    lines = [
        "", "## prefdata demo", "",
        f"dataset {s['dataset_version']}: {s['dataset']['comparisons']} comparisons, {s['dataset']['queued']} sent to "
        f"humans, {s['dataset']['votes']} votes; inter-annotator agreement (Krippendorff's alpha) {_f(s['iaa'])}",
        f"judge decided:              {_f(j['decided_share'])} of {j['comparisons']} comparisons (both orders agreeing)",
        f"judge agrees with verifier: {_f(j['agreement_decided'])} of its decided pairs",
        f"judge first-position rate:  {_f(j['first_position_rate'])} (0.5 = no position bias)",
        f"judge prefers the longer:   {_f(j['longer_preference'])} (n={j['longer_preference_n']}; 0.5 = no length bias)",
        f"audit (judge and humans):   n={audit['n']}, Cohen's kappa judge vs annotators' majority "
        f"{_f(audit['judge_human_agreement'])}",
        f"labels from humans:         {_f(labels['human_share'])} ({labels['from_humans']} of {labels['n']})", "",
        "| held-out accuracy | before | after |", "|---|---|---|",
        f"| task (arithmetic) | {s['task_accuracy_before']:.3f} | {s['task_accuracy_after']:.3f} |",
        f"| general skill (reverse) | {s['general_accuracy_before']:.3f} | {s['general_accuracy_after']:.3f} |", "",
        *_rounds_table(s.get("rounds", [])),
        f"{s['method']} model: {s['model_dir']}",
        "seconds: " + ", ".join(f"{k} {v}" for k, v in s["stage_seconds"].items()) + f"; total {s['seconds']}", "",
    ]
    return "\n".join(lines)


def _rounds_table(rounds: list[dict]) -> list[str]:
    if len(rounds) < 2:
        return []
    lines = ["| round | version | pairs | judge decided | from humans | task | general |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['dataset_version']} | {r['pairs']} | {_f(r['judge_decided_share'])} | "
              f"{_f(r['human_share'])} | {r['task_accuracy']:.3f} | {r['general_accuracy']:.3f} |" for r in rounds]
    return lines + [""]


def _f(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
