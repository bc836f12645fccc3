"""`template_fit`: the pairs as the trainer will tokenise them (issue 14, item 1).

Users lose training runs to four silent tokenisation faults (trl#4481, trl#1591, axolotl#1616):
a pair cut at `max_length`, a doubled BOS, a rendered text without the EOS the chat template
promises, and a prompt whose tokens are not a prefix of prompt + response tokens (the DPO loss then
masks the wrong tokens: TRL 1.16 starts the completion where the two token lists diverge, so the
end of the prompt is trained as if it were response, or left out of the context).

Rendering mirrors TRL 1.16 (trl/data_utils.py `apply_chat_template`/`maybe_apply_chat_template` and
trl/trainer/dpo_trainer.py `_prepare_dataset`):

* a tokenizer with a chat template renders the prompt with `add_generation_prompt=True` and the
  prompt + response as the whole conversation, both as text (`tokenize=False`); a plain row becomes
  one user turn and one assistant turn, a conversational row (`prompt_messages`) keeps its turns;
* the texts are then tokenised as TRL tokenises a non-conversational example: `tokenizer(text)`,
  special tokens added. That is what prefdata's trainers do (they hand TRL text), and it is where a
  template that writes `bos_token` itself gets a second BOS from the tokenizer (the "chat template
  and tokenization don't compose" gotcha TRL cites beside its `_tokenize`);
* without a chat template the texts are plain concatenations and TRL appends `eos_token` to a
  response that does not end with it (`add_eos`), so the EOS is "promised" there too.

`chat_template=False` renders every row as plain concatenation whatever the tokenizer has: that is
what TRL 1.16 does with the plain strings prefdata's trainers hand it (`is_conversational` is false
for a string prompt, so no template is applied), and how `prefdata train` calls the check.

The check itself is pure (pairs and a loaded tokenizer in, a CheckResult out); `load_tokenizer` is
the one I/O helper, for the command line and the trainers.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from .base import CheckResult, default, skip

CHECK_ID = "template_fit"
# Defaults set in checks/checklist.yaml (base.default). max_length: TRL 1.16's DPOConfig.max_length
# default (1024), what a pair is cut at when the config says nothing.
DEFAULT_MAX_LENGTH = default(CHECK_ID, "max_length")
# A pair the trainer mangles is a silent bug, not noise to tolerate: by default none may offend.
DEFAULT_MAX_OFFENDING_SHARE = default(CHECK_ID, "max_offending_share")
BATCH = 1024  # texts per tokenizer call: a fast tokenizer parallelises inside a batch
PROBLEMS = ("truncated", "doubled_bos", "missing_eos", "prompt_not_prefix")  # a pair's problems, in this order
HOW_TO_RUN = "no tokenizer given: run `prefdata check DATA --tokenizer MODEL_DIR [--max-length N]`"


def load_tokenizer(path: str) -> Any:
    """The tokenizer a trainer would load from `path` (a model folder or hub name, offline as the
    environment says); a path that has none raises ValueError with one line."""
    from prefdata.models.loading import load_tokenizer as load_model_tokenizer

    try:
        return load_model_tokenizer(str(path))
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for a bad folder
        raise ValueError(f"{path}: cannot load a tokenizer ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                         "give a model folder saved with save_pretrained") from None


def _messages(prompt: str, prompt_messages: str | None) -> list[dict[str, str]]:
    if prompt_messages:
        turns = json.loads(prompt_messages)
        if isinstance(turns, list) and turns:
            return turns
    return [{"role": "user", "content": prompt}]


def _templated(tokenizer: Any, chat_template: bool) -> bool:
    return bool(chat_template and getattr(tokenizer, "chat_template", None))


def render(tokenizer: Any, prompt: str, response: str, prompt_messages: str | None = None,
           chat_template: bool = True) -> tuple[str, str]:
    """(prompt text, prompt + response text) as the trainer will tokenise them (see the module doc);
    `chat_template=False`: plain concatenation even when the tokenizer has a template."""
    if _templated(tokenizer, chat_template):
        turns = _messages(prompt, prompt_messages)
        prompt_text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        full_text = tokenizer.apply_chat_template(turns + [{"role": "assistant", "content": response}], tokenize=False)
        return prompt_text, full_text
    eos = tokenizer.eos_token or ""
    return prompt, prompt + (response if response.endswith(eos) else response + eos)


def _promises_eos(tokenizer: Any, chat_template: bool = True) -> bool:
    """A template promises EOS when it writes `eos_token`; plain concatenation always does (TRL adds it)."""
    if not _templated(tokenizer, chat_template):
        return True
    template = tokenizer.chat_template
    return isinstance(template, str) and "eos_token" in template


def _ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    out: list[list[int]] = []
    for start in range(0, len(texts), BATCH):
        out.extend(tokenizer(texts[start:start + BATCH])["input_ids"])
    return out


def _ends_with(ids: list[int], token: int | None, is_space: Any) -> bool:
    """The last token that is not whitespace is `token` (templates end a turn with "\\n" after EOS)."""
    if token is None:
        return False
    for t in reversed(ids):
        if t == token or not is_space(t):
            return t == token
    return False


def fit_problems(pairs: pl.DataFrame, tokenizer: Any, max_length: int | None = DEFAULT_MAX_LENGTH,
                 chat_template: bool = True) -> dict[str, list[str]]:
    """pair id -> the problems of that pair (truncated, doubled_bos, missing_eos, prompt_not_prefix);
    pairs without a problem are absent."""
    messages = pairs["prompt_messages"].to_list() if "prompt_messages" in pairs.columns else [None] * pairs.height
    prompts, fulls = [], []
    for prompt, chosen, rejected, turns in zip(pairs["prompt"].to_list(), pairs["chosen"].to_list(),
                                               pairs["rejected"].to_list(), messages, strict=True):
        for response in (chosen, rejected):
            p, f = render(tokenizer, prompt, response, turns, chat_template)
            prompts.append(p)
            fulls.append(f)
    prompt_ids, full_ids = _ids(tokenizer, prompts), _ids(tokenizer, fulls)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    promised = _promises_eos(tokenizer, chat_template)
    spaces: dict[int, bool] = {}

    def is_space(token: int) -> bool:
        if token not in spaces:
            spaces[token] = tokenizer.decode([token]).strip() == ""
        return spaces[token]

    problems: dict[str, list[str]] = {}
    ids = pairs["id"].to_list() if "id" in pairs.columns else list(range(pairs.height))  # a trainer's rows: by index
    for row, pair_id in enumerate(ids):
        found: list[str] = []
        sides = (2 * row, 2 * row + 1)
        if max_length is not None and max(len(full_ids[k]) for k in sides) > max_length:
            found.append("truncated")
        if bos is not None and any(full_ids[k][:2] == [bos, bos] for k in sides):
            found.append("doubled_bos")
        if promised and not all(_ends_with(full_ids[k], eos, is_space) for k in sides):
            found.append("missing_eos")
        if any(full_ids[k][:len(prompt_ids[k])] != prompt_ids[k] for k in sides):
            found.append("prompt_not_prefix")
        if found:
            problems[str(pair_id)] = found
    return problems


def check_template_fit(pairs: pl.DataFrame, tokenizer: Any = None, max_length: int | None = DEFAULT_MAX_LENGTH,
                       max_offending_share: float = DEFAULT_MAX_OFFENDING_SHARE, chat_template: bool = True) -> CheckResult:
    """Share of pairs the trainer would truncate at `max_length` tokens (prompt + the longer
    response) or tokenise with a doubled BOS, without the promised EOS, or with a prompt whose tokens
    are not a prefix of prompt + response; fails above `max_offending_share`. Skips without a
    tokenizer. The trainers call this too, with their base model's tokenizer and max_length, and
    `chat_template=False` (they hand TRL plain text; see the module doc). max_length None: no cut."""
    if tokenizer is None:
        return skip(CHECK_ID, HOW_TO_RUN, max_offending_share)
    if pairs.height == 0:
        return skip(CHECK_ID, "no pairs to render", max_offending_share)
    problems = fit_problems(pairs, tokenizer, max_length, chat_template)
    share = len(problems) / pairs.height
    counts = {kind: sum(kind in found for found in problems.values()) for kind in PROBLEMS}
    status = "fail" if share > max_offending_share else "pass"
    template = "chat template" if _templated(tokenizer, chat_template) else "plain concatenation"
    details = {**counts, "max_length": max_length, "template": template, "n_offending": len(problems),
               "problems": dict(list(problems.items())[:20])}
    return CheckResult(CHECK_ID, status, metric=share, threshold=max_offending_share, offending=tuple(problems),
                       message=fit_message(details, len(problems), pairs.height, max_offending_share), details=details)


def fit_message(details: dict[str, Any], n_offending: int, n_rows: int, threshold: float) -> str:
    """`check_template_fit`'s message from its details (the count of each PROBLEMS kind, `template`,
    `max_length`) and the number of offending pairs and of pairs (`threshold` is not shown). A pure
    function of counts, so the shard-by-shard run (checks/batched.py) builds it from merged details."""
    named = ", ".join(f"{details[kind]} {kind}" for kind in PROBLEMS if details[kind]) or "none"
    return (f"{n_offending} of {n_rows} pairs would not reach the trainer intact ({named}); "
            f"rendered with the tokenizer's {details['template']}, max_length {details['max_length']}")
