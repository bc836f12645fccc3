"""The build config of the demo world: one dataclass, every field with help text, validated.

The defaults give a 1.06M-parameter Llama (4 layers, width 128, 8 heads, MLP 512) trained for
1,200 steps of 64 examples at a peak learning rate of 2e-3, in about three minutes on two shared
CPU cores. Measured: held-out task accuracy 0.59 (seed 0) and 0.57 (seed 2), general accuracy
1.00. A model this small learns the units digit in a sudden jump; over seeds 0-3 (1,500-step runs)
it came by step 750 with MLP 512, while with MLP 384 seed 2 was still at 0.38 after 1,500 steps.
A `flaw_share` of 0.7 caps what more SFT can reach near 0.6: ~45% of problems carry, and on those
the data's most common answer is wrong.

The judge (`judge_recipe()`): the same shape and seed, 1,558 steps of 64 at 3e-3 on 100,000 correct
arithmetic examples (no flaw, no reverse): 0.962 of held-out problems answered exactly, 227 s of
training on two shared cores (prefdata/world/weights/world.json).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

# Bump when a code change would give a different model for the same config, so old caches miss.
WORLD_FORMAT = 4  # 2: subtraction answers four digits wide, like addition; 3: a chat template; 4: a judge model


@dataclass(frozen=True)
class WorldConfig:
    seed: int = field(default=0, metadata={"help": "Seeds the data, the eval prompts and the weights."})
    n_sft: int = field(default=40_000, metadata={"help": "SFT examples (prompts may repeat, as in real data)."})
    general_share: float = field(
        default=0.25, metadata={"help": "Share of SFT examples that teach the general skill (reverse)."}
    )
    flaw_share: float = field(
        default=0.7,
        metadata={"help": "Share of carrying SFT problems answered with the carry dropped; > 0.5 makes the wrong "
                          "answer the mode, so more SFT cannot fix it."},
    )
    hidden_size: int = field(default=128, metadata={"help": "Llama hidden size."})
    num_layers: int = field(default=4, metadata={"help": "Llama decoder layers."})
    num_heads: int = field(default=8, metadata={"help": "Attention heads (= key/value heads)."})
    intermediate_size: int = field(default=512, metadata={"help": "Llama MLP width."})
    steps: int = field(default=1200, metadata={"help": "Optimizer steps: fixed, never a wall-clock budget."})
    batch_size: int = field(default=64, metadata={"help": "Examples per step."})
    lr: float = field(default=2e-3, metadata={"help": "AdamW peak learning rate (linear warm-up, cosine decay)."})
    warmup_steps: int = field(default=100, metadata={"help": "Linear warm-up steps."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    judge_n_sft: int = field(
        default=100_000, metadata={"help": "Judge: correct arithmetic examples (no flaw, no reverse) it trains on."})
    judge_steps: int = field(default=1558, metadata={"help": "Judge: optimizer steps (same shape and batch as the SFT model)."})
    judge_lr: float = field(default=3e-3, metadata={"help": "Judge: AdamW peak learning rate."})
    n_eval_task: int = field(default=500, metadata={"help": "Held-out arithmetic prompts."})
    n_eval_general: int = field(default=200, metadata={"help": "Held-out reverse prompts."})

    def __post_init__(self) -> None:
        for name in ("n_sft", "hidden_size", "num_layers", "num_heads", "intermediate_size", "steps",
                     "batch_size", "n_eval_task", "n_eval_general", "judge_n_sft", "judge_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("general_share", "flaw_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be in [0, steps ({self.steps}))")
        if self.lr <= 0 or self.judge_lr <= 0:
            raise ValueError(f"lr and judge_lr must be > 0, got {self.lr} and {self.judge_lr}")
        if not 0 <= self.warmup_steps < self.judge_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be in [0, judge_steps ({self.judge_steps}))")

    def judge_recipe(self) -> "WorldConfig":
        """The judge's training config: the same shape, seed and held-out prompts, trained longer on
        correct arithmetic only (no flaw, no reverse), so it can solve the problems it judges."""
        from dataclasses import replace

        return replace(self, n_sft=self.judge_n_sft, general_share=0.0, flaw_share=0.0, steps=self.judge_steps,
                       lr=self.judge_lr)

    def key(self) -> str:
        """A short hash of every field and the code's WORLD_FORMAT: the cache folder's name."""
        payload = json.dumps({"format": WORLD_FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, data: dict) -> "WorldConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown world config fields {unknown}; known: {sorted(known)}")
        return cls(**data)
