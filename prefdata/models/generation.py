"""The one generate loop: rendered prompt texts in, new tokens and their text out, for every causal LM
the library decodes in process (transformers sampling, the in-process judge, the trainers' length
figure, PPO's rollout, the demo world's greedy evaluation).

    Decoding(max_new_tokens, temperature, top_p, top_k, n)   greedy (temperature 0) or sampled; n
                                                              sequences per prompt
    stop_ids(model, tokenizer)                                the ids a reply ends at: the model's
                                                              generation config's (chat checkpoints
                                                              often have several), else the eos token
    generate_batch(model, tokenizer, texts, decoding, stops)  one left-padded batch through one
                                                              `model.generate`: a Batch of the ids
                                                              (prompts + new tokens) and the prompts'
                                                              mask, what PPO scores
    generate(model, tokenizer, texts, decoding, ...)          batches of `batch_size`, one Generated
                                                              per row (prompt 0's n rows first), its
                                                              tokens and text cut at the first stop id

Prompts are tokenised as `chat.encode` tokenises a rendered text (`tokenizer(text)`, special tokens
added) and padded on the left, so each row's last column is its prompt's last token and generation
starts at the same column for all. Rows that stop early are filled with the pad token (the eos when
the tokenizer has none) after their stop id.

Randomness: `generate(seed=S)` seeds torch's global RNG once, before the first batch, so the same
texts, decoding, seed and batch_size give the same tokens (another batch_size draws them in another
order); `seed=None` leaves the RNG as it is (greedy callers, and PPO, whose trainer seeds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Decoding:
    """How each next token is chosen. temperature 0 is greedy (top_p and top_k unused); top_k 0 is
    off (given explicitly: transformers would otherwise apply its default of 50)."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1  # sequences per prompt (num_return_sequences)

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.n < 1:
            raise ValueError(f"Decoding: max_new_tokens={self.max_new_tokens} and n={self.n} must be >= 1, "
                             f"temperature={self.temperature} >= 0, top_p={self.top_p} in (0, 1], top_k={self.top_k} >= 0")

    @property
    def sampled(self) -> bool:
        return self.temperature > 0


@dataclass
class Batch:
    """One `model.generate` call's result. `ids`: [rows, width + new], each prompt left-padded to
    `width` columns, repeated n times in a row, then its new tokens; `prompt_mask`: [prompts, width]."""

    ids: Any
    prompt_mask: Any
    width: int

    @property
    def new_ids(self):
        return self.ids[:, self.width:]


@dataclass(frozen=True)
class Generated:
    """One row: its new tokens up to (not including) the first stop id, their text (special tokens
    skipped), and why it ended: "stop" (a stop id) or "length" (max_new_tokens)."""

    tokens: list[int]
    text: str
    finish: str


def stop_ids(model, tokenizer) -> list[int]:
    """The ids a reply ends at: the model's generation config's eos ids (Llama 3 ends turns with
    <|eot_id|> as well as <|end_of_text|>), else the tokenizer's eos token."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = eos if eos is not None else tokenizer.eos_token_id
    return sorted(set(eos if isinstance(eos, list) else [eos]) - {None})


def _pad_id(tokenizer) -> int | None:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def generate_batch(model, tokenizer, texts: list[str], decoding: Decoding, stops: list[int] | None = None,
                   device=None, within_context: bool = False) -> Batch:
    """One left-padded batch of rendered prompt texts through `model.generate`, no gradients.
    `stops`: the ids a row ends at (default `stop_ids`; an empty list, a model with none known, leaves
    them to the model's generation config, as transformers does); `device`: where the inputs go (default the
    model's); `within_context`: never generate past the model's context (max_position_embeddings,
    a tiny model's may be 64): max_new_tokens becomes the room left, at least one token."""
    import torch
    from transformers import GenerationConfig

    stops = stop_ids(model, tokenizer) if stops is None else list(stops)
    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # every prompt ends where generation starts
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True)  # = chat.encode(tokenizer, text), left-padded
    finally:
        tokenizer.padding_side = side
    enc = enc.to(device if device is not None else model.device)
    width = enc["input_ids"].size(1)
    new = decoding.max_new_tokens
    if within_context:
        context = getattr(model.config.get_text_config(), "max_position_embeddings", None) or 1 << 30
        new = max(1, min(new, context - width))
    # Only what is set here counts; the model's generation config fills the rest (transformers'
    # priority), as the keyword arguments each caller passed before did.
    settings = dict(do_sample=decoding.sampled, max_new_tokens=new, num_return_sequences=decoding.n,
                    pad_token_id=_pad_id(tokenizer), eos_token_id=stops or None)
    if decoding.sampled:
        settings.update(temperature=decoding.temperature, top_p=decoding.top_p, top_k=decoding.top_k)
    config = GenerationConfig(**{k: v for k, v in settings.items() if v is not None})
    # no_grad, not inference_mode: PPO trains on the returned ids (an inference tensor cannot be saved for backward)
    with torch.no_grad():
        ids = model.generate(**enc, generation_config=config)
    return Batch(ids, enc["attention_mask"], width)


def generate(model, tokenizer, texts: list[str], decoding: Decoding, stops: list[int] | None = None,
             seed: int | None = None, batch_size: int | None = None, device=None,
             within_context: bool = False) -> list[Generated]:
    """`texts` (rendered prompts) in batches of `batch_size` (None: one batch), n rows per prompt in
    order; `seed`: torch's global RNG seeded once first (None: left as it is). See `generate_batch`."""
    import torch

    stops = stop_ids(model, tokenizer) if stops is None else list(stops)
    if seed is not None:
        torch.manual_seed(seed)
    size = batch_size or max(len(texts), 1)
    out: list[Generated] = []
    for start in range(0, len(texts), size):
        batch = generate_batch(model, tokenizer, texts[start:start + size], decoding, stops, device, within_context)
        for tokens in batch.new_ids.tolist():
            # A row that stopped early is padded after its stop id: cut there, not at the first pad.
            end = next((k for k, t in enumerate(tokens) if t in stops), None)
            kept = tokens[:end]
            out.append(Generated(kept, tokenizer.decode(kept, skip_special_tokens=True),
                                 "stop" if end is not None else "length"))
    return out
