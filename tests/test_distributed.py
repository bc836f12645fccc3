"""Training scales through accelerate: a few DPO steps in 2 CPU processes (gloo). `accelerate launch`
runs several CPU processes only through MPI, which this machine lacks; torchrun starts them instead
and accelerate (under the HF Trainer) picks the distributed set-up up from its environment, as it
does on a GPU cluster. Both ranks must hold the same weights afterwards; rank 0 alone writes the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_trainers import REPO, TINY, cli, world_pairs

from prefdata.world import build_world


def test_dpo_on_two_processes_keeps_the_ranks_in_step(tmp_path):
    from prefdata.collect.local_serve import free_port

    world = build_world(TINY, cache=tmp_path / "world")
    store = tmp_path / "store"
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in world_pairs(TINY, 64)))
    imported = cli("import", str(tmp_path / "pairs.jsonl"), "--name", "arith", "--card",
                   str(REPO / "prefdata/world/guidelines.md"), store=store)
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    assert cli("publish", ref, "--config", str(REPO / "prefdata/world/checklist.yaml"), store=store).returncode == 0
    (tmp_path / "dpo.yaml").write_text("max_steps: 3\nper_device_train_batch_size: 4\nseed: 0\n")
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "PREFDATA_STORE": str(store), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [str(torchrun), "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), "-m", "prefdata", "train", "dpo", "--dataset", ref,
         "--config", str(tmp_path / "dpo.yaml"), "--base-model", str(world.sft), "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "prefdata_train.json").read_text())
    ranks = record["metrics"]["ranks"]
    assert ranks["world_size"] == 2 and len(ranks["checksums"]) == 2
    assert ranks["ranks_agree"], ranks  # DDP all-reduced every step: identical LoRA weights on both ranks
    assert record["metrics"]["steps"] == 3
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # rank 0 saved a whole model
