"""The one reward-model scorer: a sequence-classification model's score of prompt + response.

Used by the reward-model judge (prefdata.collect.judging), the label-direction scorer `rm:PATH`
(prefdata.gate.scoring), and meant for PPO's reward and the rm plugin's held-out accuracy (trainers/).

A reward model is scored on the text it was trained on. TRL's RewardTrainer (trl 1.16,
`RewardTrainer._prepare_dataset`) trains on non-chat data as: the completion with the tokenizer's
eos token appended unless it already ends with it, then `prompt + completion`, tokenized with the
tokenizer's own special tokens, right-padded with the pad token (the eos token when there is none),
and the model's `config.pad_token_id` set to it so the score is read at the last non-pad token.
`render` and `__call__` do exactly that, so the eos is appended once, deliberately: a response that
already ends with it is not given a second one.
"""

from __future__ import annotations

from pathlib import Path


def reward_text(prompt: str, response: str, eos: str) -> str:
    """The text TRL's RewardTrainer trains on for one side of a pair: prompt + response + eos, the
    eos appended only when the response does not already end with it. Also for a scorer that holds
    the reward model some other way (PPO's reward adapter on the policy's base)."""
    return prompt + (response if not eos or response.endswith(eos) else response + eos)


class RewardModelScorer:
    """A reward-model folder (or hub name), loaded once, frozen; `scorer(prompts, responses)` gives
    one float per pair, in order."""

    def __init__(self, model_path: str | Path, device: str = "cpu", batch_size: int = 16):
        import torch
        from prefdata.models.loading import load_reward_model, load_tokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.model_path, self.batch_size = str(model_path), batch_size
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "right"  # TRL's preference collator pads on the right
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = load_reward_model(model_path, dtype=torch.float32).to(device).eval()
        self.model.requires_grad_(False)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id  # the score is read at the last non-pad token
        self.eos = self.tokenizer.eos_token or ""

    def render(self, prompt: str, response: str) -> str:
        """The text TRL's RewardTrainer trains on for this pair: prompt + response + eos (once)."""
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
                                       truncation=True).to(self.model.device)
                scored += self.model(**batch).logits[:, 0].float().tolist()
        score_of = dict(zip(unique, scored))
        return [score_of[text] for text in texts]
