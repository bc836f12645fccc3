"""The ptx term: next-token loss on a batch of SFT examples, added to the preference loss each step.

Seed pitfall 6 and checklist item 11: preference training taxes skills the pairs never touch. TRL's
DPO `sft` loss term only trains on the chosen answers, which protects the task; protecting a general
skill needs that skill's own SFT data in the mix (measured on the demo world: chosen-only mixing
kept the task but the general skill fell to 0.34; general SFT examples in the mix kept it at 0.99).
`with_sft_mix(TrainerClass)` adds the term to any TRL trainer (DPO, GRPO) and logs it as `sft_loss`;
`sft_pool` and `sft_batch_size` say what is mixed in and how much per step. The examples are the
run's rendered text (trainers/rendering.py, prefdata.models.chat): the chosen-only subset as the
rendered version carries it, the general file rendered the same way, each completion ending with
the eos token, and prefdata.models.logprobs tokenises them as TRL tokenises the pairs.
"""

from __future__ import annotations

import math
import random

from prefdata.base.errors import UnusableInput
from prefdata.models.logprobs import lm_batch
from prefdata.trainers.config import MixConfig
from prefdata.trainers.data import TrainingData, read_sft_file
from prefdata.trainers.rendering import render_sft


def sft_pool(mix: MixConfig, data: TrainingData) -> list[tuple[str, str]]:
    """The SFT examples mixed into preference training, from the configured sources, rendered as
    `data` is (the chosen-only subset of a rendered version is rendered already)."""
    unknown = set(mix.sft_sources) - {"chosen", "general"}
    if unknown:
        raise UnusableInput(f"sft_sources: unknown {sorted(unknown)}; use 'chosen' and/or 'general'")
    pool: list[tuple[str, str]] = []
    if "chosen" in mix.sft_sources:
        pool += data.chosen_sft
    if "general" in mix.sft_sources and mix.general_sft:
        pool += render_sft(data, read_sft_file(mix.general_sft))
    return pool


def sft_batch_size(batch_size: int, ratio: float) -> int:
    """SFT examples per step for `batch_size` preference examples: ceil(batch * ratio), 0 when off."""
    return math.ceil(batch_size * ratio) if ratio > 0 else 0


class SFTMixer:
    """Draws `batch_size` (prompt, completion) examples per step from `pool`, seeded, and returns their
    next-token loss under the model being trained (with its adapters on)."""

    def __init__(self, pool: list[tuple[str, str]], tokenizer, batch_size: int, weight: float = 1.0, seed: int = 0):
        if batch_size < 1 or not pool:
            raise ValueError("an SFT mixer needs a non-empty pool and a batch size >= 1")
        self.pool, self.tokenizer, self.batch_size, self.weight = pool, tokenizer, batch_size, weight
        self.rng = random.Random(seed)

    def loss(self, model):
        examples = [self.pool[self.rng.randrange(len(self.pool))] for _ in range(self.batch_size)]
        batch = lm_batch(self.tokenizer, examples, model.device)
        return model(**batch).loss


def with_sft_mix(trainer_cls: type) -> type:
    """A subclass of a TRL trainer whose training loss is the method's loss + weight * ptx loss."""

    class MixedTrainer(trainer_cls):
        sft_mixer: SFTMixer | None = None

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            result = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
            if self.sft_mixer is None or not model.training:
                return result
            ptx = self.sft_mixer.loss(model)
            self._metrics["train"]["sft_loss"].append(ptx.item())  # averaged and logged by TRL's log()
            extra = self.sft_mixer.weight * ptx
            return (result[0] + extra, result[1]) if return_outputs else result + extra

    MixedTrainer.__name__ = MixedTrainer.__qualname__ = f"SFTMixed{trainer_cls.__name__}"
    return MixedTrainer
