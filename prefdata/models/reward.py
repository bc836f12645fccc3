"""The one reward-model scorer: a sequence-classification model's score of prompt + response.

Used by the reward-model judge (prefdata.collect.judging), the label-direction scorer `rm:PATH`
(prefdata.gate.scoring), the rm plugin's held-out accuracy and PPO's reward (trainers/).

A reward model is scored on the text it was trained on. TRL's RewardTrainer (trl 1.16,
`RewardTrainer._prepare_dataset`) trains on non-chat data as: the completion with the tokenizer's
eos token appended unless it already ends with it, then `prompt + completion`, tokenized with the
tokenizer's own special tokens, right-padded with the pad token (the eos token when there is none),
and the model's `config.pad_token_id` set to it so the score is read at the last non-pad token.
`render` and `__call__` do exactly that, so the eos is appended once, deliberately: a response that
already ends with it is not given a second one.

`prefdata train rm` hands TRL its pairs rendered by prefdata.models.chat (a chat template, or plain
text with a system prompt) and its card (DIR/prefdata_train.json) records that rendering: a scorer
renders each prompt and response the same way (`render_example`, the completion ending with the
eos token) before scoring, so a reward model is scored on the text it was trained on whoever asks
(the judge, the `rm:` scorer, PPO's reward), given the prompt as the data holds it. A reward model
without that record scores prompt + response + eos as above; `rendering=None` takes text that is
rendered already (the rm plugin's own held-out accuracy).

A reward model `prefdata train rm` trained with LoRA keeps its adapter under DIR/adapter. On the
base it was trained on, it can score as a second adapter of a policy's own model (PPO's one shared
base): RewardAdapterScorer, the same rendering and reading, only the forward differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REWARD_ADAPTER = "reward"  # the reward model's adapter on a policy's base (the policy's is PEFT's "default")
RECORDED = "recorded"  # a scorer's rendering: the one the reward model's card records
TRAIN_RECORD = "prefdata_train.json"  # the card `prefdata train` writes beside a model


def recorded_rendering(model_path: str | Path) -> Any:
    """The chat.Rendering the card beside a model (written by `prefdata train`) records; None
    without a card or a rendering in it (a model from elsewhere, or trained before it was recorded)."""
    from prefdata.models.chat import Rendering

    record = Path(model_path) / TRAIN_RECORD
    if not record.is_file():
        return None
    try:
        return Rendering.from_record(json.loads(record.read_text(encoding="utf-8")).get("rendering"))
    except (ValueError, AttributeError):  # an unreadable card records nothing this scorer can use
        return None


def reward_text(prompt: str, response: str, eos: str) -> str:
    """The text TRL's RewardTrainer trains on for one side of a pair: prompt + response + eos, the
    eos appended only when the response does not already end with it."""
    return prompt + (response if not eos or response.endswith(eos) else response + eos)


class RewardModelScorer:
    """A reward-model folder (or hub name), loaded once, frozen; `scorer(prompts, responses)` gives
    one float per pair, in order. `rendering`: RECORDED (the one its card records, see the module
    doc), a chat.Rendering, or None (the text as given, prompt + response + eos)."""

    def __init__(self, model_path: str | Path, device: str = "cpu", batch_size: int = 16, rendering: Any = RECORDED):
        import torch
        from prefdata.models.loading import load_reward_model

        self._set_up(model_path, batch_size, rendering)
        self.model = load_reward_model(model_path, dtype=torch.float32).to(device).eval()
        self.model.requires_grad_(False)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id  # the score is read at the last non-pad token
        self.device = self.model.device

    def _set_up(self, model_path: str | Path, batch_size: int, rendering: Any = RECORDED) -> None:
        """The tokenizer as TRL's preference collator uses it: right padding, pad = eos when it has
        none; and the rendering the text is scored in."""
        from prefdata.models.loading import load_tokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.model_path, self.batch_size = str(model_path), batch_size
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos = self.tokenizer.eos_token or ""
        self.rendering = recorded_rendering(model_path) if isinstance(rendering, str) and rendering == RECORDED else rendering

    def render(self, prompt: str, response: str) -> str:
        """The text TRL's RewardTrainer trains on for this pair: prompt + response + eos (once), the
        prompt and response rendered first when the scorer has a rendering (prefdata.models.chat)."""
        if self.rendering is not None:
            from prefdata.models.chat import render_example

            prompt, response = render_example(self.tokenizer, self.rendering, prompt, response)
        return reward_text(prompt, response, self.eos)

    def __call__(self, prompts: list[str], responses: list[str]) -> list[float]:
        import torch

        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        texts = [self.render(p, r) for p, r in zip(prompts, responses)]
        # Each distinct text is scored once: replies repeat in real data, and the same text must get
        # the same score (a batched GEMM may round two equal rows differently in the last bit, which
        # would turn a tie between identical responses into a win).
        unique = list(dict.fromkeys(texts))
        scored: list[float] = []
        with torch.inference_mode():
            for lo in range(0, len(unique), self.batch_size):
                batch = self.tokenizer(unique[lo:lo + self.batch_size], return_tensors="pt", padding=True,
                                       truncation=True).to(self.device)
                scored += self._scores(batch).float().tolist()
        score_of = dict(zip(unique, scored))
        return [score_of[text] for text in texts]

    def _scores(self, batch):
        """One score per row of a tokenized batch: the sequence-classification head at the last non-pad token."""
        return self.model(**batch).logits[:, 0]


def _same_model(a: str | Path, b: str | Path) -> bool:
    """Two from_pretrained names for the same weights: the same resolved folder, or the same hub id."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    return str(a) == str(b)


def reward_adapter_dir(path: str | Path, base_model: str | Path) -> Path | None:
    """The LoRA adapter of a reward model folder written by `prefdata train rm` (DIR/adapter), when it was
    trained on `base_model` (the base its adapter_config.json names): then it can ride on that base.
    None for a folder without one (use_lora off, a model from elsewhere) or on another base."""
    adapter = Path(path) / "adapter"
    config = adapter / "adapter_config.json"
    if not config.is_file():
        return None
    info = json.loads(config.read_text(encoding="utf-8"))
    if info.get("peft_type") != "LORA" or not info.get("base_model_name_or_path"):
        return None
    return adapter if _same_model(info["base_model_name_or_path"], base_model) else None


class RewardAdapterScorer(RewardModelScorer):
    """The reward model as a second LoRA adapter on a policy's own PEFT model (seed 000's multi-adapter
    design): the adapter's LoRA weights go in as adapter REWARD_ADAPTER, its score head (saved with the
    adapter, TRL's RewardTrainer trains it as modules_to_save) as a frozen linear layer. Scoring switches
    the model to that adapter, reads the backbone's last hidden state at the last non-pad token (as the
    sequence-classification model does) and switches back: the weights are those of the merged reward
    model, so the scores are RewardModelScorer's, without a second copy of the base in memory."""

    def __init__(self, model, path: str | Path, adapter: Path, batch_size: int = 64, rendering: Any = RECORDED):
        import torch
        from peft import LoraConfig, set_peft_model_state_dict
        from safetensors.torch import load_file

        self._set_up(path, batch_size, rendering)
        saved = LoraConfig.from_pretrained(adapter)
        state = load_file(adapter / "adapter_model.safetensors")
        head = [k for k in state if k.endswith("score.weight")]
        if len(head) != 1:
            raise ValueError(f"reward adapter {adapter}: no single score head in adapter_model.safetensors ({head})")
        score = state.pop(head[0]).float()
        state.pop(head[0].replace(".weight", ".bias"), None)  # Llama's score has no bias; others may
        self.policy_adapter = model.active_adapter
        # The same LoRA shape on the causal LM: its layers carry the same module names as the classifier's.
        model.add_adapter(REWARD_ADAPTER, LoraConfig(r=saved.r, lora_alpha=saved.lora_alpha, lora_dropout=0.0,
                                                     target_modules=saved.target_modules, use_rslora=saved.use_rslora,
                                                     task_type="CAUSAL_LM"))
        loaded = set_peft_model_state_dict(model, state, adapter_name=REWARD_ADAPTER)
        missing = [k for k in loaded.missing_keys if f".{REWARD_ADAPTER}." in k]
        if loaded.unexpected_keys or missing:
            raise ValueError(f"reward adapter {adapter} does not fit the policy's base: "
                             f"unexpected {loaded.unexpected_keys[:3]}, missing {missing[:3]}")
        self.model = model
        self._policy_active()
        self.device = next(model.parameters()).device
        self.head = torch.nn.Linear(score.shape[1], score.shape[0], bias=False).to(self.device).requires_grad_(False)
        self.head.weight.data.copy_(score.to(self.device))

    def _policy_active(self) -> None:
        """The policy's adapter active (and trainable, as PEFT leaves it), the reward adapter frozen."""
        self.model.set_adapter(self.policy_adapter)
        for name, param in self.model.named_parameters():
            if f".{REWARD_ADAPTER}." in name:
                param.requires_grad_(False)

    def __call__(self, prompts: list[str], responses: list[str]) -> list[float]:
        was_training = self.model.training
        self.model.eval()
        self.model.base_model.set_adapter(REWARD_ADAPTER, inference_mode=True)
        try:
            return super().__call__(prompts, responses)
        finally:
            self._policy_active()
            self.model.train(was_training)

    def _scores(self, batch):
        import torch

        backbone = self.model.get_base_model()
        backbone = getattr(backbone, backbone.base_model_prefix)  # e.g. LlamaModel: the LoRA layers live in it
        hidden = backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          use_cache=False).last_hidden_state
        ids = batch["input_ids"]
        cols = torch.arange(ids.size(1), device=ids.device)
        last = (cols * (ids != self.tokenizer.pad_token_id)).argmax(-1)  # as LlamaForSequenceClassification pools
        return self.head(hidden[torch.arange(ids.size(0), device=ids.device), last].float())[:, 0]
