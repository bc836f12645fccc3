"""The figures a run reports before and after training: preference accuracy on the held-out pairs,
the held-out SFT loss (the alignment tax), the mean greedy response length, and whatever the
configured evaluator measures. Log-probabilities come from prefdata.models.logprobs.

All of it reads the run's rendered text (trainers/rendering.py, prefdata.models.chat): the held-out
pairs and the eval_sft file as TRL gets the training pairs (each completion ending with the eos
token), the length figure generated from the rendered prompts, so the figures measure the model on
the text it is trained and sampled on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from prefdata.base.verdicts import decide
from prefdata.trainers.config import MixConfig
from prefdata.trainers.data import TrainingData, read_sft_file
from prefdata.trainers.rendering import render_sft


def load_evaluator(spec: str | None) -> Callable[[Path], dict[str, float]] | None:
    if not spec:
        return None
    from prefdata.base.registry import load

    return load("evaluator", spec, "evaluator")


def sft_loss(model, tokenizer, examples: list[tuple[str, str]]) -> float:
    """Mean next-token loss of the completions (+ eos, unless rendered with it) given their prompts:
    the held-out SFT loss."""
    from prefdata.models.logprobs import completion_logprobs

    total, count = 0.0, 0
    for logps, mask in completion_logprobs(model, tokenizer, examples):
        total -= (logps * mask).sum().item()
        count += int(mask.sum())
    return total / max(count, 1)


def preference_accuracy(model, tokenizer, pairs: list[dict[str, str]]) -> float | None:
    """Share of held-out pairs where the model gives the chosen completion a higher mean token log-prob
    than the rejected one (seed pitfall 3's sanity check; > 0.6 expected after training)."""
    from prefdata.models.logprobs import mean_logprobs

    if not pairs:
        return None
    chosen = mean_logprobs(model, tokenizer, [(p["prompt"], p["chosen"]) for p in pairs])
    rejected = mean_logprobs(model, tokenizer, [(p["prompt"], p["rejected"]) for p in pairs])
    # the one rule of two scores (prefdata.base.verdicts): equal, NaN or no score is not ranked right
    return sum(decide(c, r).label == "a" for c, r in zip(chosen, rejected)) / len(pairs)


LENGTH_PROMPTS = 128  # held-out prompts generated on for the length figure: enough for a stable mean, cheap


def mean_response_length(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 32) -> float | None:
    """Mean length in tokens of the model's greedy responses to the first LENGTH_PROMPTS held-out
    prompts (rendered: the text the model reads before its reply, tokenised as chat.encode does), up to (not counting) the first EOS, capped at max_new_tokens. Greedy, so the figure is the
    same for the same weights: before and after differ only by what training changed."""
    import torch

    prompts = prompts[:LENGTH_PROMPTS]
    if not prompts or max_new_tokens <= 0:
        return None
    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # every prompt ends where generation starts
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    lengths: list[int] = []
    model.eval()
    try:
        with torch.inference_mode():
            for lo in range(0, len(prompts), batch_size):
                enc = tokenizer(prompts[lo:lo + batch_size], return_tensors="pt", padding=True).to(model.device)
                # Never past the model's context (a tiny model's may be 64 tokens): the cap is then the room left.
                room = (getattr(model.config.get_text_config(), "max_position_embeddings", None) or 1 << 30) - enc["input_ids"].size(1)
                out = model.generate(**enc, do_sample=False, max_new_tokens=max(1, min(max_new_tokens, room)), pad_token_id=pad,
                                     eos_token_id=tokenizer.eos_token_id)
                for row in out[:, enc["input_ids"].size(1):].tolist():
                    ends = [i for i, t in enumerate(row) if t == tokenizer.eos_token_id]
                    lengths.append(ends[0] if ends else len(row))
    finally:
        tokenizer.padding_side = side
    return sum(lengths) / len(lengths)


def evaluate_model(model_dir: Path | str, mix: MixConfig, data: TrainingData) -> dict[str, float]:
    """The figures a run reports before and after: preference accuracy on held-out pairs, held-out SFT
    loss (the alignment tax), and whatever the configured evaluator measures. `data` rendered
    (trainers/rendering.py): its held-out pairs and prompts are the model's input, and the eval_sft
    file is rendered the same way."""
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    metrics: dict[str, float] = {}
    accuracy = preference_accuracy(model, tokenizer, data.eval)
    if accuracy is not None:
        metrics["preference_accuracy"] = accuracy
    length = mean_response_length(model, tokenizer, sorted({p["prompt"] for p in data.eval}), mix.length_max_new_tokens)
    if length is not None:
        metrics["mean_response_length"] = length
    if mix.eval_sft:
        metrics["heldout_sft_loss"] = sft_loss(model, tokenizer, render_sft(data, read_sft_file(mix.eval_sft)))
    del model
    evaluator = load_evaluator(mix.evaluator)
    if evaluator is not None:
        metrics.update(evaluator(Path(model_dir), **(mix.evaluator_kwargs or {})))
    return metrics


def before_after(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    out = {"before": before, "after": after,
           "change": {k: after[k] - before[k] for k in after if k in before and before[k] is not None}}
    if "mean_response_length" in before and "mean_response_length" in after:
        # Also at the top of the card: a run that "wins" by growing its answers shows it at a glance.
        out["mean_response_length"] = {k: out[k]["mean_response_length"] for k in ("before", "after")}
    return out
