"""`prefdata demo`: the whole pipeline on the embedded demo world, in a few minutes on two CPU cores.

    world     build (or reuse) the tiny SFT model                          prefdata.world
    collect   sample candidates, pair them, judge each pair in both orders  flows.collect
              with the embedded LLM judge behind a real `transformers serve`,
              route what the judge leaves undecided to humans: simulated
              annotators, through the real Argilla API when it is up
    publish   the checklist (the world's config states what a toy cannot    flows.gate.publish
              meet), then a validated version
    train     DPO (or the configured method) from the validated version     flows.train
    evaluate  held-out task and general-skill accuracy, before and after    prefdata.world.evaluate

The demo is the world's; the pieces it wires are not: the collect flow's Policy and Judge take any
model path or OpenAI-compatible endpoint, the checklist and the trainers any config, and
prefect.yaml runs the same flows on a real model. Writes DIR/summary.json and DIR/summary.md.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

WORLD_DIR = Path(__file__).parent / "world"


@dataclass
class DemoConfig:
    name: str = field(default="demo-arithmetic", metadata={"help": "Dataset name in the store."})
    prompts: int = field(default=600, metadata={"help": "Sampling prompts (never an eval prompt)."})
    candidates: int = field(default=4, metadata={"help": "Candidates per prompt; every distinct pair is compared."})
    annotators: int = field(default=3, metadata={"help": "Simulated annotators voting on each pair sent to humans."})
    annotator_accuracy: float = field(default=0.92, metadata={"help": "How often a simulated annotator is right."})
    judge_concurrency: int = field(default=4, metadata={"help": "Judge requests in flight."})
    method: str = field(default="dpo", metadata={"help": "Trainer plugin to run on the validated version."})
    training: dict = field(default_factory=dict, metadata={"help": "Overrides of the method's config."})
    checklist: str = field(default=str(WORLD_DIR / "checklist.yaml"), metadata={"help": "Checklist config."})
    guidelines: str = field(default=str(WORLD_DIR / "guidelines.md"), metadata={"help": "Annotation guidelines."})
    argilla: str = field(default="auto", metadata={"help": "auto: use the local Argilla when `prefdata argilla up` "
                                                            "runs; off: simulated annotators answer the queue directly."})


def load_demo_config(path: Path | None) -> DemoConfig:
    import yaml

    from prefdata.errors import UnusableInput

    if path is None:
        return DemoConfig()
    try:
        values = yaml.safe_load(Path(path).read_text()) or {}
        return DemoConfig(**values)
    except (OSError, yaml.YAMLError, TypeError) as exc:
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
        from prefdata.errors import UnusableInput

        raise UnusableInput(f"demo config: argilla must be 'auto' or 'off', not {mode!r}")
    if mode == "off":
        return None
    from prefdata.argilla import LocalArgilla

    return LocalArgilla().status()


@contextmanager
def _humans(config: DemoConfig, out_dir: Path, say: Callable[[str], None]):
    """Who answers the human queue: simulated annotators, through the real Argilla API when it is up."""
    from prefdata.flows.params import Argilla, Humans, SimulatedAnnotators
    from prefdata.world import annotator_pool

    queue_dir = str(out_dir / "queues")
    server = _local_argilla(config.argilla)
    if server is None:
        yield Humans(queue_dir=queue_dir, simulated=SimulatedAnnotators(k=config.annotators,
                                                                        accuracy=config.annotator_accuracy)), "simulated"
        return
    from prefdata.argilla.crowd import SimulatedCrowd

    dataset = f"{config.name}-review"
    say(f"      Argilla is up at {server.url}: the human share goes to dataset {dataset!r}")
    os.environ["ARGILLA_API_KEY"] = server.api_key  # read by the flow's Argilla tasks; never logged
    pool = annotator_pool(config.annotators, config.annotator_accuracy)
    with SimulatedCrowd(server.url, server.api_key, dataset, pool):
        yield Humans(queue_dir=queue_dir, argilla=Argilla(url=server.url, dataset=dataset, overlap=config.annotators,
                                                          wait_s=600, poll_s=1.0)), f"argilla {server.url}"


def run_demo(out_dir: Path, config: DemoConfig | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see prefdata/world/build.py
    # Prefect's ephemeral API server gets 20 s to start by default; on two busy cores it can need more.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # The stages print their own progress; Prefect's per-task INFO lines would bury it (its UI has them).
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    config = config or DemoConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stages = Stages(5, say)

    from prefdata.world import build_world, evaluate

    with stages.stage("world", "the demo world: tiny tokenizer and SFT model (built once, then reused)"):
        world = build_world(log=lambda msg: say(f"      {msg}"))
        before = world.info()["metrics"]

    from prefdata.flows.collect import collect
    from prefdata.flows.gate import publish
    from prefdata.flows.params import Checks, Engine, Judge, Policy, Prompts, Training
    from prefdata.flows.train import train
    from prefdata.local_serve import TransformersServe
    from prefdata.world.judge import JUDGE_TEMPLATE_NAME

    store = str(out_dir / "store")
    with stages.stage("collect", f"collect: {config.prompts} prompts x {config.candidates} candidates, the embedded "
                                 f"LLM judge (both orders) behind transformers serve, undecided pairs to "
                                 f"{config.annotators} simulated annotators"):
        with TransformersServe(out_dir / "judge-serve.log") as server, _humans(config, out_dir, say) as (humans, via):
            judge = Judge(kind="llm", base_url=server.base_url, model=str(world.judge.resolve()),
                          template=JUDGE_TEMPLATE_NAME, requests_in_flight=config.judge_concurrency, timeout_s=120)
            collected = collect(name=config.name, prompts=Prompts(source="world", n=config.prompts),
                                policy=Policy(model=str(world.sft), candidates=config.candidates, max_new_tokens=6),
                                judge=judge, humans=humans, engine=Engine(cache_dir=str(out_dir / "cache")),
                                guidelines=config.guidelines, store=store)
        say(f"      {collected['comparisons']} comparisons, judge {collected['judge']}, "
            f"{collected['queued']} to humans ({via}), {collected['votes']} votes -> {collected['version']}")
    judge_stats = _judge_verifier_agreement(store, collected["version"])

    with stages.stage("publish", "filter duplicates and degenerate pairs, run the checklist gate, publish"):
        from prefdata.checks.checklist import load_config
        from prefdata.filtering import filter_version
        from prefdata.store import Store

        checklist = load_config(Path(config.checklist))
        filtered, counts = filter_version(Store(store), collected["version"], config=checklist)
        say(f"      filter: {counts['read']} pairs = {counts['kept']} kept + {counts['quarantined']} quarantined "
            f"{counts['reasons']} -> {filtered.ref}")
        published = publish(filtered.ref, Checks(config=config.checklist, report_dir=str(out_dir / "report")),
                            store=store)

    from prefdata.trainers.common import write_sft_file
    from prefdata.world import WorldConfig, sft_data

    general = write_sft_file(out_dir / "general_sft.jsonl",
                             [(e.prompt, e.completion) for e in sft_data(WorldConfig()) if e.kind == "reverse"])
    training = {"evaluator": "prefdata.world:evaluate", "evaluator_kwargs": {"world": str(world.root)},
                "general_sft": str(general), **config.training}
    with stages.stage("train", f"{config.method} from {published['dataset']}"):
        trained = train(published["dataset"], Training(method=config.method, config=training, base_model=str(world.sft),
                                                       output_dir=str(out_dir / "model")), store=store)

    with stages.stage("evaluate", "held-out accuracy of the trained model (the verifier, greedy)"):
        after = evaluate(trained["model_dir"], world=world.root)

    summary = {
        "task_accuracy_before": before["task_accuracy"],
        "task_accuracy_after": after["task_accuracy"],
        "general_accuracy_before": before["general_accuracy"],
        "general_accuracy_after": after["general_accuracy"],
        "judge_verifier_agreement": judge_stats["agreement"],
        "judge": judge_stats,
        "iaa": _iaa(store, published["dataset"]),
        "dataset_version": published["dataset"],
        "dataset": {k: collected[k] for k in ("prompts", "candidates", "comparisons", "queued", "votes", "routes")},
        "annotation": via,
        "method": config.method,
        "model_dir": trained["model_dir"],
        "report_dir": published.get("report_dir"),
        "seconds": round(time.perf_counter() - started, 1),
        "stage_seconds": stages.seconds,
        "config": asdict(config),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out_dir / "summary.md").write_text(render_summary(summary))
    say(render_summary(summary))
    return summary


def _judge_verifier_agreement(store: str, ref: str, verifier: str = "prefdata.world:verify") -> dict:
    """The embedded judge's verdicts on every collected comparison (kept in the version's comparisons
    table), scored against the verifier."""
    from types import SimpleNamespace

    from prefdata.collection import import_target
    from prefdata.judging import PairToJudge
    from prefdata.store import Store
    from prefdata.world import verdict_agreement

    rows = Store(store).load(ref, "comparisons").to_dicts()
    items = [PairToJudge(r["prompt"], r["response_a"], r["response_b"], r["pair_id"]) for r in rows]
    verdicts = [SimpleNamespace(label=r["judge_label"], reason=r["judge_reason"]) for r in rows]
    return verdict_agreement(items, verdicts, import_target(verifier))


def _iaa(store: str, ref: str) -> float | None:
    from prefdata.store import Store

    report = Store(store).get(ref).manifest.get("check_report") or {}
    for check in report.get("checks", []):
        if check.get("id") == "agreement":
            return check.get("metric")
    return None


def render_summary(s: dict) -> str:
    j = s["judge"]
    lines = [
        "", "## prefdata demo", "",
        f"dataset {s['dataset_version']}: {s['dataset']['comparisons']} comparisons, {s['dataset']['queued']} sent to "
        f"humans, {s['dataset']['votes']} votes; inter-annotator agreement (Krippendorff's alpha) {_f(s['iaa'])}",
        f"embedded judge: agreement with the verifier {_f(j['agreement'])}, position consistency "
        f"{_f(j['position_consistency'])}, undecided {_f(j['undecided_rate'])} (n={j['n']})", "",
        "| held-out accuracy | before | after |", "|---|---|---|",
        f"| task (arithmetic) | {s['task_accuracy_before']:.3f} | {s['task_accuracy_after']:.3f} |",
        f"| general skill (reverse) | {s['general_accuracy_before']:.3f} | {s['general_accuracy_after']:.3f} |", "",
        f"{s['method']} model: {s['model_dir']}",
        "seconds: " + ", ".join(f"{k} {v}" for k, v in s["stage_seconds"].items()) + f"; total {s['seconds']}", "",
    ]
    return "\n".join(lines)


def _f(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
