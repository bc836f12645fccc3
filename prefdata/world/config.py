"""The build config of the demo world: one dataclass, every field with help text, validated."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

# Bump when a code change would give a different model for the same config, so old caches miss.
WORLD_FORMAT = 1


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
    intermediate_size: int = field(default=384, metadata={"help": "Llama MLP width."})
    steps: int = field(default=1500, metadata={"help": "Optimizer steps: fixed, never a wall-clock budget."})
    batch_size: int = field(default=64, metadata={"help": "Examples per step."})
    lr: float = field(default=2e-3, metadata={"help": "AdamW peak learning rate (linear warm-up, cosine decay)."})
    warmup_steps: int = field(default=100, metadata={"help": "Linear warm-up steps."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    n_eval_task: int = field(default=500, metadata={"help": "Held-out arithmetic prompts."})
    n_eval_general: int = field(default=200, metadata={"help": "Held-out reverse prompts."})

    def __post_init__(self) -> None:
        for name in ("n_sft", "hidden_size", "num_layers", "num_heads", "intermediate_size", "steps",
                     "batch_size", "n_eval_task", "n_eval_general"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("general_share", "flaw_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be in [0, steps ({self.steps}))")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")

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
