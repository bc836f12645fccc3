"""PPO on the demo world: held-out task and general-skill accuracy before/after, with and without ptx.

    .venv/bin/python bench/bench_ppo_world.py [--seed 0] [--mix none,general,all] [--lr LR]

The default world (`build_world()`, reused from .prefdata/world), its sampling prompts (never an eval
prompt), the rule verifier as the reward (1.0 right, 0.0 wrong), PPOConfig defaults. `--mix` picks
the ptx runs: none (no SFT term), all (`sft_data(config)`: the world's whole SFT mix, including its
carry-flawed arithmetic), general (only its general-skill examples, `kind == "reverse"`).
Accuracy is `prefdata.world.evaluate` (greedy, 500 task and 200 general held-out prompts).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mix", default="none,general,all")
    parser.add_argument("--n-prompts", type=int, default=4000)
    parser.add_argument("--lr", type=float, default=None, help="override PPOConfig.learning_rate (to provoke the alignment tax)")
    args = parser.parse_args()

    import torch

    from prefdata.trainers.ppo import PPOConfig, run_ppo
    from prefdata.world import WorldConfig, build_world, evaluate, sampling_prompts, sft_data, verify

    torch.set_num_threads(2)
    world_config = WorldConfig()
    world = build_world(world_config)
    before = evaluate(world.sft, world_config)
    prompts = sampling_prompts(world_config, args.n_prompts)

    def reward(ps: list[str], cs: list[str]) -> list[float]:
        return [1.0 if verify(p, c) else 0.0 for p, c in zip(ps, cs)]

    data = sft_data(world_config)
    mixes = {
        "none": None,
        "all": [(ex.prompt, ex.completion) for ex in data],
        "general": [(ex.prompt, ex.completion) for ex in data if ex.kind == "reverse"],
    }
    config = replace(PPOConfig(), seed=args.seed)
    if args.lr is not None:
        config = replace(config, learning_rate=args.lr)
    print(f"SFT model: task {before['task_accuracy']:.3f}, general {before['general_accuracy']:.3f}")
    print(f"config: lr {config.learning_rate}, steps {config.max_steps}, batch {config.per_device_train_batch_size}, mini {config.mini_batch_size}, "
          f"epochs {config.ppo_epochs}, temperature {config.temperature}, seed {config.seed}")
    print("| ptx mix | task before | task after | general before | general after | steps | seconds | s/step | reward first 10 -> last 10 | KL last 10 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.mix.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            m = run_ppo(config, world.sft, prompts, reward, Path(tmp) / "ppo", sft_examples=mixes[name])
            seconds = time.perf_counter() - t0
            after = evaluate(Path(tmp) / "ppo", world_config)
        h = m["history"]
        first = sum(r["reward_mean"] for r in h[:10]) / 10
        last = sum(r["reward_mean"] for r in h[-10:]) / 10
        kl = sum(r["kl"] for r in h[-10:]) / 10
        print(f"| {name} | {before['task_accuracy']:.3f} | {after['task_accuracy']:.3f} | "
              f"{before['general_accuracy']:.3f} | {after['general_accuracy']:.3f} | {m['steps']} | {seconds:.0f} | "
              f"{m['train_seconds'] / m['steps']:.2f} | {first:.2f} -> {last:.2f} | {kl:.2f} |", flush=True)


if __name__ == "__main__":
    main()
