"""A run's data as the model reads it: every trainer hands TRL text rendered by prefdata.models.chat.

    training_rendering(cfg, data, tokenizer)  the Rendering the run uses: the config's `chat` and
                                              `system_prompt` on the base model's tokenizer; with
                                              `chat: auto`, the chat on/off and system prompt the
                                              version records. A version recorded otherwise is
                                              refused (GateFailed, exit 1) unless
                                              `allow_rendering_mismatch: true`
    rendered(data, tokenizer, rendering)      a copy of TrainingData whose pairs (train, eval) and
                                              chosen-only examples are rendered text, with the
                                              Renderer that renders the rest (SFT files, prompts)
    as_rendered(cfg, data)                    `data` as rendered; a plugin called without `train`
                                              renders it itself, the same way

The rendered text is what TRL 1.16 takes as non-conversational text and adds nothing to: each pair's
prompt once (the chat template's generation prompt, or the plain prompt), each side's completion
ending with the eos token (render_pairs, render_example). DPO, RM and SFT get it as is; GRPO and PPO
generate from rendered prompts and hand their rule rewards the original prompt; the evaluation, the
SFT mix and PPO's ptx batches read the same rendered examples (prefdata.models.logprobs).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.models.chat import Rendering, chat_mode, render_example, render_pairs, render_prompt, resolve
from prefdata.trainers.data import TrainingData

OVERRIDE = "set allow_rendering_mismatch: true in the config to train anyway"


def training_rendering(cfg: Any, data: TrainingData, tokenizer: Any, method: str = "train") -> Rendering:
    """The rendering this run uses, resolved on the base model's tokenizer (see the module doc).
    A `chat` the tokenizer cannot give (`true` without a template that writes the reply) is
    UnusableInput (exit 2); a version whose recorded rendering differs is GateFailed (exit 1)."""
    recorded = data.rendering
    mode = chat_mode(getattr(cfg, "chat", "auto"))
    system = getattr(cfg, "system_prompt", None)
    follow = recorded is not None and mode == "auto"
    if follow:  # how the version was sampled: its chat on/off, and its system prompt unless the config sets one
        mode = "true" if recorded.chat else "false"
        system = recorded.system if system is None else system
    try:
        rendering = resolve(tokenizer, mode, system)
    except ValueError as exc:
        if not follow:
            raise UnusableInput(f"{method}: {exc}") from None
        # The version was sampled through a chat template this tokenizer lacks: plain text is all it
        # renders, and the difference below says so (or, allowed, it trains on that).
        rendering = resolve(tokenizer, "false", system)
    if recorded is not None and recorded.difference(rendering) is not None and not getattr(cfg, "allow_rendering_mismatch", False):
        base = getattr(cfg, "base_model", None) or "the base model"
        raise GateFailed(f"{method}: {data.ref} was rendered as {recorded.describe()} when it was sampled, but training "
                         f"on {base} renders it as {rendering.describe()} ({rendering.why or 'chat: ' + mode}): the model "
                         f"would be trained on other text than it was sampled on; use the base model the version was "
                         f"sampled with, set chat/system_prompt to match, or {OVERRIDE}")
    return rendering


@dataclass
class Renderer:
    """The one rendering of a run, for the text that is not a version's pair: the prompts GRPO and
    PPO generate from, and the examples of SFT files. A prompt of the version keeps its turns
    (`messages`: prompt -> prompt_messages JSON) wherever it is rendered."""

    tokenizer: Any
    rendering: Rendering
    messages: dict[str, str] = field(default_factory=dict)

    def prompt(self, prompt: str) -> str:
        return render_prompt(self.tokenizer, self.rendering, prompt, self.messages.get(prompt))

    def example(self, prompt: str, completion: str) -> tuple[str, str]:
        """(prompt text, completion text ending with the eos token)."""
        return render_example(self.tokenizer, self.rendering, prompt, completion, self.messages.get(prompt))

    def examples(self, examples: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [self.example(prompt, completion) for prompt, completion in examples]

    def pairs(self, rows: list[dict[str, Any]]) -> list[dict[str, str]]:
        """{prompt, chosen, rejected} as TRL takes them; a row's own prompt_messages first, else the version's."""
        rows = [row if row.get("prompt_messages") is not None or row["prompt"] not in self.messages
                else {**row, "prompt_messages": self.messages[row["prompt"]]} for row in rows]
        return render_pairs(self.tokenizer, self.rendering, rows)


def rendered(data: TrainingData, tokenizer: Any, rendering: Rendering) -> TrainingData:
    """A copy of `data` whose train and eval pairs and chosen-only examples are the rendered text,
    with its Renderer (`renderer`) and the stored text (`source`)."""
    if data.renderer is not None:
        raise ValueError(f"{data.ref} is rendered already")
    renderer = Renderer(tokenizer, rendering, dict(data.messages))
    return replace(data, train=renderer.pairs(data.train), eval=renderer.pairs(data.eval),
                   chosen_sft=renderer.examples(data.chosen_sft), renderer=renderer, source=data)


def as_rendered(cfg: Any, data: TrainingData, method: str = "train") -> TrainingData:
    """`data` rendered for this run: as it is when `train` rendered it already, else rendered here
    with the base model's tokenizer (the same refusals as `train`'s)."""
    if data.renderer is not None:
        return data
    from prefdata.models.loading import load_tokenizer

    tokenizer = load_tokenizer(cfg.base_model)
    return rendered(data, tokenizer, training_rendering(cfg, data, tokenizer, method))


def stored(data: TrainingData) -> TrainingData:
    """The stored (unrendered) text of `data`."""
    return data.source if data.source is not None else data


def prompts_to_render(data: TrainingData) -> list[tuple[str, str]]:
    """(original prompt, rendered prompt) for each distinct training prompt, in the order of the
    original text: what GRPO and PPO generate from (rendered) and hand their rewards (original)."""
    if data.renderer is None:
        raise ValueError(f"{data.ref} is not rendered: call rendered() or as_rendered() first")
    originals = sorted({row["prompt"] for row in stored(data).train})
    return [(prompt, data.renderer.prompt(prompt)) for prompt in originals]


def render_sft(data: TrainingData, examples: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """SFT file examples (prompt, completion) as the model reads them: rendered with the run's
    Renderer when `data` is rendered; as given otherwise."""
    return data.renderer.examples(examples) if data.renderer is not None else examples


def rendering_record(data: TrainingData) -> dict[str, Any] | None:
    """What the card records: the rendering the run used, and the version's when it differs (allowed)."""
    if data.renderer is None:
        return None
    used = data.renderer.rendering
    out: dict[str, Any] = used.record()
    if data.rendering is not None and data.rendering.difference(used) is not None:
        out["version_rendering"] = data.rendering.record()  # trained anyway: allow_rendering_mismatch
    return out
