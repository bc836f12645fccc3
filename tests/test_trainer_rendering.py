"""Every trainer's data goes through the one chat rendering (prefdata.models.chat), issue 21 item 1.

Real tiny models: `tiny_llama` (a char-level Llama whose tokenizer's chat template writes
"user: ...\\nassistant: ...") for a chat rendering, and a random tiny Llama with the demo world's
tokenizer (its template drops the assistant's turn, so it renders plain text). Versions are written
and signed validated through the store, with and without a rendering in their lineage. The TRL
trainers are built by the plugins themselves (`train`), their tokenised datasets and collated
batches read, and no step taken where none is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.models import chat

REPORT = {"passed": True, "checks": [{"id": "min_size", "status": "pass", "metric": 4, "threshold": 1}]}
SYSTEM = "Be brief."


def _pair(i: int, a: int, b: int, split: str) -> dict:
    return {"id": f"p{i}", "prompt": f"{a}+{b}=", "chosen": f"{a + b:04d}", "rejected": f"{a + b + 10:04d}", "split": split}


PAIRS = [_pair(0, 12, 34, "train"), _pair(1, 50, 7, "train"), _pair(2, 8, 81, "train"), _pair(3, 3, 4, "test")]
QUIET = {"max_steps": 1, "per_device_train_batch_size": 2, "sft_ratio": 0.0, "length_max_new_tokens": 0,
         "report_to": "none", "lora_r": 4, "lora_alpha": 8}


class Captured(Exception):
    """Raised in place of training: the plugin built its TRL trainer and handed it over."""

    def __init__(self, trainer):
        super().__init__("captured")
        self.trainer = trainer


def capture_trainer(monkeypatch, module) -> None:
    def grab(method, trainer, *args, **kwargs):
        raise Captured(trainer)

    monkeypatch.setattr(module, "train_and_measure", grab)


def make_version(store: Path, name: str, rendering: dict | None, pairs: list[dict] = PAIRS) -> str:
    """A validated version of `pairs` whose lineage records `rendering` (None: records none)."""
    import polars as pl

    from prefdata.data.store import Store, tables_for

    st = Store(str(store))
    lineage = {"parent": None, "sources": [], "flow_run": None, "components": {}}
    if rendering is not None:
        lineage["rendering"] = rendering
    v = st.create(name, tables_for(pl.DataFrame(pairs)), counts={"read": len(pairs), "kept": len(pairs), "quarantined": 0},
                  lineage=lineage)
    st.set_status(v.ref, "validated", report=REPORT)
    return v.ref


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory) -> Path:
    """A random ~20k-parameter Llama with the demo world's char-level tokenizer (plain text renders)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from prefdata.world import build_tokenizer
    from prefdata.world.tokenizer import save_tokenizer

    torch.manual_seed(0)
    tok = build_tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    path = tmp_path_factory.mktemp("plain") / "model"
    model.save_pretrained(path)
    save_tokenizer(tok, path)
    return path


def tokenizer_of(model_dir: Path):
    from prefdata.models.loading import load_tokenizer

    return load_tokenizer(model_dir)


def expected_rendering(model_dir: Path, system: str | None = None) -> chat.Rendering:
    return chat.resolve(tokenizer_of(model_dir), "auto", system)


def no_weights(monkeypatch) -> None:
    """Any model weights loaded from here on fail the test: refusals come before them."""
    import prefdata.models.loading as loading

    def refuse(*args, **kwargs):
        raise AssertionError("model weights were loaded before the refusal")

    monkeypatch.setattr(loading, "load_causal_lm", refuse)
    monkeypatch.setattr(loading, "load_reward_model", refuse)


# -- (a) what TRL tokenises is chat.encode of render_example's text ------------------------------------


@pytest.mark.parametrize("kind", ["chat", "plain"])
def test_dpo_rm_sft_batches_are_the_rendered_examples_tokens(kind, tiny_llama, plain_model, tmp_path, monkeypatch):
    """For the training pair, DPO's, RM's and SFT's tokenised dataset and collated batch hold exactly
    chat.encode(prompt text) and chat.encode(prompt text + completion text) of chat.render_example, the
    completion ending with one eos. Chat: tiny_llama's template, with the system prompt the version
    records (chat: auto follows it); plain: the world tokenizer, whose template renders no reply.
    The evaluation reads the same rendered text (held-out pairs, prompts generated from)."""
    import prefdata.trainers.evaluation as evaluation
    from prefdata.trainers import dpo, rm, sft, train

    base = tiny_llama if kind == "chat" else plain_model
    tok = tokenizer_of(base)
    rendering = expected_rendering(base, SYSTEM if kind == "chat" else None)
    assert rendering.chat == (kind == "chat")
    store = tmp_path / "store"
    ref = make_version(store, kind, rendering.record())
    [held] = [p for p in PAIRS if p["split"] == "test"]
    seen: dict[str, list] = {}
    real_accuracy, real_length = evaluation.preference_accuracy, evaluation.mean_response_length

    def accuracy(model, tokenizer, pairs):
        seen["eval_pairs"] = pairs
        return real_accuracy(model, tokenizer, pairs)

    def length(model, tokenizer, prompts, max_new_tokens, batch_size=32):
        seen["length_prompts"] = prompts
        return real_length(model, tokenizer, prompts, 2, batch_size)

    monkeypatch.setattr(evaluation, "preference_accuracy", accuracy)
    monkeypatch.setattr(evaluation, "mean_response_length", length)
    pair = next(p for p in PAIRS if p["split"] == "train")

    def example(reply: str) -> tuple[list[int], list[int]]:
        prompt_text, completion_text = chat.render_example(tok, rendering, pair["prompt"], reply)
        assert completion_text.endswith(tok.eos_token) and not completion_text.endswith(2 * tok.eos_token)
        return chat.encode(tok, prompt_text), chat.encode(tok, prompt_text + completion_text)

    prompt_ids, chosen_full = example(pair["chosen"])
    _, rejected_full = example(pair["rejected"])
    assert chosen_full[:len(prompt_ids)] == prompt_ids and chosen_full.count(tok.eos_token_id) == 1
    if kind == "chat":  # the text is the template's, not the stored prompt's
        assert tok.decode(prompt_ids, skip_special_tokens=True).startswith(f"system: {SYSTEM}\nuser: {pair['prompt']}")
    else:
        assert prompt_ids == chat.encode(tok, pair["prompt"])

    config = {**QUIET, "length_max_new_tokens": 2}
    for method, module in (("dpo", dpo), ("rm", rm), ("sft", sft)):
        capture_trainer(monkeypatch, module)
        with pytest.raises(Captured) as got:
            train(method, ref, config, store=str(store), base_model=base, output_dir=tmp_path / method)
        trainer = got.value.trainer
        rows = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
        # DPO: prompt_ids + chosen_ids; RM: chosen_ids (prompt + completion); SFT: input_ids
        first = next((r for r in rows if r.get("prompt_ids", []) + r.get("chosen_ids", r.get("input_ids", [])) == chosen_full),
                     None)
        assert first is not None, f"{method}: no example tokenised as the rendered pair: {rows}"
        batch = trainer.data_collator([{k: v for k, v in first.items() if k.endswith(("_ids", "_mask")) or k == "labels"}])
        ids = [[t for t, m in zip(row, mask) if m] for row, mask in zip(batch["input_ids"].tolist(),
                                                                       batch["attention_mask"].tolist())]
        if method == "dpo":
            assert first["prompt_ids"] == prompt_ids
            assert first["prompt_ids"] + first["rejected_ids"] == rejected_full
            assert ids == [chosen_full, rejected_full]
            completion = [[t for t, m in zip(row, mask) if m] for row, mask in zip(batch["input_ids"].tolist(),
                                                                                   batch["completion_mask"].tolist())]
            assert completion[0] == chosen_full[len(prompt_ids):]
        elif method == "rm":
            assert first["rejected_ids"] == rejected_full
            assert ids == [chosen_full, rejected_full]
        else:
            labels = [-100] * len(prompt_ids) + chosen_full[len(prompt_ids):]  # the loss on the completion only
            assert first["labels"] == labels
            assert ids == [chosen_full] and batch["labels"][0, :len(labels)].tolist() == labels
        if method == "dpo":  # its evaluation ran before the trainer was built: on the rendered text
            prompt_text = chat.render_prompt(tok, rendering, held["prompt"])
            assert seen["eval_pairs"] == chat.render_pairs(tok, rendering, [held])
            assert seen["length_prompts"] == [prompt_text]


# -- (b) a version sampled through another rendering is refused, unless allowed ------------------------


def test_train_refuses_a_version_sampled_through_another_rendering(tiny_llama, plain_model, tmp_path, monkeypatch):
    """A version whose lineage records a rendering the base model's tokenizer does not give is refused
    in one line naming both and the override (GateFailed, exit 1 on the command line), before any
    weights load; `allow_rendering_mismatch: true` trains, and the card records both renderings."""
    from prefdata.trainers import train

    store = tmp_path / "store"
    ours = expected_rendering(tiny_llama)
    other = {"chat": True, "template_sha256": "ab" * 32, "system": None}  # sampled through another template
    ref = make_version(store, "other", other)
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    out = subprocess.run([sys.executable, "-m", "prefdata", "train", "dpo", ref, "--base-model", str(tiny_llama),
                          "--output-dir", str(tmp_path / "refused")], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "chat template sha256:abababababab" in out.stderr and f"sha256:{ours.template_sha256[:12]}" in out.stderr
    assert "set allow_rendering_mismatch: true in the config to train anyway" in out.stderr
    assert not (tmp_path / "refused").exists()

    no_weights(monkeypatch)
    refusals = [
        (ref, tiny_llama, {}, "chat template sha256:abababababab"),
        # sampled through tiny_llama's template, trained on a base whose tokenizer renders plain text only
        (make_version(store, "chatted", ours.record()), plain_model, {}, "renders it as plain text"),
        # sampled as plain text, the config forcing the chat template on
        (make_version(store, "plain", {"chat": False, "template_sha256": None, "system": None}), tiny_llama,
         {"chat": True}, "was rendered as plain text"),
        # the same template, another system prompt
        (make_version(store, "system", {**ours.record(), "system": "You are terse."}), tiny_llama,
         {"system_prompt": SYSTEM}, "system prompt 'You are terse.'"),
    ]
    for version, base, extra, needle in refusals:
        for method in ("dpo", "grpo"):
            grpo_fields = {"rewards": ["rule:prefdata.world:verify"], "num_generations": 2}
            config = {**QUIET, **extra, **(grpo_fields if method == "grpo" else {})}
            with pytest.raises(GateFailed, match="allow_rendering_mismatch: true") as refused:
                train(method, version, config, store=str(store), base_model=base, output_dir=tmp_path / "x")
            assert needle in str(refused.value) and "\n" not in str(refused.value)
    # chat: true on a tokenizer whose template cannot carry a reply: one line, exit 2 (UnusableInput)
    with pytest.raises(UnusableInput, match="chat: true, but the tokenizer's chat template does not write"):
        train("dpo", make_version(store, "none", None), {**QUIET, "chat": "true"}, store=str(store),
              base_model=plain_model, output_dir=tmp_path / "x")
    monkeypatch.undo()

    result = train("dpo", ref, {**QUIET, "allow_rendering_mismatch": True}, store=str(store), base_model=tiny_llama,
                   output_dir=tmp_path / "allowed")
    assert result.metrics["steps"] == 1
    record = json.loads((result.model_dir / "prefdata_train.json").read_text())
    assert record["dataset"] == ref
    assert record["rendering"] == {**ours.record(), "version_rendering": other}
    assert "allow_rendering_mismatch" in result.card.read_text()
    assert "was sampled as chat template sha256:abababababab" in (result.model_dir / "train.log").read_text()


def test_train_takes_chat_and_system_prompt_from_the_command_line(tiny_llama, tmp_path):
    """`train --chat/--system-prompt` replace the config's: --chat true on a version sampled as plain
    text is refused as the config's chat: true is (without it, auto follows the version and trains), a
    word that is no choice is one line (exit 2), and --system-prompt wins over the config's."""
    from prefdata.trainers import train

    store = tmp_path / "store"
    plain = make_version(store, "plain", {"chat": False, "template_sha256": None, "system": None})
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    command = [sys.executable, "-m", "prefdata", "train", "dpo", plain, "--base-model", str(tiny_llama),
               "--output-dir", str(tmp_path / "refused")]
    for extra, code, needle in ((["--chat", "true"], 1, "was rendered as plain text"),
                                (["--chat", "maybe"], 2, "--chat 'maybe': not one of auto, true, false")):
        out = subprocess.run(command + extra, capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == code, out.stderr[-2000:]
        assert len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr, out.stderr
    assert not (tmp_path / "refused").exists()

    terse = make_version(store, "terse", {**expected_rendering(tiny_llama).record(), "system": "You are terse."})
    config = {**QUIET, "system_prompt": SYSTEM}  # alone, refused: the version was sampled with another
    with pytest.raises(GateFailed, match="system prompt 'You are terse.'"):
        train("sft", terse, config, store=str(store), base_model=tiny_llama, output_dir=tmp_path / "x")
    result = train("sft", terse, config, store=str(store), base_model=tiny_llama, output_dir=tmp_path / "terse",
                   system_prompt="You are terse.")
    assert json.loads((result.model_dir / "prefdata_train.json").read_text())["rendering"]["system"] == "You are terse."


def test_chat_auto_follows_the_version_and_the_card_records_the_rendering(tiny_llama, tmp_path):
    """A version recorded as plain text trains as plain text on a base with a chat template (chat:
    auto follows the version); one that records nothing gets the base's own (auto: the template)."""
    from prefdata.trainers import train

    store = tmp_path / "store"
    plain = {"chat": False, "template_sha256": None, "system": None}
    for name, recorded, expected in (("plain", plain, plain),
                                     ("unrecorded", None, expected_rendering(tiny_llama).record())):
        result = train("sft", make_version(store, name, recorded), QUIET, store=str(store), base_model=tiny_llama,
                       output_dir=tmp_path / name)
        assert json.loads((result.model_dir / "prefdata_train.json").read_text())["rendering"] == expected


# -- (c) lm_batch tokenises as TRL's DPO does -----------------------------------------------------------------


def test_lm_batch_labels_equal_trl_dpo_tokenisation_of_a_chat_rendered_pair(tiny_llama):
    """The batch the evaluation, SFT mixing and PPO's ptx score is TRL's own tokenisation of the rendered
    pair: the same ids, labels on exactly the completion (its one eos included, none added)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from prefdata.models.logprobs import IGNORE, lm_batch, mean_logprobs

    tok = tokenizer_of(tiny_llama)
    rendering = chat.resolve(tok, "auto", SYSTEM)
    rows = [{"prompt": p["prompt"], "chosen": p["chosen"], "rejected": p["rejected"]} for p in PAIRS]
    rendered = chat.render_pairs(tok, rendering, rows)
    args = DPOConfig(output_dir="/tmp/unused", bf16=False, report_to="none", per_device_train_batch_size=2,
                     use_cpu=True, activation_checkpointing=False)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    trainer = DPOTrainer(model=model, ref_model=None, args=args, train_dataset=Dataset.from_list(rendered),
                         processing_class=tok)
    for side in ("chosen", "rejected"):
        batch = lm_batch(tok, [(r["prompt"], r[side]) for r in rendered], "cpu")
        for i, row in enumerate(trainer.train_dataset):
            n = int(batch["attention_mask"][i].sum())
            assert batch["input_ids"][i, :n].tolist() == row["prompt_ids"] + row[f"{side}_ids"]
            assert batch["labels"][i, :n].tolist() == [IGNORE] * len(row["prompt_ids"]) + row[f"{side}_ids"]
            assert row[f"{side}_ids"][-1] == tok.eos_token_id and row[f"{side}_ids"].count(tok.eos_token_id) == 1
    # eos=False (the `lm:` direction scorer) scores the response alone, as given
    plain = lm_batch(tok, [("12+34=", "0046")], "cpu", eos=False)
    assert plain["input_ids"][0].tolist() == chat.encode(tok, "12+34=0046")
    assert plain["labels"][0].tolist() == [IGNORE] * len(chat.encode(tok, "12+34=")) + chat.encode(tok, "12+34=0046")[-4:]
    # and a raw completion gets its eos appended once, as TRL's add_eos does
    raw = lm_batch(tok, [("12+34=", "0046")], "cpu")
    assert raw["input_ids"][0].tolist() == chat.encode(tok, "12+34=0046" + tok.eos_token)
    model.eval()
    with torch.no_grad():
        assert len(mean_logprobs(model, tok, [(r["prompt"], r["chosen"]) for r in rendered])) == len(rendered)


# -- (d) GRPO and PPO generate from rendered prompts; the rule reward reads the original ----------------------


VERIFIER = '''
SEEN = []


def verify(prompt, completion):
    SEEN.append(prompt)
    return float(len(completion) % 2)
'''


def test_grpo_and_ppo_generate_from_rendered_prompts_and_reward_the_original(tiny_llama, tmp_path, monkeypatch, register):
    import importlib

    import prefdata.trainers.grpo as grpo
    import prefdata.trainers.ppo as ppo
    from prefdata.trainers import train

    (tmp_path / "rendering_probe.py").write_text(VERIFIER)
    monkeypatch.syspath_prepend(str(tmp_path))
    register(verifiers={"probe": "rendering_probe:verify"})
    probe = importlib.import_module("rendering_probe")
    tok = tokenizer_of(tiny_llama)
    rendering = expected_rendering(tiny_llama)
    store = tmp_path / "store"
    ref = make_version(store, "chatted", rendering.record())
    originals = {p["prompt"] for p in PAIRS if p["split"] == "train"}
    rendered = {chat.render_prompt(tok, rendering, p): p for p in originals}
    assert not originals & set(rendered)  # the rendered prompts are other text

    handed: list[str] = []  # what TRL handed the reward function as `prompts`: what it generated from
    real_rule = grpo.reward_function  # every reward, a rule's included, by its backend (prefdata.base.specs)

    def spying_rule(spec):
        inner = real_rule(spec)

        def reward(prompts, completions, **kwargs):
            handed.extend(prompts)
            return inner(prompts, completions, **kwargs)

        reward.__name__ = inner.__name__
        return reward

    monkeypatch.setattr(grpo, "reward_function", spying_rule)
    config = {**QUIET, "rewards": ["rule:rendering_probe:verify"], "num_generations": 2, "max_completion_length": 3}
    result = train("grpo", ref, config, store=str(store), base_model=tiny_llama, output_dir=tmp_path / "grpo")
    assert result.metrics["steps"] == 1
    assert handed and set(handed) <= set(rendered)
    assert probe.SEEN and set(probe.SEEN) <= originals  # the verifier parsed the user's prompt, not the template's text
    assert sorted(probe.SEEN) == sorted(rendered[p] for p in handed)

    probe.SEEN.clear()
    generated: list[list[str]] = []
    real_rollout = ppo.rollout

    def spying_rollout(model, value_head, tokenizer, prompts, reward, kl_coef, config, device, texts=None):
        generated.append(list(texts))
        return real_rollout(model, value_head, tokenizer, prompts, reward, kl_coef, config, device, texts)

    monkeypatch.setattr(ppo, "rollout", spying_rollout)
    ppo_config = {**QUIET, "rewards": ["rule:rendering_probe:verify"], "mini_batch_size": 2, "max_new_tokens": 3,
                  "sft_ratio": 0.5}  # the ptx batches: the rendered chosen-only examples
    result = train("ppo", ref, ppo_config, store=str(store), base_model=tiny_llama, output_dir=tmp_path / "ppo")
    assert result.metrics["steps"] == 1 and result.metrics["log"][0]["ptx_loss"] is not None
    [texts] = generated
    assert texts and set(texts) <= set(rendered)
    assert sorted(probe.SEEN) == sorted(rendered[t] for t in texts)


def test_a_reward_model_is_scored_in_the_rendering_its_card_records(tiny_llama, tmp_path):
    """`train rm` records its rendering on the card; RewardModelScorer (the judge's, the rm: scorer's,
    PPO's reward) renders the prompt as the data holds it the same way: its scores are those of the
    rendered text the head was trained on, not of the stored text."""
    from prefdata.models.reward import RewardModelScorer
    from prefdata.trainers import train

    tok = tokenizer_of(tiny_llama)
    rendering = chat.resolve(tok, "auto", SYSTEM)
    store = tmp_path / "store"
    result = train("rm", make_version(store, "chatted", rendering.record()), {**QUIET, "learning_rate": 0.05},
                   store=str(store), base_model=tiny_llama, output_dir=tmp_path / "rm")
    assert json.loads((result.model_dir / "prefdata_train.json").read_text())["rendering"] == rendering.record()
    prompts, replies = [p["prompt"] for p in PAIRS], [p["chosen"] for p in PAIRS]
    texts = [chat.render_example(tok, rendering, p, r) for p, r in zip(prompts, replies)]
    recorded = RewardModelScorer(result.model_dir)
    assert recorded.rendering.record() == rendering.record()
    as_given = RewardModelScorer(result.model_dir, rendering=None)
    assert recorded(prompts, replies) == as_given([p for p, _ in texts], [c for _, c in texts])
    assert recorded(prompts, replies) != as_given(prompts, replies)


def test_grpo_rm_reward_scores_the_original_prompt_through_the_shared_scorer(tiny_reward_model):
    """GRPO's rm:DIR reward is the scorer the checks and PPO use, on the original prompts (raw_prompt),
    not TRL's own path over the policy's rendered text."""
    from prefdata.models.reward import RewardModelScorer
    from prefdata.trainers.rewards import rm_reward

    originals, completions = ["1+1=", "2+2="], ["0002", "0005"]
    rendered = [f"user: {p}\nassistant: " for p in originals]
    reward = rm_reward(str(tiny_reward_model))
    got = reward(rendered, completions, raw_prompt=originals)
    assert got == RewardModelScorer(tiny_reward_model)(originals, completions)
    assert got != RewardModelScorer(tiny_reward_model)(rendered, completions)
