"""Record the guard fixtures (tests/fixtures/guards/*.json) from real runs on the demo's validated version.

    .venv/bin/prefdata demo --out DEMO        # once: the validated version, DEMO/general_sft.jsonl
    .venv/bin/python bench/guard_fixtures.py --store DEMO/store --dataset NAME@VERSION \
        --base-model WORLD/sft --general-sft DEMO/general_sft.jsonl [--only dpo,grpo_kl_above ...]

Healthy runs: every method with the configs of docs/examples/ (its defaults plus what the method
needs: a reward, the general SFT data, the evaluator), where no guard may fire. Provoked runs: the
same with one thing broken, where the named guard must stop the run. Each fixture keeps the metrics
the guards read from every logged step, the message the run stopped with (or null) and the guard
advisories it logged; tests/test_guards.py replays every guard over every fixture. One CPU run each
(about 30-60 s on 2 cores); run once, not in a loop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see prefdata/world/build.py

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # rule:bench.guard_fixtures:constant_reward loads from the repository
# ... registered as a verifier by this script's own registry file (prefdata/base/registry.py).
_REGISTRY = Path(tempfile.mkdtemp(prefix="guard-fixtures-")) / "registry.toml"
_REGISTRY.write_text('[verifiers]\nconstant = "bench.guard_fixtures:constant_reward"\n')
os.environ["PREFDATA_REGISTRY"] = str(_REGISTRY)
OUT = REPO / "tests" / "fixtures" / "guards"
EXAMPLES = REPO / "docs" / "examples"
# What the guards read, plus the loss: the rest of a log (timings, clip ratios...) is left out.
KEYS = ("step", "loss", "kl", "objective/kl", "kl_coef", "reward", "reward_mean", "reward_std", "objective/scores",
        "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "frac_reward_zero_std", "sft_loss")

# name -> (method, example config, overrides, the guard that must stop it or None, how the data is bent)
CASES = {
    "rm": ("rm", "train-rm.yaml", {}, None, None),
    "dpo": ("dpo", "train-dpo.yaml", {}, None, None),
    "grpo": ("grpo", "train-grpo.yaml", {}, None, None),
    "ppo": ("ppo", "train-ppo.yaml", {}, None, None),
    "sft": ("sft", "train-sft.yaml", {}, None, None),
    # The labels turned round: the chosen side of every pair is the wrong answer. DPO fits the labels it
    # is given, so no training-log guard can see it ("unseen"): the run is recorded to show that.
    "dpo_flipped_labels": ("dpo", "train-dpo.yaml", {}, "unseen", "flip"),
    # Plain sigmoid DPO without the sft term, a high lr: both likelihoods pushed down.
    "dpo_chosen_collapse": ("dpo", "train-dpo.yaml", {"loss_type": ["sigmoid"], "loss_weights": None, "sft_ratio": 0.0,
                                                      "learning_rate": 5e-3}, "ChosenCollapse", None),
    # A learned reward the policy can game, with (almost) no KL penalty: on the demo world the KL runs
    # away (KLAbove) long before it could collapse.
    "grpo_rm_hack": ("grpo", "train-grpo.yaml", {"rewards": ["rm:{rm}"], "beta": 1e-4}, "KLAbove", None),
    # KL runs away: a learning rate a hundred times the default.
    "grpo_kl_above": ("grpo", "train-grpo.yaml", {"learning_rate": 0.1}, "KLAbove", None),
    "ppo_kl_bound": ("ppo", "train-ppo.yaml", {"lr": 0.02}, "max_kl", None),
    # Every completion gets the same reward: no group has any spread.
    "grpo_flat": ("grpo", "train-grpo.yaml", {"rewards": ["rule:bench.guard_fixtures:constant_reward"]},
                  "FlatAdvantages", None),
}


def constant_reward(prompt: str, completion: str) -> float:
    """A reward that never separates completions (the flat-advantages case)."""
    return 1.0


def _row(log: dict) -> dict:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in log.items() if k in KEYS and v is not None}


def record(name: str, args) -> dict:
    import yaml

    from prefdata.trainers import load
    from prefdata.trainers.config import parse_config
    from prefdata.trainers.data import load_validated
    from prefdata.trainers.guards import GuardTripped

    method, example, overrides, expect, bend = CASES[name]
    values = yaml.safe_load((EXAMPLES / example).read_text()) or {}
    values.update({k: (v.format(rm=args.rm) if isinstance(v, str) else
                       [x.format(rm=args.rm) for x in v] if isinstance(v, list) and v and isinstance(v[0], str) else v)
                   for k, v in overrides.items()})
    if "general_sft" in values:
        values["general_sft"] = args.general_sft
    values.update(base_model=args.base_model, output_dir=str(Path(args.runs) / name))
    plugin = load(method)
    cfg = parse_config(plugin.config_class, values)
    data = load_validated(args.dataset, args.store)
    if bend == "flip":
        data.train = [{**p, "chosen": p["rejected"], "rejected": p["chosen"]} for p in data.train]
        data.eval = [{**p, "chosen": p["rejected"], "rejected": p["chosen"]} for p in data.eval]
        data.chosen_sft = []  # the chosen-only subset would still hold the right answers
    message, warnings, metrics = None, [], {}
    try:
        model_dir, metrics = plugin.run(cfg, data, Path(values["output_dir"]), print)
        if method == "rm":  # its card's held-out accuracy is what grpo_rm_hack's reward-model gate reads
            from prefdata.trainers.card import write_card

            write_card(Path(model_dir), method, data, cfg.base_model, cfg, metrics)
        history = metrics["log"]
        warnings = metrics.get("warnings", [])
    except GuardTripped as exc:
        message, history = str(exc), exc.history
    after = metrics.get("after") or {}
    return {
        "name": name, "method": method, "expect": expect,
        "produced_by": f"bench/guard_fixtures.py --only {name} on {args.dataset} (the demo's validated version)",
        "config": {"example": f"docs/examples/{example}", "overrides": overrides, "bend": bend},
        # the reward specs as written, the trained reward model's folder as RUNS/... (no path of this machine)
        "rewards": [r.replace(str(args.runs), "RUNS") for r in values.get("rewards") or []] or None,
        "stopped": message, "warnings": warnings,
        "result": {k: after.get(k) for k in ("task_accuracy", "general_accuracy", "preference_accuracy") if k in after}
                  | ({"heldout_pairwise_accuracy": metrics["heldout_pairwise_accuracy"]}
                     if "heldout_pairwise_accuracy" in metrics else {}),
        "history": [_row(h) for h in history],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--dataset", required=True, help="NAME@VERSION: the demo's validated version")
    parser.add_argument("--base-model", required=True, help="the demo world's SFT model folder")
    parser.add_argument("--general-sft", required=True, help="the demo's general_sft.jsonl")
    parser.add_argument("--runs", default="/tmp/guard-fixture-runs", help="where the trained models go")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated case names")
    args = parser.parse_args(argv)
    names = args.only.split(",")
    unknown = set(names) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; known: {', '.join(CASES)}")
    args.rm = str(Path(args.runs) / "rm")
    if "grpo_rm_hack" in names and not (Path(args.rm) / "config.json").is_file() and "rm" not in names:
        parser.error("grpo_rm_hack needs the rm case's reward model: run --only rm first (or with it)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(names, key=lambda n: n != "rm"):  # the rm first: grpo_rm_hack games it
        fixture = record(name, args)
        (out / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
        print(f"{name}: stopped={fixture['stopped']!r} warnings={len(fixture['warnings'])} "
              f"steps={len(fixture['history'])} result={fixture['result']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
