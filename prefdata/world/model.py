"""The world's SFT model: a small Llama trained from scratch, and batched greedy evaluation.

Training is a plain loop (nanoGPT style): fixed steps, fixed seed, two threads, completion-only
loss. Evaluation goes through prefdata.models.generation's greedy loop on left-padded batches, the path
every causal LM the library decodes in process takes, so any causal LM can be scored.
"""

from __future__ import annotations

import math
from typing import Callable

from prefdata.world.config import WorldConfig
from prefdata.world.tasks import Example, verify, verify_reverse

TRAIN_THREADS = 2  # the same thread count everywhere, so every machine builds the same model


def new_model(config: WorldConfig, tokenizer):
    """A freshly initialised Llama; the same config always gives the same weights."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=64,  # the longest world sequence is ~20 characters
        tie_word_embeddings=True,  # at this size the embedding is a big share of the parameters
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(llama)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, do_sample=False,
    )
    return model


def _tensors(examples: list[Example], tokenizer):
    """All examples as right-padded (ids, mask, labels); labels score only completion + <eos>.

    Built once, so a training step only indexes rows: building a batch row by row cost 12 ms a step.
    """
    import torch

    prompts = tokenizer([ex.prompt for ex in examples])["input_ids"]  # the post-processor adds <bos>
    completions = tokenizer([ex.completion for ex in examples], add_special_tokens=False)["input_ids"]
    seqs = [p + c + [tokenizer.eos_token_id] for p, c in zip(prompts, completions)]
    width = max(map(len, seqs))
    ids = torch.tensor([seq + [tokenizer.pad_token_id] * (width - len(seq)) for seq in seqs])
    mask = torch.tensor([[1] * len(seq) + [0] * (width - len(seq)) for seq in seqs])
    labels = torch.tensor([
        [-100] * len(p) + seq[len(p):] + [-100] * (width - len(seq)) for p, seq in zip(prompts, seqs)
    ])
    return ids, mask, labels


def train(model, tokenizer, examples: list[Example], config: WorldConfig,
          log: Callable[[int, float], None] | None = None) -> list[float]:
    """Train in place for `config.steps` steps; returns the loss of every step."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(TRAIN_THREADS)
    order = torch.Generator().manual_seed(config.seed)  # the only randomness in the loop: data order
    all_ids, all_mask, all_labels = _tensors(examples, tokenizer)
    # Decay matrices only; norm gains stay free (nanoGPT's split).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=config.lr, betas=(0.9, 0.98),
    )

    def lr_at(step: int) -> float:  # linear warm-up, then cosine down to a tenth of the peak
        if step < config.warmup_steps:
            return config.lr * (step + 1) / config.warmup_steps
        t = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    losses, perm, pos = [], torch.randperm(len(examples), generator=order), 0
    model.train()
    try:
        for step in range(config.steps):
            if pos + config.batch_size > len(perm):  # a new epoch: reshuffle, drop the ragged tail
                perm, pos = torch.randperm(len(examples), generator=order), 0
            rows = perm[pos : pos + config.batch_size]
            pos += config.batch_size
            width = int(all_mask[rows].sum(dim=1).max())  # trim the padding no row in this batch needs
            ids, mask, labels = all_ids[rows, :width], all_mask[rows, :width], all_labels[rows, :width]
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if log is not None:
                log(step, losses[-1])
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return losses


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 250) -> list[str]:
    """Greedy completions, left-padded batches, stopping at the eos token; decoded without special
    tokens (prefdata.models.generation, the loop every in-process policy and judge decodes with)."""
    from prefdata.models.generation import Decoding, generate as generate_rows

    rows = generate_rows(model, tokenizer, prompts, Decoding(max_new_tokens), stops=[tokenizer.eos_token_id],
                         batch_size=batch_size)
    return [row.text for row in rows]


def _accuracy(model, tokenizer, prompts: list[str], check, max_new_tokens: int, batch_size: int) -> float:
    if not prompts:
        raise ValueError("no prompts to score")
    completions = generate(model, tokenizer, prompts, max_new_tokens, batch_size)
    return sum(check(p, c) for p, c in zip(prompts, completions)) / len(prompts)


def task_accuracy(model, tokenizer, prompts: list[str], batch_size: int = 250) -> float:
    """Share of arithmetic prompts answered exactly, greedy."""
    return _accuracy(model, tokenizer, prompts, verify, 8, batch_size)


def general_accuracy(model, tokenizer, prompts: list[str], batch_size: int = 250) -> float:
    """Share of reverse prompts answered exactly, greedy: the alignment-tax meter."""
    return _accuracy(model, tokenizer, prompts, verify_reverse, 10, batch_size)
