"""Trainers on the demo world: held-out task accuracy and the alignment tax, SFT vs each method.

    python bench/bench_trainers.py [--prompts 2000] [--methods sft,dpo,grpo,ppo] [--out FILE.json]

1. The data comes from the pipeline: the world's SFT model samples 8 candidates per prompt (T=1),
   the exact verifier scores them, best-vs-worst pairs are imported (`prefdata import`) and
   published through the world's checklist (`prefdata publish`): a validated version.
2. Every method trains from that version with its defaults, once with SFT mixing (the default:
   chosen-only subset + the general skill's SFT examples, 1 pair : 0.2 SFT) and once without.
   Controls: `sft` continues SFT on the chosen answers (verified samples: rejection-sampling
   fine-tuning), and `sft` on the world's own flawed SFT data for the same steps.
3. A high-learning-rate setting per method provokes the alignment tax, with and without mixing.
4. Held-out task and general accuracy (the verifier, greedy), held-out SFT loss, seconds per step.

Figures go to stdout as a Markdown table and, with --out, to JSON (bench/RESULTS.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cli(*args: str, store: Path) -> str:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    out = subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"prefdata {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


def make_dataset(work: Path, n_prompts: int, candidates: int = 8) -> tuple[str, dict]:
    """A validated version from sampled candidates and verifier-judged best-vs-worst pairs."""
    from prefdata.collect.pairing import build_pairs
    from prefdata.collect.sampling import SamplingParams, TransformersSampler
    from prefdata.world import WorldConfig, build_world, sampling_prompts, verify

    config = WorldConfig()
    world = build_world(config)
    started = time.perf_counter()
    sampler = TransformersSampler(world.sft, batch_size=64)
    groups = sampler.sample(sampling_prompts(config, n_prompts), candidates,
                            SamplingParams(temperature=1.0, max_new_tokens=6, seed=0))
    rows = []
    for group in groups:
        scores = [float(verify(c.prompt, c.text)) for c in group]
        for pair in build_pairs(group[0].prompt, group, "best_vs_worst", scores):
            a_wins = pair["score_a"] > pair["score_b"]
            rows.append({"prompt": pair["prompt"],
                         "chosen": pair["response_a"] if a_wins else pair["response_b"],
                         "rejected": pair["response_b"] if a_wins else pair["response_a"],
                         "chosen_model": pair["model_a"], "rejected_model": pair["model_b"]})
    (work / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = work / "store"
    out = cli("import", str(work / "pairs.jsonl"), "--name", "world-pairs", "--card",
              str(REPO / "prefdata/world/guidelines.md"), store=store)
    ref = next(line.split()[1] for line in out.splitlines() if line.startswith("version:"))
    cli("publish", ref, "--config", str(REPO / "prefdata/world/checklist.yaml"), "--report-dir",
        str(work / "report"), store=store)
    return ref, {"prompts": n_prompts, "candidates": candidates, "pairs": len(rows),
                 "seconds": round(time.perf_counter() - started, 1)}


def sft_files(work: Path) -> dict[str, str]:
    from prefdata.trainers.data import write_sft_file
    from prefdata.world import WorldConfig, heldout, sft_data

    config = WorldConfig()
    data = sft_data(config)
    task, general = heldout(config)
    return {
        # The general skill's SFT examples: what protects a skill the pairs never touch.
        "general": str(write_sft_file(work / "general.jsonl", [(e.prompt, e.completion) for e in data if e.kind == "reverse"])),
        # The world's whole (flawed) SFT data: the "more SFT" control.
        "flawed": str(write_sft_file(work / "flawed.jsonl", [(e.prompt, e.completion) for e in data])),
        "heldout": str(write_sft_file(work / "heldout.jsonl", [(e.prompt, e.completion) for e in task + general])),
    }


# Per method: (label, config) runs. The "tax" setting trains every weight (no LoRA) at a learning rate
# high enough that the general skill suffers without mixing, with the guards off (they would stop it:
# measured, that is what they are for), to measure how much of the tax the mixing removes.
TAX = {"use_lora": False, "learning_rate": 1e-3, "guards": False}
PPO_TAX = {"lr": 2e-3, "guards": False}


def runs(files: dict[str, str]) -> dict[str, list[tuple[str, dict]]]:
    no_mix = {"sft_ratio": 0.0}
    return {
        "sft": [("chosen", {}), ("chosen, no mix", no_mix),
                ("the world's flawed SFT data", {"sft_sources": ["general"], "general_sft": files["flawed"]})],
        "dpo": [("default", {}), ("no mix", no_mix), ("tax: full, lr 1e-3", TAX), ("tax: full, lr 1e-3, no mix", {**TAX, **no_mix})],
        "grpo": [("default", {}), ("no mix", no_mix), ("tax: full, lr 1e-3", TAX), ("tax: full, lr 1e-3, no mix", {**TAX, **no_mix})],
        # PPO trains LoRA only (its reference is the base with the adapter off): its tax setting is 10x the lr.
        "ppo": [("default", {}), ("no mix", no_mix), ("tax: lr 2e-3", PPO_TAX), ("tax: lr 2e-3, no mix", {**PPO_TAX, **no_mix})],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--methods", default="sft,dpo,grpo,ppo")
    parser.add_argument("--work", type=Path, default=Path(".prefdata/bench/trainers"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import shutil

    from prefdata.trainers import train
    from prefdata.world import build_world

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    world = build_world()
    ref, data_info = make_dataset(args.work, args.prompts)
    files = sft_files(args.work)
    print(f"dataset {ref}: {data_info}", flush=True)
    common = {"general_sft": files["general"], "eval_sft": files["heldout"], "evaluator": "prefdata.world:evaluate",
              "evaluator_kwargs": {"world": str(world.root)}}
    rules = {"grpo": {"rewards": ["rule:prefdata.world:verify"]}, "ppo": {"rewards": ["rule:prefdata.world:verify"]}}
    results = []
    for method in args.methods.split(","):
        for label, extra in runs(files)[method]:
            config = {**common, **rules.get(method, {}), **extra}
            out_dir = args.work / "runs" / f"{method}-{len(results)}"
            started = time.perf_counter()
            try:
                result = train(method, ref, config, store=str(args.work / "store"), output_dir=out_dir, base_model=world.sft)
                m = result.metrics
                row = {"method": method, "setting": label, "before": m["before"], "after": m["after"],
                       "steps": m["steps"], "seconds_per_step": m["seconds_per_step"], "train_seconds": m["train_seconds"]}
            except Exception as exc:  # noqa: BLE001 - a guard or a failure is a result too
                row = {"method": method, "setting": label, "error": f"{type(exc).__name__}: {exc}"}
            row["wall_seconds"] = round(time.perf_counter() - started, 1)
            results.append(row)
            print(json.dumps(row), flush=True)

    print(f"\nDataset: {data_info['pairs']} pairs from {data_info['prompts']} prompts ({ref})\n")
    print("| method | setting | task before | task after | general before | general after | held-out SFT loss after | steps | s/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['method']} | {r['setting']} | stopped: {r['error'][:120]} |||||||")
            continue
        b, a = r["before"], r["after"]
        print(f"| {r['method']} | {r['setting']} | {b['task_accuracy']:.3f} | {a['task_accuracy']:.3f} | "
              f"{b['general_accuracy']:.3f} | {a['general_accuracy']:.3f} | {a.get('heldout_sft_loss', float('nan')):.4f} | "
              f"{r['steps']} | {r['seconds_per_step']:.3f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"dataset": {**data_info, "ref": ref}, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
