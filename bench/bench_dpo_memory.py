"""DPO peak memory: the reference as the base with the LoRA adapter disabled (what `prefdata train dpo`
does) against the same LoRA training with a full reference copy.

    .venv/bin/python bench/bench_dpo_memory.py [--hidden 768 --layers 8 --batch 8 --steps 3]

Each configuration runs in a fresh process on the same random-init Llama (~75M parameters at the
defaults, fp32, the world's char tokenizer; bench_ppo_memory.build_models), same pairs, same batch:

    adapter-off   PeftModel policy, ref_model=None: TRL disables the adapter for reference log-probs
    full-copy     the same PeftModel policy, plus ref_model = a second copy of the base

Measured as in bench_ppo_memory.py: the process's peak RSS and the peak minus the RSS after imports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory import add_size_args, run_child, status_mb  # noqa: E402


def child(root: Path, mode: str, batch: int, steps: int) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from prefdata.world import WorldConfig, sampling_prompts

    torch.set_num_threads(2)
    after_imports = status_mb("VmRSS")
    tok = AutoTokenizer.from_pretrained(root / "policy")
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(root / "policy"),
                            LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    ref = AutoModelForCausalLM.from_pretrained(root / "policy") if mode == "full-copy" else None
    rows = [{"prompt": p, "chosen": "0405", "rejected": "0395"} for p in sampling_prompts(WorldConfig(), batch * steps)]
    args = DPOConfig(output_dir=str(root / f"out-{mode}"), per_device_train_batch_size=batch, max_steps=steps,
                     bf16=False, activation_checkpointing=False, report_to="none", save_strategy="no", use_cpu=True,
                     logging_steps=1, disable_tqdm=True)
    trainer = DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    started = time.perf_counter()
    trainer.train()
    return {"mode": mode, "peak_mb": status_mb("VmHWM"), "added_mb": status_mb("VmHWM") - after_imports,
            "seconds_per_step": (time.perf_counter() - started) / steps,
            "params_millions": sum(p.numel() for p in policy.parameters()) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_args(parser, batch=8, steps=3)
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "MODE"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], args.batch, args.steps)))
        return
    from bench.bench_ppo_memory import build_models

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_models(root, args.hidden, args.layers)
        results = {}
        for mode in ("adapter-off", "full-copy"):
            results[mode] = run_child(__file__, ["--child", str(root), mode, "--batch", str(args.batch),
                                                 "--steps", str(args.steps)], env={**os.environ, "HF_HUB_OFFLINE": "1"})
            print(json.dumps(results[mode]), flush=True)
    a, f = results["adapter-off"], results["full-copy"]
    print(f"\nmodel {a['params_millions']:.1f}M parameters (incl. LoRA), batch {args.batch}, {args.steps} steps")
    print("| reference | peak RSS MB | added MB | s/step |\n|---|---|---|---|")
    for r in (a, f):
        print(f"| {r['mode']} | {r['peak_mb']:.0f} | {r['added_mb']:.0f} | {r['seconds_per_step']:.2f} |")
    print(f"adapter-off / full-copy: added {a['added_mb'] / f['added_mb']:.2f}x, peak {a['peak_mb'] / f['peak_mb']:.2f}x")


if __name__ == "__main__":
    main()
