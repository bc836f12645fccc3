"""Trainer plugins, for real: a tiny demo world, a version made and validated by the real import and
publish commands, a few real TRL steps per method on LoRA adapters, guards on crafted histories,
DPO's loss recomputed by hand against TRL's, and the registry's entry-point group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see prefdata/world/build.py

import pytest
import yaml

from prefdata.base.errors import PrefdataError, UnusableInput
from prefdata.data.store import Store
from prefdata.world import WorldConfig, build_world, sampling_prompts, sft_data
from prefdata.world.tasks import ARITH_RE

REPO = Path(__file__).resolve().parents[1]
TINY = WorldConfig(n_sft=2_000, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, steps=30,
                   batch_size=32, warmup_steps=5, n_eval_task=40, n_eval_general=20)


def _answer(prompt: str) -> int:
    a, op, b = ARITH_RE.match(prompt).groups()
    return int(a) + int(b) if op == "+" else int(a) - int(b)


def world_pairs(config: WorldConfig, n: int) -> list[dict]:
    """Right answer against one off by ten (the world's carry mistake), on sampling prompts only."""
    return [{"prompt": p, "chosen": f"{_answer(p):04d}", "rejected": f"{_answer(p) + 10:04d}"}
            for p in sampling_prompts(config, n)]


def cli(*args: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(TINY, cache=tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, world):
    """A validated version made by `prefdata import` and `prefdata publish` (the world's checklist),
    plus the general SFT and held-out SFT files a run mixes in and scores."""
    from prefdata.trainers.data import write_sft_file

    root = tmp_path_factory.mktemp("data")
    store = root / "store"
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in world_pairs(TINY, 64)))
    imported = cli("import", str(root / "pairs.jsonl"), "--name", "arith", "--card",
                   str(REPO / "prefdata/world/guidelines.md"), store=store)
    assert imported.returncode == 0, imported.stderr
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    published = cli("publish", ref, "--config", str(REPO / "prefdata/world/checklist.yaml"),
                    "--report-dir", str(root / "report"), store=store)
    assert published.returncode == 0, published.stdout + published.stderr
    general = write_sft_file(root / "general.jsonl", [(e.prompt, e.completion) for e in sft_data(TINY) if e.kind == "reverse"][:200])
    heldout = write_sft_file(root / "heldout.jsonl", [(e.prompt, e.completion) for e in sft_data(TINY)[:40]])
    return {"store": str(store), "ref": ref, "general": str(general), "heldout": str(heldout), "root": root}


def base_config(dataset, world, **extra) -> dict:
    return {"max_steps": 3, "per_device_train_batch_size": 8, "general_sft": dataset["general"],
            "eval_sft": dataset["heldout"], "evaluator": "prefdata.world:evaluate",
            "evaluator_kwargs": {"world": str(world.root)}, **extra}


def changed_parameters(before_dir: Path, after_dir: Path) -> tuple[int, int]:
    """(changed, total) weight tensors between two saved causal LMs."""
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(before_dir).state_dict()
    b = AutoModelForCausalLM.from_pretrained(after_dir).state_dict()
    return sum(not a[k].equal(b[k]) for k in a), len(a)


# -- refusing data that is not validated --------------------------------------------------------------


def test_a_draft_or_tampered_version_is_refused(dataset, world, tmp_path):
    from prefdata.data.store import Store
    from prefdata.trainers import train

    store = tmp_path / "store"
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in world_pairs(TINY, 8)))
    draft = cli("import", str(tmp_path / "p.jsonl"), "--name", "draft", store=store)
    ref = next(line.split()[1] for line in draft.stdout.splitlines() if line.startswith("version:"))
    with pytest.raises(PrefdataError, match="is draft, not validated: run `prefdata publish"):
        train("dpo", ref, base_config(dataset, world), store=str(store), base_model=world.sft, output_dir=tmp_path / "o")
    # The CLI says it in one line with exit 1 (the gate's code: the data was refused), no traceback.
    out = cli("train", "dpo", "--dataset", ref, "--base-model", str(world.sft), store=store)
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0 and "not validated" in out.stderr

    # A validated version whose files changed afterwards fails verify.
    st = Store(dataset["store"])
    folder = Path(st.path(dataset["ref"]))
    victim = next(folder.rglob("*.parquet"))
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(Path(dataset["store"]), copy)
    (copy / victim.relative_to(Path(dataset["store"]))).write_bytes(b"tampered")
    with pytest.raises(PrefdataError, match="fails verification"):
        train("dpo", dataset["ref"], base_config(dataset, world), store=str(copy), base_model=world.sft,
              output_dir=tmp_path / "o2")


def test_unknown_method_and_config_key_are_one_line(dataset, world, tmp_path):
    out = cli("train", "kto", "--dataset", dataset["ref"], store=Path(dataset["store"]))
    assert out.returncode == 2 and "training method 'kto' is not a registered trainer plugin" in out.stderr
    assert "use one of dpo, grpo, ppo, rm, sft" in out.stderr
    (tmp_path / "bad.yaml").write_text("learning_rat: 0.1\n")
    out = cli("train", "dpo", "--dataset", dataset["ref"], "--config", str(tmp_path / "bad.yaml"),
              "--base-model", str(world.sft), store=Path(dataset["store"]))
    assert out.returncode == 2 and "unknown key(s) ['learning_rat']" in out.stderr and "learning_rate" in out.stderr


def test_a_base_model_that_is_not_a_model_is_one_line_exit_2(dataset, tmp_path):
    """Issue 12 item 14: a missing path or a folder without a model ended in exit 3 (internal error)."""
    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    (not_a_model / "readme.txt").write_text("no model here")
    for base, needle in (("/nonexistent/model", "/nonexistent/model not found"),
                         (str(not_a_model), f"{not_a_model} is a folder without config.json")):
        out = cli("train", "dpo", "--dataset", dataset["ref"], "--base-model", base, store=Path(dataset["store"]))
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().count("\n") == 0 and needle in out.stderr and "save_pretrained" in out.stderr, out.stderr


# -- each method, a few real steps ----------------------------------------------------------------------


@pytest.mark.filterwarnings("error::FutureWarning")  # a default run warns about nothing the user can change
def test_dpo_trains_from_a_validated_version_and_records_it(dataset, world, tmp_path):
    from prefdata.trainers import train

    result = train("dpo", dataset["ref"], base_config(dataset, world), store=dataset["store"],
                   base_model=world.sft, output_dir=tmp_path / "dpo")
    changed, total = changed_parameters(world.sft, result.model_dir)
    assert changed > 0  # the merged LoRA moved the weights it targets
    assert (result.model_dir / "adapter" / "adapter_config.json").is_file()
    log = result.metrics["log"]
    assert len(log) == 3 and all("loss" in row and "sft_loss" in row for row in log)  # the ptx term ran every step
    assert result.metrics["sft_mix"] == {"sources": ["chosen", "general"], "ratio": 0.2, "pool": 58 + 200}
    assert set(result.metrics["before"]) == {"preference_accuracy", "heldout_sft_loss", "task_accuracy", "general_accuracy",
                                             "mean_response_length"}
    # Mean response length (tokens, greedy, on the held-out prompts) before and after, on the card.
    length = result.metrics["mean_response_length"]
    assert set(length) == {"before", "after"} and all(0 < v < 64 for v in length.values()), length  # 64: its context
    assert length == {k: result.metrics[k]["mean_response_length"] for k in ("before", "after")}
    card = result.card.read_text()
    record = json.loads((result.model_dir / "prefdata_train.json").read_text())
    assert record["dataset"] == dataset["ref"] and record["dataset_hash"] == dataset["ref"].split("@")[1]
    assert dataset["ref"] in card and record["config"]["loss_type"] == ["sigmoid", "sft"]
    # A card the Hub would take: small, its metadata parsed by huggingface_hub, `base_model` only for a hub
    # id (this base is a local folder: kept in the record), each step's metrics in the file it links.
    from huggingface_hub import ModelCard

    metadata = ModelCard(card).data.to_dict()
    assert len(card.encode()) < 30_000 and "base_model" not in metadata and record["base_model"] == str(world.sft)
    assert metadata["prefdata"]["dataset"] == dataset["ref"] and "log" not in metadata["prefdata"]["metrics"]
    steps = [json.loads(line) for line in (result.model_dir / "train_steps.jsonl").read_text().splitlines()]
    assert steps == json.loads(json.dumps(log, default=str)) and "(train_steps.jsonl)" in card
    assert record["config"]["bf16"] is False and record["config"]["activation_checkpointing"] is False
    assert record["config"]["gradient_checkpointing"] is False  # the deprecated alias mirrors it
    # the waivers its validation recorded (the world's checklist): in the record, on the card and in the log
    waived = {c["id"] for c in Store(dataset["store"]).get(dataset["ref"]).manifest["check_report"]["checks"]
              if (c.get("details") or {}).get("waived")}
    assert set(record["waivers"]) == waived and len(waived) == 3
    assert "## Waivers" in card and all(f"- `{check}`: item " in card for check in waived)
    assert "check(s) waived" in (result.model_dir / "train.log").read_text()
    # training you can watch: TensorBoard events under the run folder, and the curves on the card
    log_text = (result.model_dir / "train.log").read_text()
    assert f"tensorboard --logdir {tmp_path / 'dpo'}" in log_text
    scalars = _tensorboard_scalars(tmp_path / "dpo")
    assert {"train/loss", "train/rewards/margins"} <= scalars, scalars
    assert (result.model_dir / "curves.png").stat().st_size > 10_000 and "![training curves](curves.png)" in card


def _tensorboard_scalars(folder: Path) -> set[str]:
    """Every scalar tag of the TensorBoard event files under `folder`, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for events in folder.rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    return tags


def test_allowed_waivers_refuses_a_version_validated_with_others_before_any_model(dataset, tmp_path):
    (tmp_path / "strict.yaml").write_text("allowed_waivers: [min_size]\n")
    out = cli("train", "dpo", "--dataset", dataset["ref"], "--config", str(tmp_path / "strict.yaml"),
              "--base-model", "/nonexistent/model", store=Path(dataset["store"]))
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "waived, outside allowed_waivers (min_size)" in out.stderr and "/nonexistent" not in out.stderr


def per_step_lines(text: str) -> list[str]:
    """Lines of a per-step metric dict as TRL's trainer logs it: {'loss': ..., 'grad_norm': ...}."""
    return [line for line in text.splitlines() if "'loss'" in line or "'grad_norm'" in line]


def test_train_command_is_quiet_and_dpo_length_controls_reach_the_trainer(dataset, world, tmp_path):
    """Issue 13 item 5 and issue 14 item 3: `prefdata train` prints stage lines, not a metric dict per
    step (those go to DIR/train.log and the card); DPO's length controls set in YAML reach TRL's trainer
    (the card records what the trainer used) and the card reports mean response length before/after."""
    config = base_config(dataset, world, max_steps=4, ld_alpha=0.5, use_weighting=True, loss_type=["sigmoid_norm"],
                         loss_weights=[1.0])
    (tmp_path / "dpo.yaml").write_text(json.dumps(config))
    out = cli("train", "dpo", "--dataset", dataset["ref"], "--base-model", str(world.sft), "--config",
              str(tmp_path / "dpo.yaml"), "--output-dir", str(tmp_path / "quiet"), store=Path(dataset["store"]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert per_step_lines(out.stdout) == [] and len(out.stdout.splitlines()) < 20, out.stdout
    assert "model: " in out.stdout and "mean_response_length" in out.stdout
    log = (tmp_path / "quiet" / "train.log").read_text()
    assert len(per_step_lines(log)) == 4, log  # every step, in the run's log file
    record = json.loads((tmp_path / "quiet" / "prefdata_train.json").read_text())
    assert record["metrics"]["length_controls"] == {"loss_type": ["sigmoid_norm"], "ld_alpha": 0.5,
                                                    "use_weighting": True}
    assert set(record["metrics"]["mean_response_length"]) == {"before", "after"}
    assert len(record["metrics"]["log"]) == 4


def test_train_refuses_pairs_the_trainer_would_truncate_unless_waived(dataset, world, tmp_path):
    """Issue 14 item 1, train side: `prefdata train` runs template_fit with the base model's tokenizer
    and the config's max_length before training. The world's pairs are 14 tokens as the trainer hands
    them to TRL (BOS, 8-character prompt, 4 digits, EOS): at max_length 12 every pair is cut, so the run
    is refused in one line (exit 1) and writes nothing; `check_template: false` trains anyway."""
    from prefdata.trainers import train

    (tmp_path / "short.yaml").write_text(json.dumps(base_config(dataset, world, max_steps=1, max_length=12)))
    out = cli("train", "dpo", "--dataset", dataset["ref"], "--base-model", str(world.sft), "--config",
              str(tmp_path / "short.yaml"), "--output-dir", str(tmp_path / "refused"), store=Path(dataset["store"]))
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    n = len(load_train_pairs(dataset))
    assert f"template_fit fails on {dataset['ref']}: {n} of {n} pairs" in out.stderr and "max_length 12" in out.stderr
    assert "plain concatenation" in out.stderr  # as TRL gets prefdata's pairs: plain text, not the chat template
    assert "check_template: false" in out.stderr and not (tmp_path / "refused").exists()
    result = train("dpo", dataset["ref"], base_config(dataset, world, max_steps=1, max_length=12, check_template=False,
                                                      length_max_new_tokens=0, evaluator=None, eval_sft=None),
                   store=dataset["store"], base_model=world.sft, output_dir=tmp_path / "waived")
    assert result.metrics["steps"] == 1 and result.card.is_file()


def load_train_pairs(dataset) -> list[dict]:
    from prefdata.trainers.data import load_validated

    return load_validated(dataset["ref"], dataset["store"]).train


def test_dpo_refuses_use_weighting_with_the_sft_term():
    """TRL 1.16's WPO weighting fails mid-step on the sft loss term (an in-place multiply on an expanded
    tensor: exit 3 after loading everything); the config refuses the pair up front, in one line."""
    from prefdata.trainers.config import parse_config
    from prefdata.trainers.dpo import DPOTrainConfig

    with pytest.raises(UnusableInput, match="use_weighting cannot be combined with the 'sft' loss type"):
        parse_config(DPOTrainConfig, {"use_weighting": True})  # the default loss_type is [sigmoid, sft]
    assert parse_config(DPOTrainConfig, {"use_weighting": True, "loss_type": ["sigmoid"], "loss_weights": [1.0]}).use_weighting


def test_train_verbose_shows_the_per_step_view(dataset, world, tmp_path):
    (tmp_path / "dpo.yaml").write_text(json.dumps(base_config(dataset, world, max_steps=2)))
    out = cli("train", "dpo", "--dataset", dataset["ref"], "--base-model", str(world.sft), "--config",
              str(tmp_path / "dpo.yaml"), "--output-dir", str(tmp_path / "loud"), "--verbose", store=Path(dataset["store"]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(per_step_lines(out.stdout)) == 2, out.stdout


def test_dpo_without_mixing_logs_no_sft_term(dataset, world, tmp_path):
    from prefdata.trainers import train

    result = train("dpo", dataset["ref"], base_config(dataset, world, sft_ratio=0.0, max_steps=2), store=dataset["store"],
                   base_model=world.sft, output_dir=tmp_path / "dpo0")
    assert result.metrics["sft_mix"]["ratio"] == 0.0 and all("sft_loss" not in row for row in result.metrics["log"])


def test_grpo_trains_with_a_rule_reward(dataset, world, tmp_path):
    from prefdata.trainers import train

    config = base_config(dataset, world, rewards=["rule:prefdata.world:verify"], num_generations=4,
                         per_device_train_batch_size=8, max_completion_length=5, max_steps=2)
    result = train("grpo", dataset["ref"], config, store=dataset["store"], base_model=world.sft, output_dir=tmp_path / "grpo")
    assert changed_parameters(world.sft, result.model_dir)[0] > 0
    log = result.metrics["log"]
    assert len(log) == 2 and all("reward" in row and "sft_loss" in row for row in log)
    assert all(0.0 <= row["reward"] <= 1.0 for row in log)  # a verifier's mean pass rate


def test_grpo_refuses_a_reward_it_cannot_load(dataset, world, tmp_path):
    from prefdata.trainers import train

    for rewards, needle in ((["rule:prefdata.world:no_such"], "is not a registered verifier"),
                            (["rule:os:system"], "is not a registered verifier"), (["rm:/no/such/rm"], "not found"),
                            (["verify"], r"rewards: 'verify': use rm:PATH; rule:NAME; or world"),
                            (["lm:/x"], r"use rm:PATH; rule:NAME; or world \('lm:' is a scorer backend, not a reward\)"),
                            ([], "grpo needs rewards")):
        with pytest.raises(UnusableInput, match=needle):
            train("grpo", dataset["ref"], base_config(dataset, world, rewards=rewards), store=dataset["store"],
                  base_model=world.sft, output_dir=tmp_path / "g")


@pytest.fixture(scope="module")
def reward_model(dataset, world, tmp_path_factory):
    """A real reward model trained by `train rm` (3 steps) on the tiny version: its card records the
    held-out pairwise accuracy the reward-model gate reads."""
    from prefdata.trainers import train

    return train("rm", dataset["ref"], {"max_steps": 3, "per_device_train_batch_size": 8}, store=dataset["store"],
                 base_model=world.sft, output_dir=tmp_path_factory.mktemp("rm") / "rm")


def rm_copy(reward_model, folder: Path, accuracy="keep", card: bool = True) -> Path:
    """A copy of the trained reward model with its recorded held-out accuracy set (None: the key
    removed), or without its card at all (card=False)."""
    import shutil

    target = folder / "rm-copy"
    shutil.copytree(reward_model.model_dir, target)
    record = target / "prefdata_train.json"
    if not card:
        record.unlink()
        (target / "README.md").unlink()
    elif accuracy != "keep":
        data = json.loads(record.read_text())
        if accuracy is None:
            del data["metrics"]["heldout_pairwise_accuracy"]
        else:
            data["metrics"]["heldout_pairwise_accuracy"] = accuracy
        record.write_text(json.dumps(data))
    return target


def test_rm_trains_a_scorer_that_checks_can_use(dataset, reward_model, tmp_path):
    from transformers import AutoModelForSequenceClassification

    result = reward_model
    model = AutoModelForSequenceClassification.from_pretrained(result.model_dir)
    assert model.config.num_labels == 1
    accuracy = result.metrics["heldout_pairwise_accuracy"]
    assert 0.0 <= accuracy <= 1.0
    # The card records the figure the reward-model gate of grpo and ppo reads.
    assert json.loads((result.model_dir / "prefdata_train.json").read_text())["metrics"]["heldout_pairwise_accuracy"] == accuracy
    # Held-out pairs are scored in the layout the model was trained on (prompt + completion + eos), the
    # one PPO's scorer uses: the reported accuracy is the share of pairs that scorer ranks right.
    import torch

    from prefdata.models.reward import RewardModelScorer
    from prefdata.trainers.data import load_validated

    held = load_validated(dataset["ref"], dataset["store"]).eval
    scorer = RewardModelScorer(result.model_dir, torch.device("cpu"))
    chosen = scorer([p["prompt"] for p in held], [p["chosen"] for p in held])
    rejected = scorer([p["prompt"] for p in held], [p["rejected"] for p in held])
    assert accuracy == sum(c > r for c, r in zip(chosen, rejected)) / len(held)
    # At or below chance the run says so, in the metrics and on the card.
    warned = "warnings" in result.metrics
    assert warned == (accuracy <= 0.5)
    if warned:
        assert "at or below chance" in result.metrics["warnings"][0] and "## Warnings" in result.card.read_text()
    assert len(result.metrics["log"]) == 3 and all("loss" in row for row in result.metrics["log"])
    # The label-direction check takes it as an independent scorer.
    check = cli("check", dataset["ref"], "--scorer", f"rm:{result.model_dir}", "--json", str(tmp_path / "r.json"),
                store=Path(dataset["store"]))
    report = json.loads((tmp_path / "r.json").read_text())
    direction = next(c for c in report["checks"] if c["id"] == "label_direction")
    assert direction["status"] in ("pass", "fail") and direction["metric"] is not None, check.stderr


# -- the reward-model gate (issue 14 item 4) --------------------------------------------------------------


def ppo_rm_config(dataset, world, rm: Path, **extra) -> dict:
    return base_config(dataset, world, rewards=[f"rm:{rm}"], max_steps=1, mini_batch_size=4, **extra)


def test_reward_model_gate_refuses_a_weak_or_unrecorded_reward_model(dataset, world, reward_model, tmp_path):
    """grpo and ppo refuse an rm:DIR reward below min_rm_accuracy (exit 1), one whose card lacks the
    figure (exit 1) and a folder with no card (exit 2), in one line, before any model is loaded (nothing
    is written to the output folder)."""
    from prefdata.base.errors import GateFailed
    from prefdata.trainers import train

    weak = rm_copy(reward_model, tmp_path / "weak", accuracy=0.55)
    unrecorded = rm_copy(reward_model, tmp_path / "unrecorded", accuracy=None)
    uncarded = rm_copy(reward_model, tmp_path / "uncarded", card=False)
    grpo = lambda rm: base_config(dataset, world, rewards=["rule:prefdata.world:verify", f"rm:{rm}"],  # noqa: E731
                                  num_generations=4, max_completion_length=5, max_steps=1)
    for method, config in (("grpo", grpo), ("ppo", lambda rm: ppo_rm_config(dataset, world, rm))):
        for rm, error, needle in ((weak, GateFailed, "held-out pairwise accuracy 0.55 is below min_rm_accuracy 0.6"),
                                  (unrecorded, GateFailed, "records no held-out pairwise accuracy"),
                                  (uncarded, UnusableInput, "has no prefdata_train.json")):
            out = tmp_path / f"{method}-{rm.parent.name}"
            with pytest.raises(error, match=needle) as refused:
                train(method, dataset["ref"], config(rm), store=dataset["store"], base_model=world.sft, output_dir=out)
            assert str(rm) in str(refused.value) and "min_rm_accuracy" in str(refused.value)
            assert not out.exists()  # refused before training started
    # The command line: one line, exit 1 for a weak model, exit 2 for a folder with no card.
    (tmp_path / "weak.yaml").write_text(json.dumps(grpo(weak)))
    out = cli("train", "grpo", "--dataset", dataset["ref"], "--base-model", str(world.sft), "--config",
              str(tmp_path / "weak.yaml"), store=Path(dataset["store"]))
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0 and "below min_rm_accuracy 0.6" in out.stderr, out.stderr
    (tmp_path / "uncarded.yaml").write_text(json.dumps(ppo_rm_config(dataset, world, uncarded)))
    out = cli("train", "ppo", "--dataset", dataset["ref"], "--base-model", str(world.sft), "--config",
              str(tmp_path / "uncarded.yaml"), store=Path(dataset["store"]))
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "has no prefdata_train.json" in out.stderr, out.stderr


def test_reward_model_gate_accepts_a_reward_model_at_the_bar(dataset, world, reward_model, tmp_path):
    """A reward model recorded at >= min_rm_accuracy trains grpo and ppo (real steps); the bar is a config
    field, and min_rm_accuracy: null waives the gate for a reward model from elsewhere (no card)."""
    from prefdata.trainers import train
    from prefdata.trainers.grpo import GRPOTrainConfig
    from prefdata.trainers.ppo import PPOTrainConfig

    assert GRPOTrainConfig.__dataclass_fields__["min_rm_accuracy"].default == 0.6
    assert PPOTrainConfig.__dataclass_fields__["min_rm_accuracy"].default == 0.6
    good = rm_copy(reward_model, tmp_path / "good", accuracy=0.6)
    config = base_config(dataset, world, rewards=["rule:prefdata.world:verify", f"rm:{good}"],
                         num_generations=4, per_device_train_batch_size=8, max_completion_length=5, max_steps=1)
    grpo = train("grpo", dataset["ref"], config, store=dataset["store"], base_model=world.sft, output_dir=tmp_path / "g")
    [row] = grpo.metrics["log"]  # GRPO with both rewards: each logged under its own name
    assert "rewards/rule_verify/mean" in row and any(k.startswith("rewards/") and "rule" not in k for k in row), row
    ppo = train("ppo", dataset["ref"], ppo_rm_config(dataset, world, good), store=dataset["store"], base_model=world.sft,
                output_dir=tmp_path / "p")
    assert ppo.metrics["steps"] == 1 and ppo.metrics["reward_as"] == "adapter"  # trained on the same base: no copy
    # A stricter bar refuses the same model; a waived gate takes one without a card.
    from prefdata.base.errors import GateFailed

    with pytest.raises(GateFailed, match="below min_rm_accuracy 0.7"):
        train("ppo", dataset["ref"], ppo_rm_config(dataset, world, good, min_rm_accuracy=0.7), store=dataset["store"],
              base_model=world.sft, output_dir=tmp_path / "p2")
    uncarded = rm_copy(reward_model, tmp_path / "uncarded", card=False)
    waived = train("ppo", dataset["ref"], ppo_rm_config(dataset, world, uncarded, min_rm_accuracy=None),
                   store=dataset["store"], base_model=world.sft, output_dir=tmp_path / "p3")
    assert waived.metrics["steps"] == 1


def test_a_reward_adapter_rides_on_the_ppo_base(dataset, world, reward_model, tmp_path):
    """Issue 14 item 5: a reward model `train rm` trained with LoRA on PPO's base loads as a second adapter
    on the policy's base (no second copy), scores exactly as the merged reward model does, stays frozen
    through real PPO steps, and is not saved with the policy; on another base it loads as its own model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prefdata.trainers.data import load_validated
    from prefdata.trainers.ppo import (
        PPOConfig, RewardAdapterScorer, RewardModelScorer, _reward_fn, load_policy, reward_adapter_dir, save_policy, train,
    )

    rm = reward_model.model_dir
    assert reward_adapter_dir(rm, world.sft) == rm / "adapter"
    other = tmp_path / "other-base"
    AutoModelForCausalLM.from_pretrained(world.sft).save_pretrained(other)
    AutoTokenizer.from_pretrained(world.sft).save_pretrained(other)
    assert reward_adapter_dir(rm, other) is None  # another base: the adapter cannot ride on it
    config = PPOConfig(max_steps=1, per_device_train_batch_size=8, mini_batch_size=4, max_new_tokens=5, learning_rate=1e-2, lora_r=4, lora_alpha=8,
                       max_kl=None)
    device = torch.device("cpu")
    tokenizer, model, value_head = load_policy(world.sft, config, device)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    scorer = _reward_fn(rm, device, model, world.sft)
    assert isinstance(scorer, RewardAdapterScorer)
    assert isinstance(_reward_fn(rm, device, *load_policy(other, config, device)[1:2], other), RewardModelScorer)
    held = load_validated(dataset["ref"], dataset["store"]).eval
    texts = ([p["prompt"] for p in held] * 2, [p["chosen"] for p in held] + [p["rejected"] for p in held])
    ours, merged = scorer(*texts), RewardModelScorer(rm, device)(*texts)
    assert ours == pytest.approx(merged, abs=1e-4)
    with model.disable_adapter():  # the same head on the bare base: what the adapter's weights add
        bare = scorer(*texts)
    assert max(abs(x - y) for x, y in zip(ours, bare)) > 1e-3  # 0.019 here: the match above is the adapter's doing
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable  # scoring left the policy trainable
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if ".reward." in n}
    policy = {n: p.detach().clone() for n, p in model.named_parameters() if n in trainable}
    assert frozen and not (set(frozen) & trainable)
    history = train(model, value_head, tokenizer, scorer, sorted({r["prompt"] for r in dataset_rows(dataset)}), config)
    assert len(history) == 1
    assert all(p.equal(frozen[n]) for n, p in model.named_parameters() if n in frozen)  # the reward did not train
    assert any(not p.equal(policy[n]) for n, p in model.named_parameters() if n in policy)  # the policy did
    save_policy(model, value_head, tokenizer, tmp_path / "saved")
    assert not (tmp_path / "saved" / "adapter" / "reward").exists()


def dataset_rows(dataset) -> list[dict]:
    from prefdata.trainers.data import load_validated

    return load_validated(dataset["ref"], dataset["store"]).train


def test_rm_chance_warning_names_the_usual_causes(tmp_path):
    from prefdata.trainers.card import write_card
    from prefdata.trainers.data import TrainingData
    from prefdata.trainers.rm import chance_warning

    assert chance_warning(0.51, 30, 240) is None and chance_warning(None, 0, 240) is None
    for accuracy in (0.5, 0.296):
        line = chance_warning(accuracy, 27, 243)
        assert "at or below chance" in line and "too few pairs (243" in line and "too small" in line and "noisy labels" in line
    data = TrainingData("x@1", "1", {}, [], [], [])
    card = write_card(tmp_path, "rm", data, "base", {}, {"warnings": [chance_warning(0.3, 27, 243)]})
    assert "## Warnings" in card.read_text() and "at or below chance" in card.read_text()
    assert "at or below chance" in json.loads((tmp_path / "prefdata_train.json").read_text())["metrics"]["warnings"][0]


# -- DPO's math: our reading of TRL's loss, on the same inputs --------------------------------------------


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_dpo_loss_matches_the_formula_on_the_same_batch(world, loss_type):
    """TRL's DPOTrainer loss on one batch equals the formula computed here from completion log-probs of
    the policy and an explicit reference: sigmoid -log s(b * m) with m from summed log-probs, and IPO
    (m - 1/(2b))^2 with m from per-token means (TRL normalises IPO by completion length, as its authors do)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from prefdata.models.logprobs import lm_batch

    tok = AutoTokenizer.from_pretrained(world.sft)
    policy = AutoModelForCausalLM.from_pretrained(world.sft)
    reference = AutoModelForCausalLM.from_pretrained(world.sft)
    torch.manual_seed(0)
    with torch.no_grad():  # make the policy differ from the reference
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rows = world_pairs(TINY, 4)
    beta = 0.3
    args = DPOConfig(output_dir="/tmp/unused", loss_type=[loss_type], beta=beta, bf16=False, report_to="none",
                     per_device_train_batch_size=4, activation_checkpointing=False)
    trainer = DPOTrainer(model=policy, ref_model=reference, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    policy.eval(), reference.eval()
    with torch.no_grad():
        trl_loss = trainer.compute_loss(policy, batch).item()

    def summed(model, side):
        b = lm_batch(tok, [(r["prompt"], r[side]) for r in rows], "cpu")
        with torch.no_grad():
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1]
        labels = b["labels"][:, 1:]
        logp = torch.gather(logits.log_softmax(-1), 2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        mask = labels != -100
        total = (logp * mask).sum(1)
        return total / mask.sum(1) if loss_type == "ipo" else total

    margin = (summed(policy, "chosen") - summed(reference, "chosen")) - (summed(policy, "rejected") - summed(reference, "rejected"))
    expected = (-torch.nn.functional.logsigmoid(beta * margin) if loss_type == "sigmoid" else (margin - 1 / (2 * beta)) ** 2).mean()
    assert trl_loss == pytest.approx(expected.item(), rel=1e-4, abs=1e-5)


# -- guards on crafted histories ----------------------------------------------------------------------------


def test_flipped_labels_guard():
    from prefdata.trainers.guards import FlippedLabels

    healthy = [{"rewards/chosen": 0.01 * i, "rewards/rejected": -0.01 * i} for i in range(10)]
    flipped = [{"rewards/chosen": -0.02 * i, "rewards/rejected": 0.01 * i} for i in range(10)]
    assert FlippedLabels()(healthy) is None
    assert "labels look flipped" in FlippedLabels()(flipped)
    assert FlippedLabels()(flipped[:4]) is None  # too early to tell


def test_chosen_collapse_guard():
    from prefdata.trainers.guards import ChosenCollapse

    falling = [{"rewards/chosen": -0.3 * i, "rewards/rejected": -0.5 * i} for i in range(12)]  # margin grows, chosen sinks
    steady = [{"rewards/chosen": 0.1, "rewards/rejected": -0.2}] * 12
    assert "add the sft loss term" in ChosenCollapse()(falling)
    assert ChosenCollapse()(steady) is None


def test_kl_guards():
    from prefdata.trainers.guards import KLAbove, KLCollapse

    hacking = [{"kl": 0.05, "reward": 0.1}] * 10 + [{"kl": 0.004, "reward": 0.9}] * 5
    healthy = [{"kl": 0.05, "reward": 0.1 + 0.05 * i} for i in range(15)]
    assert "hacking the reward" in KLCollapse()(hacking)
    assert KLCollapse()(healthy) is None
    assert KLCollapse()([{"kl": 0.0, "reward": r} for r in range(15)]) is None  # never left the reference
    assert "above the bound" in KLAbove(bound=0.2)([{"kl": 0.3}] * 3)
    assert KLAbove(bound=0.2)([{"kl": 0.1}] * 3) is None


def test_flat_advantages_guard():
    from prefdata.trainers.guards import FlatAdvantages

    assert "advantages are all ~0" in FlatAdvantages()([{"frac_reward_zero_std": 1.0}] * 5)
    assert FlatAdvantages()([{"frac_reward_zero_std": 1.0}] * 4 + [{"frac_reward_zero_std": 0.5}]) is None


def test_a_guard_stops_a_real_dpo_run(dataset, world, tmp_path, monkeypatch):
    """A guard that fires on the first log stops TRL's loop and the run ends with GuardTripped (exit 1)."""
    from prefdata.trainers import dpo, guards, train

    monkeypatch.setattr(dpo, "defaults", lambda method: [lambda history: "crafted alarm" if history else None])
    with pytest.raises(guards.GuardTripped, match="dpo stopped at step 1: crafted alarm"):
        train("dpo", dataset["ref"], base_config(dataset, world, max_steps=5), store=dataset["store"],
              base_model=world.sft, output_dir=tmp_path / "guarded")
    assert guards.GuardTripped.exit_code == 1


# -- mixing and the registry ---------------------------------------------------------------------------------


def test_sft_batch_size_and_mixer_draws():
    from prefdata.trainers.mixing import sft_batch_size
    from prefdata.trainers.mixing import SFTMixer
    from prefdata.world import build_tokenizer

    assert [sft_batch_size(b, r) for b, r in ((16, 0.2), (8, 0.2), (5, 0.2), (16, 0.0))] == [4, 2, 1, 0]
    mixer = SFTMixer([("1+1=", "0002")], build_tokenizer(), 3)
    with pytest.raises(ValueError):
        SFTMixer([], build_tokenizer(), 3)
    assert mixer.batch_size == 3


def test_entry_point_plugins_are_found(tmp_path):
    """An outside package registers a method through the `prefdata.trainers` entry-point group."""
    pkg = tmp_path / "site"
    (pkg / "extra_trainer.py").parent.mkdir(parents=True)
    (pkg / "extra_trainer.py").write_text(
        "from dataclasses import dataclass\nfrom prefdata.trainers import Plugin\n"
        "@dataclass\nclass Cfg:\n    base_model: str | None = None\n"
        "plugin = Plugin('extra', Cfg, lambda *a: None, 'an outside method')\n")
    dist = pkg / "extra_trainer-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-trainer\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[prefdata.trainers]\nextra = extra_trainer:plugin\ndpo = extra_trainer:plugin\n")
    code = ("from prefdata.trainers import methods, load, targets\nimport sys\n"
            "print(methods()); print(load('extra').description); print(targets()['dpo'])\n"
            "print('torch' in sys.modules, 'trl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(pkg)})
    lines = out.stdout.splitlines()
    assert lines[0] == "['dpo', 'extra', 'grpo', 'ppo', 'rm', 'sft']", out.stderr
    assert lines[1] == "an outside method"
    assert lines[2] == "prefdata.trainers.dpo:plugin"  # a plugin cannot shadow a built-in
    assert lines[3] == "False False"  # listing and loading an outside plugin imports neither torch nor TRL


def test_ppo_trains_from_a_validated_version(dataset, world, tmp_path):
    from prefdata.trainers import train

    config = base_config(dataset, world, rewards=["rule:prefdata.world:verify"], max_steps=2, mini_batch_size=4)
    result = train("ppo", dataset["ref"], config, store=dataset["store"], base_model=world.sft, output_dir=tmp_path / "ppo")
    assert changed_parameters(world.sft, result.model_dir)[0] > 0
    log = result.metrics["log"]
    assert len(log) == 2 and all(row["ptx_loss"] is not None and "kl" in row for row in log)
    assert json.loads((result.model_dir / "prefdata_train.json").read_text())["dataset"] == dataset["ref"]
    # PPO's per-step lines go to the run's log file (the console only with --verbose), its stage lines too.
    steps = [line for line in (result.model_dir / "train.log").read_text().splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all("reward_mean" in line for line in steps)
    assert result.metrics["reward_as"] == "callable" and set(result.metrics["mean_response_length"]) == {"before", "after"}
    # PPO's own loop writes TensorBoard events too (TRL's trainers do it for the other methods)
    assert {"train/reward_mean", "train/kl", "train/policy_loss"} <= _tensorboard_scalars(tmp_path / "ppo")
    assert (result.model_dir / "curves.png").is_file()
    with pytest.raises(UnusableInput, match="use_lora must stay true"):
        train("ppo", dataset["ref"], {**config, "use_lora": False}, store=dataset["store"], base_model=world.sft,
              output_dir=tmp_path / "ppo2")


# -- README's training commands, run as written ----------------------------------------------------------


def readme_training_block() -> list[str]:
    """The lines of README's training block (the ```bash block after <!-- training-commands -->)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    if "<!-- training-commands -->" not in text:
        raise AssertionError("README.md lost its <!-- training-commands --> block")
    code = text.split("<!-- training-commands -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in code.strip().splitlines() if line.strip() and not line.lstrip().startswith("#")]


def readme_train_commands() -> dict[str, str]:
    return {line.split()[2]: line for line in readme_training_block() if line.startswith("prefdata train ")}


def demo_layout(root: Path, store: str, general: str) -> Path:
    """What `make demo` leaves for README's commands: .prefdata/demo/store and general_sft.jsonl, run
    from a checkout (docs/examples)."""
    import shutil

    demo = root / ".prefdata" / "demo"
    demo.mkdir(parents=True)
    shutil.copytree(store, demo / "store")
    shutil.copy(general, demo / "general_sft.jsonl")
    (root / "docs").symlink_to(REPO / "docs")
    return root


def test_readme_training_commands_use_the_example_configs():
    commands = readme_train_commands()
    assert set(commands) == {"rm", "dpo", "grpo", "ppo", "sft"}
    for method, line in commands.items():
        config = line.split("--config")[1].split()[0]
        assert config == f"docs/examples/train-{method}.yaml" and (REPO / config).is_file()


def test_readme_dpo_command_runs_as_written(dataset, world, tmp_path):
    """The README's DPO line, word for word, on a tiny validated version laid out as the demo leaves it
    (DATA and SFT, which README takes from the demo, point at the tiny version and model)."""
    root = demo_layout(tmp_path, dataset["store"], dataset["general"])
    setup = [line for line in readme_training_block()
             if not line.startswith("prefdata train ") and not line.startswith(("DATA=", "SFT="))]
    script = "\n".join(["set -euo pipefail", *setup, readme_train_commands()["dpo"]])
    env = {**os.environ, "DATA": dataset["ref"], "SFT": str(world.sft),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PREFDATA_STORE", None)
    out = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    card = json.loads(next((root / ".prefdata" / "runs").glob("dpo-*/prefdata_train.json")).read_text())
    assert card["dataset"] == dataset["ref"] and card["config"]["general_sft"] == ".prefdata/demo/general_sft.jsonl"
    assert "warnings" not in card["metrics"] and card["metrics"]["steps"] == 100  # the defaults ran, no guard fired


@pytest.mark.slow
def test_readme_training_block_runs_as_written_after_the_demo(tmp_path):
    """The whole block, every method with its defaults, after a real `prefdata demo` in the same folder:
    the done-when of issue 16 (each trains without a guard firing)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PREFDATA_STORE", None)
    (tmp_path / "docs").symlink_to(REPO / "docs")
    demo = subprocess.run([sys.executable, "-m", "prefdata", "demo", "--out", ".prefdata/demo"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=1800)
    assert demo.returncode == 0, demo.stderr[-2000:]
    script = "\n".join(["set -euo pipefail", *readme_training_block()])
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=3600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for method in ("rm", "dpo", "grpo", "ppo", "sft"):  # exit 0: no guard stopped any of them
        card = json.loads(next((tmp_path / ".prefdata" / "runs").glob(f"{method}-*/prefdata_train.json")).read_text())
        assert card["method"] == method and card["metrics"]["steps"] > 0


def test_trainer_specs_load_through_the_registry_and_the_one_target_loader(register):
    """rule rewards, evaluators and plugins resolve through the registry (prefdata/base/registry.py: a
    config names a registered entry, never an arbitrary module) and load through prefdata.base.targets:
    one line that says what was looked for; PPO scores a reward-model folder with the one shared scorer."""
    import prefdata.models.reward
    import prefdata.trainers as trainers
    from prefdata.trainers.evaluation import load_evaluator
    from prefdata.trainers.rewards import rule_reward
    from prefdata.trainers.ppo import RewardModelScorer

    assert rule_reward("prefdata.world:verify").__name__ == "rule_verify"
    assert rule_reward("world").__name__ == "rule_verify"  # the same entry by its name
    with pytest.raises(UnusableInput, match=r"rewards: rule 'timeit:timeit' is not a registered verifier .*use one of "
                                            r"instructions, world"):
        rule_reward("timeit:timeit")
    with pytest.raises(UnusableInput, match=r"evaluator 'os:system' is not a registered evaluator"):
        load_evaluator("os:system")
    register(verifiers={"gone": "prefdata.world:no_such"}, evaluators={"nomod": "no_such_module:f"},
             trainers={"gone": "prefdata.world:no_plugin"})
    with pytest.raises(UnusableInput, match=r"rewards: rule 'prefdata.world:no_such' cannot be loaded: .*looked for"):
        rule_reward("gone")
    with pytest.raises(UnusableInput, match=r"evaluator 'no_such_module:f' cannot be loaded: cannot import .*looked for"):
        load_evaluator("nomod")
    assert "gone" in trainers.methods()
    with pytest.raises(UnusableInput, match=r"training method 'prefdata.world:no_plugin' cannot be loaded: .*looked for"):
        trainers.load("gone")
    assert RewardModelScorer is prefdata.models.reward.RewardModelScorer


def test_show_config_prints_every_field_with_default_and_help(tmp_path):
    """Issue 15: `prefdata train METHOD --show-config` lists every field of the method's config (TRL's
    and prefdata's) with its default and help, without a dataset or any training; the version stays
    required otherwise (one line, exit 2)."""
    import dataclasses

    from prefdata.trainers.dpo import DPOTrainConfig

    out = cli("train", "dpo", "--show-config", store=tmp_path / "store")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    names = [f.name for f in dataclasses.fields(DPOTrainConfig) if f.init]
    for name in names:
        assert any(line.startswith(f"{name}: ") for line in lines), name
    assert "learning_rate: 0.0005  # LoRA learning rate." in lines  # prefdata's default, not TRL's
    assert 'loss_type: ["sigmoid", "sft"]  # TRL DPO loss types, combined with loss_weights.' in lines
    assert any(line.startswith("check_template: true  # Before training, run the template_fit") for line in lines)
    assert any(line.startswith("ld_alpha: null  # ") and len(line) > 30 for line in lines)  # a TRL field, TRL's help
    assert not (tmp_path / "store").exists()  # no store opened, nothing trained
    ppo = cli("train", "ppo", "--show-config", store=tmp_path / "store")
    assert ppo.returncode == 0 and "learning_rate: 0.0002  # AdamW learning rate" in ppo.stdout
    assert "max_steps: 60  #" in ppo.stdout and "per_device_train_batch_size: 64  #" in ppo.stdout
    assert not any(line.startswith(("lr:", "steps:", "batch_size:")) for line in ppo.stdout.splitlines())
    missing = cli("train", "dpo", store=tmp_path / "store")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "prefdata train dpo NAME@VERSION" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("old, new", [("lr", "learning_rate"), ("steps", "max_steps"),
                                      ("batch_size", "per_device_train_batch_size")])
def test_ppo_old_field_names_are_refused_with_the_new_name(old, new):
    """PPO's fields take TRL's names; a YAML with the old one is one line (exit 2) naming the new one."""
    from prefdata.trainers.config import parse_config
    from prefdata.trainers.ppo import PPOTrainConfig

    with pytest.raises(UnusableInput, match=f"'{old}' is now '{new}'.*use {new}") as err:
        parse_config(PPOTrainConfig, {old: 1, "rewards": ["rule:prefdata.world:verify"]})
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert getattr(parse_config(PPOTrainConfig, {new: 8, "mini_batch_size": 4 if new != "learning_rate" else 16,
                                                 "rewards": ["rule:prefdata.world:verify"]}), new) == 8


def test_weights_and_biases_offline_records_the_run(dataset, world, tmp_path, monkeypatch):
    """report_to: wandb with the optional extra installed (the dev extra installs it): offline, no
    account, the run's figures in a local W&B run folder that `wandb sync` would upload."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed: pip install 'prefdata[wandb]'")
    from prefdata.trainers import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = {"max_steps": 2, "per_device_train_batch_size": 8, "sft_ratio": 0.0, "length_max_new_tokens": 0,
              "report_to": ["wandb"]}  # the tracker is what is tested: the least run that logs
    result = train("dpo", dataset["ref"], config, store=dataset["store"], base_model=world.sft, output_dir=tmp_path / "dpo")
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0, list(tmp_path.rglob("*"))[:20]
    assert not _tensorboard_scalars(tmp_path / "dpo")  # only the tracker asked for
    assert result.metrics["log"]


def test_sigterm_stops_a_training_run_with_one_line_and_no_model(dataset, world, tmp_path):
    """SIGTERM (a scheduler's stop, `timeout`) to `prefdata train` mid-run: exit 143 in seconds, one
    line saying that no model was written, and no model in the output folder."""
    import signal
    import time

    (tmp_path / "long.yaml").write_text(json.dumps({"max_steps": 100000, "per_device_train_batch_size": 8}))
    out = tmp_path / "dpo"
    env = {**os.environ, "PREFDATA_STORE": dataset["store"]}
    err = tmp_path / "stderr.txt"
    process = subprocess.Popen([sys.executable, "-m", "prefdata", "train", "dpo", "--dataset", dataset["ref"],
                                "--config", str(tmp_path / "long.yaml"), "--base-model", str(world.sft),
                                "--output-dir", str(out)], env=env, stdout=subprocess.DEVNULL,
                               stderr=err.open("w"), start_new_session=True)
    deadline = time.monotonic() + 240
    while not ((out / "train.log").is_file() and (out / "train.log").read_text()):  # its first step is logged
        assert process.poll() is None, err.read_text()[-2000:]
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)  # a bound so a hang fails; the command's own deadline is 6 s
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, err.read_text()[-2000:]
    assert err.read_text().strip().splitlines()[-1] == (
        "prefdata: stopped by SIGTERM (no model was written to the output folder; the store keeps no half-written "
        "version)")
    assert not list(out.rglob("*.safetensors"))


def test_the_cards_base_model_is_a_hub_id_or_absent(tmp_path, monkeypatch):
    """The Hub's `base_model` takes a repo id: a base named `org/name` (no such local path) is one; a
    local folder, a relative path or a bare name is not, and stays only in prefdata_train.json."""
    from prefdata.trainers.card import hub_id

    monkeypatch.chdir(tmp_path)
    assert hub_id("HuggingFaceTB/SmolLM2-135M-Instruct") and hub_id("org/name.v2")
    (tmp_path / "models" / "sft").mkdir(parents=True)
    for local in ("models/sft", str(tmp_path / "models" / "sft"), "./org/name", "world-sft", "a/b/c"):
        assert not hub_id(local), local


def test_train_takes_max_steps_and_any_config_field_from_the_command_line(dataset, world, tmp_path):
    """Issue 43: `train --max-steps N` and `--set KEY=VALUE` (TRL's CLI habit) over the config file,
    each checked as the YAML is, the effective config on the card."""
    config = tmp_path / "dpo.yaml"
    config.write_text(yaml.safe_dump({**base_config(dataset, world), "beta": 0.1}))
    out = cli("train", "dpo", dataset["ref"], "--config", str(config), "--base-model", str(world.sft),
              "--max-steps", "1", "--set", "beta=0.25", "--set", "learning_rate=5.0e-4",
              "--output-dir", str(tmp_path / "run"), store=Path(dataset["store"]))
    assert out.returncode == 0, out.stderr
    record = json.loads((tmp_path / "run" / "prefdata_train.json").read_text())
    assert record["metrics"]["steps"] == 1 and record["config"]["max_steps"] == 1
    assert record["config"]["beta"] == 0.25 and record["config"]["learning_rate"] == 5.0e-4
    for bad, needle in (("betta=0.2", "unknown key(s) ['betta']"), ("beta", "--set 'beta': write KEY=VALUE")):
        out = cli("train", "dpo", dataset["ref"], "--config", str(config), "--base-model", str(world.sft),
                  "--set", bad, store=Path(dataset["store"]))
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_show_marks_waivers_and_check_holds_a_version_to_its_own_checklist(dataset):
    """Issue 43: `show` printed a waived check as `skip`, like one that lacked its input; the reason
    was only in --json. And `check NAME@VERSION` held a validated version to the default checklist,
    which it was never published under."""
    shown = cli("show", dataset["ref"], store=Path(dataset["store"]))
    assert shown.returncode == 0, shown.stderr
    checklist = str(REPO / "prefdata/world/checklist.yaml")
    assert f"checks: passed (checklist: {checklist})" in shown.stdout
    assert "waived min_size: item 10" in shown.stdout and "skip   min_size" not in shown.stdout
    checked = cli("check", dataset["ref"], store=Path(dataset["store"]))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"checked with the checklist it was validated ({checklist})" in checked.stderr
    default = cli("check", dataset["ref"], "--config", str(REPO / "checks/checklist.yaml"), store=Path(dataset["store"]))
    assert default.returncode == 1  # the default refuses it (min_size, category_coverage): named, it is used
