"""`template_fit`: the pairs as the trainer will tokenise them (issue 14, item 1; issue 21, item 1).

Users lose training runs to four silent tokenisation faults (trl#4481, trl#1591, axolotl#1616):
a pair cut at `max_length`, a doubled BOS, a rendered text without the EOS the trainer relies on,
and a prompt whose tokens are not a prefix of prompt + response tokens (the DPO loss then masks the
wrong tokens: TRL 1.16 starts the completion where the two token lists diverge, so the end of the
prompt is trained as if it were response, or left out of the context).

Every pair is rendered by prefdata.models.chat, the one rendering that sampling and every trainer
use: the prompt as it was sampled (`render_prompt`), and each side as the trainer hands it to TRL
(`render_example`: the conversation the chat template writes, or the plain prompt and reply, the
completion ending with the eos token), tokenised as TRL tokenises text (`tokenizer(text)`). The
rendering (chat template on or off, a system prompt) is a `chat.Rendering`: `prefdata check` takes
it from `--chat`/`--system-prompt` or from what a version's lineage records, `prefdata train` passes
the one its run uses; none given resolves `chat: auto` on the tokenizer. A conversational row
(`prompt_messages`) keeps its turns.

Because the one rendering drops a BOS the template writes when the tokenizer adds one, and ends
every completion with the eos token, `doubled_bos` and `missing_eos` are now rare (a tokenizer with
no eos token at all, text that itself begins with the BOS); truncation and a prompt whose tokens
merge with the reply's (or that the template writes differently alone than inside the
conversation) remain the common faults.

The check itself is pure (pairs and a loaded tokenizer in, a CheckResult out); `load_tokenizer` is
the one I/O helper, for the command line and the trainers.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .base import CheckResult, default, skip

CHECK_ID = "template_fit"
# Defaults set in checks/checklist.yaml (base.default). max_length: what prefdata's pair trainers (dpo,
# rm, sft: trainers/config.py PairTrainDefaults) cut a pair at when their config says nothing.
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


def _rendering(tokenizer: Any, rendering: Any) -> Any:
    from prefdata.models.chat import resolve

    return rendering if rendering is not None else resolve(tokenizer, "auto")


def render(tokenizer: Any, prompt: str, response: str, prompt_messages: str | None = None,
           rendering: Any = None) -> tuple[str, str]:
    """(the prompt as sampled, prompt + completion as the trainer tokenises it), by the one
    rendering (prefdata.models.chat); `rendering` None: chat auto for this tokenizer."""
    from prefdata.models.chat import render_example, render_prompt

    rendering = _rendering(tokenizer, rendering)
    prompt_text, completion = render_example(tokenizer, rendering, prompt, response, prompt_messages)
    return render_prompt(tokenizer, rendering, prompt, prompt_messages), prompt_text + completion


def _promises_eos(tokenizer: Any, rendering: Any) -> bool:
    """Every completion should end with the eos token: the renderer appends it. Only a tokenizer
    without one breaks that; a chat template then marks a reply's end itself, plain text cannot."""
    return tokenizer.eos_token_id is not None or not rendering.chat


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
                 rendering: Any = None) -> dict[str, list[str]]:
    """pair id -> the problems of that pair (truncated, doubled_bos, missing_eos, prompt_not_prefix);
    pairs without a problem are absent."""
    messages = pairs["prompt_messages"].to_list() if "prompt_messages" in pairs.columns else [None] * pairs.height
    rendering = _rendering(tokenizer, rendering)
    prompts, fulls = [], []
    for prompt, chosen, rejected, turns in zip(pairs["prompt"].to_list(), pairs["chosen"].to_list(),
                                               pairs["rejected"].to_list(), messages, strict=True):
        for response in (chosen, rejected):
            p, f = render(tokenizer, prompt, response, turns, rendering)
            prompts.append(p)
            fulls.append(f)
    prompt_ids, full_ids = _ids(tokenizer, prompts), _ids(tokenizer, fulls)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    promised = _promises_eos(tokenizer, rendering)
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
                       max_offending_share: float = DEFAULT_MAX_OFFENDING_SHARE, rendering: Any = None) -> CheckResult:
    """Share of pairs the trainer would truncate at `max_length` tokens (prompt + the longer
    response) or tokenise with a doubled BOS, without the promised EOS, or with a prompt whose tokens
    are not a prefix of prompt + response; fails above `max_offending_share`. Skips without a
    tokenizer. The trainers call this too, with their base model's tokenizer, max_length and the
    rendering their run uses (a prefdata.models.chat.Rendering; None: chat auto). max_length None: no cut."""
    if tokenizer is None:
        return skip(CHECK_ID, HOW_TO_RUN, max_offending_share)
    if pairs.height == 0:
        return skip(CHECK_ID, "no pairs to render", max_offending_share)
    rendering = _rendering(tokenizer, rendering)
    problems = fit_problems(pairs, tokenizer, max_length, rendering)
    share = len(problems) / pairs.height
    counts = {kind: sum(kind in found for found in problems.values()) for kind in PROBLEMS}
    status = "fail" if share > max_offending_share else "pass"
    template = "chat template" if rendering.chat else "plain concatenation"
    details = {**counts, "max_length": max_length, "template": template, "rendering": rendering.record(),
               "n_offending": len(problems),
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
