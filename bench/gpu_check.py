"""The GPU check: a bf16 DPO run and GRPO with vLLM generation on the demo world, with their figures.

    python bench/gpu_check.py [--prompts 2000] [--out gpu_check.json] [--no-vllm]
    python bench/gpu_check.py --prepare        # on any machine: only the validated version

Run it whenever a CUDA GPU is at hand (a few minutes): it builds or reuses the demo world, makes a
validated version through the pipeline (bench/bench_trainers.py's make_dataset: sampled candidates,
verifier-judged pairs, `prefdata import` + `prefdata publish`), then trains
    dpo   bf16 (set automatically on a GPU that supports it), the default settings
    grpo  use_vllm=True, vllm_mode=colocate (vLLM in the training process), the verifier reward;
          with --no-vllm, transformers' own generation (where vLLM cannot be installed)
and prints held-out accuracy before/after, seconds per step and peak GPU memory. Nothing in prefdata
needs a GPU: CI has none, and this script refuses to train without one (exit 2).

`--prepare` stops after the validated version (it needs no GPU), so the version can be built where
the whole pipeline is installed and the GPU machine needs only the trainers' packages: the next run
with the same --work trains from the version it finds there.
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
    parser.add_argument("--prepare", action="store_true", help="only build the validated version (no GPU needed)")
    parser.add_argument("--no-vllm", action="store_true", help="GRPO generates with transformers, not vLLM")
    args = parser.parse_args()

    if args.prepare:
        print(json.dumps(dataset(args.work, args.prompts)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    if not args.no_vllm:
        try:
            import vllm  # noqa: F401
        except ImportError:
            print("gpu_check: vLLM is not installed (pip install vllm); GRPO with vLLM generation needs it, "
                  "or pass --no-vllm", file=sys.stderr)
            return 2
    from bench.bench_trainers import sft_files
    from prefdata.trainers import train
    from prefdata.world import build_world

    world = build_world()
    data_info = dataset(args.work, args.prompts)
    ref = data_info["ref"]
    files = sft_files(args.work)
    common = {"general_sft": files["general"], "eval_sft": files["heldout"], "evaluator": "prefdata.world:evaluate",
              "evaluator_kwargs": {"world": str(world.root)}}
    grpo = {"rewards": ["rule:prefdata.world:verify"]}
    runs = {
        "dpo-bf16": ("dpo", {}),
        **({"grpo-transformers-generation": ("grpo", grpo)} if args.no_vllm else
           {"grpo-vllm": ("grpo", {**grpo, "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3})}),
    }
    figures = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "dataset": data_info}
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


def dataset(work: Path, prompts: int) -> dict:
    """The validated version under `work` (made once: its ref and figures are kept in dataset.json)."""
    from bench.bench_trainers import make_dataset

    record = work / "dataset.json"
    if record.exists():
        info = json.loads(record.read_text())
        if info["prompts"] != prompts:
            raise SystemExit(f"gpu_check: {work} holds a version from {info['prompts']} prompts, not {prompts}: "
                             "pass another --work")
        return info
    work.mkdir(parents=True, exist_ok=True)
    ref, info = make_dataset(work, prompts)
    info = {**info, "ref": ref}
    record.write_text(json.dumps(info) + "\n")
    return info


if __name__ == "__main__":
    sys.exit(main())
