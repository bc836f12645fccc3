"""One chat rendering: how a prompt (and a response) becomes the text a model reads, everywhere.

Sampling, the in-process LLM judge, the `template_fit` check, the trainers' data (SFT, RM, DPO,
GRPO, PPO), their evaluation and SFT mixing all call this module, so the tokens a policy was sampled
on are the tokens it is trained and checked on.

    resolve(tokenizer, chat, system)        a Rendering: chat template on or off (`chat`: auto, true,
                                            false), the template's sha256, the system prompt
    render_prompt(tokenizer, r, prompt)     the prompt as model input, ending where the reply starts
    render_example(tokenizer, r, p, reply)  (prompt text, completion text): the completion ends with
                                            the eos token, so the trainers' TRL adds nothing to it
    encode(tokenizer, text)                 the one tokenisation of a rendered text

A prompt is plain text or a list of `{role, content}` messages (TRL's conversational format; in a
record, the JSON of its `prompt_messages` column). With the chat template on, the messages go through
`tokenizer.apply_chat_template` as TRL 1.16 applies it (`add_generation_prompt=True` for the prompt,
the whole conversation for prompt + reply); off, the text is the prompt as given (a message list: its
contents joined by a blank line; a system prompt: before it, then a blank line).

Every rendered text is tokenised as TRL tokenises a non-conversational example, `tokenizer(text)`,
special tokens added. A template that writes the BOS itself would then get a second one from the
tokenizer (the "chat template and tokenization don't compose" gotcha), so a leading BOS written by
the template is dropped from the text when the tokenizer adds one: one BOS either way.

`chat: auto` turns the template on when the tokenizer has one that renders the assistant's turn. A
template that drops it (the demo world's, which shows its 1M-parameter models the user's text only)
cannot be trained through: auto renders plain text there, and `chat: true` is refused.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass, field
from typing import Any

CHAT_MODES = ("auto", "true", "false")
_PROBE_REPLY = "prefdata-probe-reply-7f3a"  # a reply no template writes by itself
_PROBE = [{"role": "user", "content": "prefdata-probe-prompt"}, {"role": "assistant", "content": _PROBE_REPLY}]


@dataclass(frozen=True)
class Rendering:
    """How prompts became model input: what a draft version's lineage and card record, and what
    `train` compares with its base model's."""

    chat: bool
    template_sha256: str | None = None
    system: str | None = None
    why: str = field(default="", compare=False)  # how `chat` was decided: for messages, not part of its identity

    def record(self) -> dict[str, Any]:
        return {"chat": self.chat, "template_sha256": self.template_sha256, "system": self.system}

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> Rendering | None:
        if not isinstance(record, dict) or "chat" not in record:
            return None
        return cls(bool(record["chat"]), record.get("template_sha256"), record.get("system"))

    def describe(self) -> str:
        if not self.chat:
            text = "plain text"
        else:
            text = f"chat template sha256:{(self.template_sha256 or '?')[:12]}"
        return text + (f", system prompt {self.system!r}" if self.system else "")

    def difference(self, other: Rendering) -> str | None:
        """None when both render alike; else what differs, in words."""
        if self.record() == other.record():
            return None
        return f"{self.describe()} against {other.describe()}"


def chat_mode(value: Any) -> str:
    """`chat` as given in a config, an option or a flow parameter (auto, true, false, or a bool)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip().lower() if value is not None else "auto"
    aliases = {"yes": "true", "on": "true", "1": "true", "no": "false", "off": "false", "0": "false"}
    text = aliases.get(text, text)
    if text not in CHAT_MODES:
        raise ValueError(f"chat: {value!r} is not one of auto, true, false")
    return text


def template_sha256(tokenizer: Any) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _renders_replies(tokenizer: Any) -> bool:
    """The template writes the assistant's turn (some write only what the user said)."""
    try:
        return _PROBE_REPLY in tokenizer.apply_chat_template(_PROBE, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that fails on a plain user/assistant exchange renders nothing usable
        return False


def resolve(tokenizer: Any, chat: Any = "auto", system: str | None = None, replies: bool = True) -> Rendering:
    """The rendering for this tokenizer. `replies`: the rendering must carry an assistant's reply
    (training, template_fit); a judge, which only reads prompts, passes False. `chat: true` with no
    usable template is a ValueError (one line, with the fix)."""
    mode = chat_mode(chat)
    system = system or None
    sha = template_sha256(tokenizer)
    if mode == "false":
        return Rendering(False, None, system, "chat: false")
    if sha is None:
        if mode == "true":
            raise ValueError("chat: true, but the tokenizer has no chat template: give a chat (instruct) model's "
                             "tokenizer, or set chat to false (plain text) or auto")
        return Rendering(False, None, system, "the tokenizer has no chat template")
    if replies and not _renders_replies(tokenizer):
        if mode == "true":
            raise ValueError("chat: true, but the tokenizer's chat template does not write the assistant's turn, so "
                             "no reply can be trained through it: set chat to false (plain text) or auto")
        return Rendering(False, None, system, "the chat template does not write the assistant's turn")
    return Rendering(True, sha, system, "the tokenizer's chat template" + (" (chat: true)" if mode == "true" else ""))


def turns(prompt: str | list[dict[str, str]], system: str | None = None,
          prompt_messages: str | list | None = None) -> list[dict[str, str]]:
    """The prompt as messages: `prompt_messages` (a list or its JSON) when given, a message list as
    it is, else one user turn; `system` goes first unless the messages have a system turn already."""
    messages = prompt_messages if prompt_messages is not None else prompt
    if isinstance(messages, str) and prompt_messages is not None:
        messages = json.loads(messages)
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    if system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system}, *messages]
    return messages


def _plain(messages: list[dict[str, str]]) -> str:
    return "\n\n".join(m["content"] for m in messages)


_ADDS_BOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> whether tokenizing adds a BOS


def _adds_bos(tokenizer: Any) -> bool:
    try:
        return _ADDS_BOS[tokenizer]
    except (KeyError, TypeError):
        pass
    bos = getattr(tokenizer, "bos_token_id", None)
    ids = tokenizer("a")["input_ids"] if bos is not None else []
    adds = bool(ids) and ids[0] == bos
    try:
        _ADDS_BOS[tokenizer] = adds
    except TypeError:  # not weakly referenceable: asked again next time
        pass
    return adds


def _one_bos(tokenizer: Any, text: str) -> str:
    """The template's text without its leading BOS when tokenizing adds one (see the module doc)."""
    bos = getattr(tokenizer, "bos_token", None)
    if bos and text.startswith(bos) and _adds_bos(tokenizer):
        return text[len(bos):]
    return text


def render_prompt(tokenizer: Any, rendering: Rendering, prompt: str | list[dict[str, str]],
                  prompt_messages: str | list | None = None) -> str:
    """The prompt as the model reads it before its reply (tokenise it with `encode`)."""
    messages = turns(prompt, rendering.system, prompt_messages)
    if not rendering.chat:
        return _plain(messages)
    return _one_bos(tokenizer, tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def render_conversation(tokenizer: Any, rendering: Rendering, prompt: str | list[dict[str, str]], reply: str,
                        prompt_messages: str | list | None = None) -> tuple[str, str]:
    """(prompt text, prompt + reply text) as the template writes them, before the reply's end is
    settled: what `template_fit` tokenises to find a prompt that is not a prefix of its conversation."""
    prompt_text = render_prompt(tokenizer, rendering, prompt, prompt_messages)
    if not rendering.chat:
        return prompt_text, prompt_text + reply
    messages = turns(prompt, rendering.system, prompt_messages) + [{"role": "assistant", "content": reply}]
    return prompt_text, _one_bos(tokenizer, tokenizer.apply_chat_template(messages, tokenize=False))


def _ending_with_eos(tokenizer: Any, completion: str) -> str:
    """The completion ends with the eos token: after it, only whitespace the template writes between
    turns is cut; without it, it is appended (as TRL appends it to non-conversational text)."""
    eos = getattr(tokenizer, "eos_token", None) or ""
    if not eos:
        return completion
    stripped = completion.rstrip()
    if stripped.endswith(eos):
        return stripped
    return completion + eos


def render_example(tokenizer: Any, rendering: Rendering, prompt: str | list[dict[str, str]], reply: str,
                   prompt_messages: str | list | None = None) -> tuple[str, str]:
    """(prompt text, completion text) for training: prompt + completion is the conversation the
    template writes (or the plain prompt and reply), and the completion ends with the eos token.
    When the template writes the prompt differently inside the conversation than alone, the
    conversation's own prompt is used (template_fit reports such pairs as prompt_not_prefix)."""
    prompt_text, full = render_conversation(tokenizer, rendering, prompt, reply, prompt_messages)
    if not full.startswith(prompt_text):
        shared = 0
        for a, b in zip(prompt_text, full):
            if a != b:
                break
            shared += 1
        prompt_text = full[:shared]
    return prompt_text, _ending_with_eos(tokenizer, full[len(prompt_text):])


def render_pairs(tokenizer: Any, rendering: Rendering, pairs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """{prompt, chosen, rejected} rows as text a TRL trainer takes without templating or adding
    anything (the prompt rendered once, each side's completion ending with eos)."""
    out = []
    for row in pairs:
        turns_json = row.get("prompt_messages")
        prompt, chosen = render_example(tokenizer, rendering, row["prompt"], row["chosen"], turns_json)
        _, rejected = render_example(tokenizer, rendering, row["prompt"], row["rejected"], turns_json)
        out.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return out


def encode(tokenizer: Any, text: str | list[str]) -> list[int] | list[list[int]]:
    """The token ids of rendered text, as every TRL trainer takes non-conversational text
    (`tokenizer(text)`, its special tokens added)."""
    return tokenizer(text)["input_ids"]
