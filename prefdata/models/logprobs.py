"""Sequence log-probabilities of responses under a causal LM: the one implementation.

    logprobs_from_logits(logits, tokens)    log p of each given token, [B, T, V] -> [B, T] (PPO's
                                            rollout and update read it on response positions)
    shifted_logprobs(logits, labels)        each labelled token's log p given what precedes it, and
                                            the mask of labelled positions (labels -100 elsewhere)
    lm_batch(tokenizer, examples, device)   prompt + response (+ eos), tokenised as TRL tokenises a
                                            prompt-completion example, right-padded, labels only on
                                            the response: the batch the two above read, and the
                                            batch of the SFT (ptx) loss
    completion_logprobs / mean_logprobs     a model run over (prompt, response) pairs in batches

Used by the label-direction scorer `lm:PATH` (prefdata.gate.scoring), the trainers' evaluation
(preference accuracy, held-out SFT loss), their SFT mixing and PPO. The trainers hand it text
rendered by prefdata.models.chat (a completion that already ends with the eos token), so what is
scored here is what TRL trains on. torch is imported on use: `prefdata --help` never loads it.
"""

from __future__ import annotations

IGNORE = -100  # the label of a position that is not scored: the prompt and the padding


def logprobs_from_logits(logits, tokens):
    """log softmax(logits)[token]: the log-probability of each taken token, in float32, [B, T, V] -> [B, T]."""
    import torch

    return torch.gather(torch.log_softmax(logits.float(), dim=-1), -1, tokens.unsqueeze(-1)).squeeze(-1)


def shifted_logprobs(logits, labels):
    """(log p(labels[t+1] | x<=t) [B, T-1], the mask of labelled positions): logits [B, T, V] of the
    model on the whole sequence, labels [B, T] with IGNORE where nothing is scored."""
    labels = labels[:, 1:]
    return logprobs_from_logits(logits[:, :-1], labels.clamp(min=0)), labels != IGNORE


def mean_logprob(logps, mask):
    """Each row's mean log-prob over its masked positions ([B, T] -> [B]); 0 for a row with none."""
    return (logps * mask).sum(1) / mask.sum(1).clamp(min=1)


def common_prefix_length(ids: list[int], other: list[int]) -> int:
    """How many leading tokens two token lists share (TRL 1.16's `common_prefix_length`)."""
    n = 0
    for a, b in zip(ids, other):
        if a != b:
            break
        n += 1
    return n


def lm_batch(tokenizer, examples: list[tuple[str, str]], device, eos: bool = True) -> dict:
    """prompt + response (+ eos), right-padded, labels IGNORE on the prompt and the padding.

    Tokenised as TRL 1.16 tokenises a non-conversational prompt-completion example (DPO, SFT): with
    `eos` the eos token's text is appended to a response that does not already end with it (TRL's
    `add_eos`; a response rendered by prefdata.models.chat ends with it, so nothing is added), then
    prompt ids = `tokenizer(prompt)`, full ids = `tokenizer(prompt + response)`, special tokens added
    to both (prefdata.models.chat.encode), and the response is the full ids after their common prefix
    with the prompt ids. A response of no tokens (empty, without eos) is scored as one pad token, so
    every row has a log-prob."""
    import torch

    from prefdata.models.chat import encode

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    eos_text = (tokenizer.eos_token or "") if eos else ""
    rows = []
    for prompt, response in examples:
        if eos_text and not response.endswith(eos_text):
            response = response + eos_text
        p, full = encode(tokenizer, prompt), encode(tokenizer, prompt + response)
        n = common_prefix_length(p, full)
        r = full[n:] or [pad]
        rows.append((full[:n] + r, [IGNORE] * n + r))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r, _ in rows], device=device)
    labels = torch.tensor([lab + [IGNORE] * (width - len(lab)) for _, lab in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r, _ in rows], device=device)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def completion_logprobs(model, tokenizer, examples: list[tuple[str, str]], batch_size: int = 32, eos: bool = True):
    """Per batch of `examples` (prompt, response): (each response token's log-prob given what precedes
    it, the mask of response tokens), the model in eval mode, without gradients."""
    import torch

    model.eval()
    with torch.inference_mode():
        for lo in range(0, len(examples), batch_size):
            batch = lm_batch(tokenizer, examples[lo:lo + batch_size], model.device, eos)
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            yield shifted_logprobs(logits, batch["labels"])


def mean_logprobs(model, tokenizer, examples: list[tuple[str, str]], batch_size: int = 32, eos: bool = True) -> list[float]:
    """Each response's mean token log-prob given its prompt."""
    out: list[float] = []
    for logps, mask in completion_logprobs(model, tokenizer, examples, batch_size, eos):
        out += mean_logprob(logps, mask).tolist()
    return out
