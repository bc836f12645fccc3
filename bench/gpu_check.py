"""The GPU check: a bf16 DPO run and GRPO with vLLM generation on the demo world, with their figures.

    python bench/gpu_check.py [--prompts 2000] [--out gpu_check.json]

Run it whenever a CUDA GPU is at hand (a few minutes): it builds or reuses the demo world, makes a
validated version through the pipeline (bench/bench_trainers.py's make_dataset: sampled candidates,
verifier-judged pairs, `prefdata import` + `prefdata publish`), then trains
    dpo   bf16 (set automatically on a GPU that supports it), the default settings
    grpo  use_vllm=True, vllm_mode=colocate (vLLM in the training process), the verifier reward
and prints held-out accuracy before/after, seconds per step and peak GPU memory. Nothing in prefdata
needs a GPU: CI has none, and this script refuses to run without one (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--work", type=Path, default=Path(".prefdata/bench/gpu"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("gpu_check: vLLM is not installed (pip install vllm); GRPO with vLLM generation needs it", file=sys.stderr)
        return 2
    from bench.bench_trainers import make_dataset, sft_files
    from prefdata.trainers import train
    from prefdata.world import build_world

    args.work.mkdir(parents=True, exist_ok=True)
    world = build_world()
    ref, data_info = make_dataset(args.work, args.prompts)
    files = sft_files(args.work)
    common = {"general_sft": files["general"], "eval_sft": files["heldout"], "evaluator": "prefdata.world:evaluate",
              "evaluator_kwargs": {"world": str(world.root)}}
    runs = {
        "dpo-bf16": ("dpo", {}),
        "grpo-vllm": ("grpo", {"rewards": ["rule:prefdata.world:verify"], "use_vllm": True, "vllm_mode": "colocate",
                               "vllm_gpu_memory_utilization": 0.3}),
    }
    figures = {"device": torch.cuda.get_device_name(0), "dataset": {**data_info, "ref": ref}}
    for label, (method, extra) in runs.items():
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        result = train(method, ref, {**common, **extra}, store=str(args.work / "store"),
                       output_dir=args.work / label, base_model=world.sft)
        m = result.metrics
        figures[label] = {"task_before": m["before"]["task_accuracy"], "task_after": m["after"]["task_accuracy"],
                          "general_after": m["after"]["general_accuracy"], "seconds_per_step": m["seconds_per_step"],
                          "wall_seconds": round(time.perf_counter() - started, 1),
                          "peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20),
                          "bf16": json.loads((result.model_dir / "prefdata_train.json").read_text())["config"].get("bf16")}
        print(label, json.dumps(figures[label]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
