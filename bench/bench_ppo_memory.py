"""PPO peak memory: one shared base with adapters (trainers/ppo.py) against four separate models.

    .venv/bin/python bench/bench_ppo_memory.py [--hidden 768 --layers 8 --batch 16 --steps 2] [--checkpointing]
                                               [--no-fragmentation] [--vocab N]

--checkpointing turns activation checkpointing on in every configuration alike (PPOConfig's
activation_checkpointing; the separate set-up's policy and critic copies too). --no-fragmentation runs
every configuration with glibc's mmap threshold fixed at 128 KB (MALLOC_MMAP_THRESHOLD_=131072): every
tensor of 128 KB or more gets its own mapping and goes back to the system when freed, so RSS is close to
the live memory (what torch.cuda.max_memory_allocated reports on a GPU). Without it, glibc's dynamic
threshold rises to the largest tensor freed so far, later activation-sized tensors land in the heap, and
the freed heap stays resident: 10-35% of what PPO adds, in every configuration. --vocab N (a diagnostic)
gives every model an N-row vocabulary instead of the char tokenizer's 77 (the extra rows are never in a
prompt, but they are sampled and cost what a real vocabulary costs: embedding, LM head and logits).

Every configuration runs in a fresh process (peak RSS is per process and never goes down) on the
same random-init Llama (~75M parameters at the defaults, fp32, the world's char tokenizer), same
prompts, same batch, same number of PPO steps:

    shared-rule   trainers/ppo.py with a rule reward: 1 base copy (policy LoRA + value head;
                  reference = adapter disabled)
    shared-rm     trainers/ppo.py with a reward model folder: the base + the RM as its own frozen model
    shared-rm-adapter  trainers/ppo.py with a reward model folder as `prefdata train rm` writes it with
                  LoRA on the same base (DIR/adapter): the RM rides on the policy's base as a second
                  adapter with its score head (RewardAdapterScorer), no second copy
    separate      the classic set-up (seed 2, 3.1): policy, reference, reward and value as four
                  separate copies; policy and value train LoRA adapters exactly like ours (value: LoRA
                  + the same linear head), so the only difference measured is the copies

What is measured: the process's peak RSS (VmHWM) and the same minus the RSS right after the
imports, i.e. what the models, the optimizer and the activations added; and the training phase's
own peak (the peak reset once every model is loaded, minus the same baseline), which leaves out
from_pretrained's loading transient (the safetensors pages mapped while a copy is materialised). On CPU, RSS is the honest
figure: torch's CPU allocator has no peak counter, and tracemalloc does not see torch's tensors.
Time per PPO step is the mean of the steps after the first. The last line compares the reward adapter's
figure with issue 14's target (<= 0.3x four separate models).
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

from bench.memory import add_size_args, reset_peak, run_child, status_mb  # noqa: E402

LOADED: dict = {}
TARGET = 0.3  # issue 14 item 5: the reward adapter configuration's added memory against four separate models
NO_FRAGMENTATION = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def loaded() -> None:
    """Every model is loaded: note the peak so far (it holds from_pretrained's transient: the safetensors
    pages mapped while the tensors are materialised) and reset it, so the final peak is the training
    phase's alone."""
    LOADED.update(load_peak_mb=status_mb("VmHWM"), loaded_mb=status_mb("VmRSS"), reset=reset_peak())


def build_models(root: Path, hidden: int, layers: int, vocab: int | None = None) -> None:
    """A random-init causal LM and a sequence-classification RM of the same size, with tokenizers; `vocab`
    rows in the embedding and LM head (default: the char tokenizer's)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    from prefdata.world.tokenizer import build_tokenizer

    tok = build_tokenizer()
    cfg = LlamaConfig(vocab_size=vocab or len(tok), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64, max_position_embeddings=64,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      num_labels=1)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(root / "policy")
    tok.save_pretrained(root / "policy")
    LlamaForSequenceClassification(cfg).save_pretrained(root / "rm")
    tok.save_pretrained(root / "rm")
    # A LoRA reward model on the policy's base, laid out as `prefdata train rm` leaves it (trainers/run.py
    # save_merged): the merged classifier in the folder, the adapter (with its score head) under adapter/.
    from peft import LoraConfig, get_peft_model

    rm = LlamaForSequenceClassification.from_pretrained(root / "policy", num_labels=1)
    rm = get_peft_model(rm, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="SEQ_CLS"))
    rm.save_pretrained(root / "rm-lora" / "adapter")
    rm.merge_and_unload().save_pretrained(root / "rm-lora")
    tok.save_pretrained(root / "rm-lora")


def lora_share(policy: Path, r: int = 16) -> float:
    """A rank-r LoRA on every linear layer, as a share of the model's parameters: with AdamW a trained
    adapter costs four times its size (weights, gradients, two moments), so this share decides how much
    of the shared set-up is adapters rather than the one base."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(policy)
    base = sum(p.numel() for p in model.parameters())
    model = get_peft_model(model, LoraConfig(r=r, target_modules="all-linear", task_type="CAUSAL_LM"))
    return sum(p.numel() for p in model.parameters() if p.requires_grad) / base


def prompts(n: int) -> list[str]:
    from prefdata.world import WorldConfig, sampling_prompts

    return sampling_prompts(WorldConfig(), n)


def run_shared(root: Path, config, mode: str) -> list[float]:
    import torch

    from prefdata.trainers.ppo import RewardAdapterScorer, RewardModelScorer, _reward_fn, load_policy, train

    device = torch.device("cpu")
    tokenizer, model, value_head = load_policy(root / "policy", config, device)
    if mode == "shared-rm":
        reward = RewardModelScorer(root / "rm", device)
    elif mode == "shared-rm-adapter":  # what run_ppo does with a reward folder trained on its base
        reward = _reward_fn(root / "rm-lora", device, model, root / "policy")
        if not isinstance(reward, RewardAdapterScorer):
            raise RuntimeError("the LoRA reward model did not load as an adapter on the policy's base")
    else:
        reward = lambda ps, cs: [float(c[:1].isdigit()) for c in cs]  # noqa: E731
    loaded()
    history = train(model, value_head, tokenizer, reward, prompts(config.per_device_train_batch_size * config.max_steps), config)
    return [row["seconds"] for row in history]


def run_separate(root: Path, config) -> list[float]:
    """The four-copy PPO step, with the same math functions and the same LoRA set-up as ours."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prefdata.trainers import ppo_math as pm
    from prefdata.models.logprobs import logprobs_from_logits
    from prefdata.trainers.ppo import RewardModelScorer
    from prefdata.trainers.ppo_step import forward_response, response_mask

    device = torch.device("cpu")
    tok = AutoTokenizer.from_pretrained(root / "policy")

    def lora_copy():
        base = AutoModelForCausalLM.from_pretrained(root / "policy", dtype=torch.float32)
        if config.activation_checkpointing:  # as trainers/ppo.py load_policy does
            base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        return get_peft_model(base, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                                               target_modules=config.lora_target_modules, task_type="CAUSAL_LM"))

    torch.manual_seed(config.seed)
    policy = lora_copy()
    ref = AutoModelForCausalLM.from_pretrained(root / "policy", dtype=torch.float32).eval().requires_grad_(False)
    critic = lora_copy()
    head = torch.nn.Linear(critic.config.hidden_size, 1)
    reward = RewardModelScorer(root / "rm", device)
    loaded()
    params = [p for m in (policy, critic) for p in m.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=config.learning_rate)
    all_prompts = prompts(config.per_device_train_batch_size * config.max_steps)
    seconds = []
    for step in range(config.max_steps):
        t0 = time.perf_counter()
        ps = all_prompts[step * config.per_device_train_batch_size:(step + 1) * config.per_device_train_batch_size]
        tok.padding_side = "left"
        enc = tok(ps, return_tensors="pt", padding=True)
        width = enc["input_ids"].size(1)
        policy.eval(), critic.eval()  # as ours: sample and score in eval mode, update in train mode
        with torch.no_grad():
            gen = policy.generate(**enc, do_sample=True, temperature=config.temperature, top_k=0,
                                  max_new_tokens=config.max_new_tokens, pad_token_id=tok.pad_token_id,
                                  eos_token_id=tok.eos_token_id)
            resp = gen[:, width:]
            mask = response_mask(resp, tok.eos_token_id)
            attn = torch.cat([enc["attention_mask"], mask.long()], 1)
            logits, _ = forward_response(policy, head, gen, attn, width, config.temperature, with_values=False)
            ref_logits, _ = forward_response(ref, head, gen, attn, width, config.temperature, with_values=False)
            _, values = forward_response(critic, head, gen, attn, width, config.temperature)
            comps = tok.batch_decode(resp, skip_special_tokens=True)
            scores = torch.tensor(reward(ps, comps))
        logp, ref_logp = logprobs_from_logits(logits, resp), logprobs_from_logits(ref_logits, resp)
        kl = pm.per_token_kl(logp, ref_logp) * mask
        adv, ret = pm.gae(pm.kl_shaped_rewards(scores, kl, mask, config.init_kl_coef), values * mask, mask,
                          config.gamma, config.lam)
        adv = pm.masked_whiten(adv, mask)
        policy.train(), critic.train()
        for _ in range(config.ppo_epochs):
            for rows in torch.randperm(len(ps)).split(config.mini_batch_size):
                lg, _ = forward_response(policy, head, gen[rows], attn[rows], width, config.temperature, with_values=False)
                _, v = forward_response(critic, head, gen[rows], attn[rows], width, config.temperature)
                pg, _, _ = pm.clipped_policy_loss(logprobs_from_logits(lg, resp[rows]), logp[rows], adv[rows],
                                                  mask[rows], config.clip_range)
                vf, _ = pm.clipped_value_loss(v, values[rows], ret[rows], mask[rows], config.clip_range_value)
                (pg + config.vf_coef * vf).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - t0)
    return seconds


def child(mode: str, root: Path, args) -> None:
    import torch

    import peft  # noqa: F401  (imported before the baseline, so the baseline holds every library)
    import transformers  # noqa: F401

    from prefdata.trainers.ppo import PPOConfig

    torch.set_num_threads(2)
    baseline = status_mb("VmRSS")
    config = PPOConfig(max_steps=args.steps, per_device_train_batch_size=args.batch, mini_batch_size=args.batch // 2, ppo_epochs=1,
                       max_new_tokens=16, max_kl=None, activation_checkpointing=args.checkpointing)
    if mode == "separate":
        seconds = run_separate(root, config)
    else:
        seconds = run_shared(root, config, mode)
    train_peak = status_mb("VmHWM")  # since loaded(): the training phase
    peak = max(train_peak, LOADED["load_peak_mb"])
    print(json.dumps({"mode": mode, "baseline_mb": baseline, "peak_mb": peak, "added_mb": peak - baseline,
                      "train_added_mb": train_peak - baseline if LOADED["reset"] else None,
                      "step_seconds": sum(seconds[1:]) / max(1, len(seconds) - 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_args(parser, batch=16, steps=2)
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing in every configuration")
    parser.add_argument("--no-fragmentation", action="store_true",
                        help="every configuration with glibc's mmap threshold at 128 KB (RSS ~ live memory)")
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary rows of every model (default: the char tokenizer's 77)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.root), args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_models(root, args.hidden, args.layers, args.vocab)
        n_params = sum(f.stat().st_size for f in (root / "policy").glob("*.safetensors")) / 4 / 1e6
        print(f"model: ~{n_params:.0f}M parameters (fp32 {n_params * 4:.0f} MB), vocab {args.vocab or 'char'}, "
              f"batch {args.batch}, {args.steps} steps; LoRA r=16 on every linear layer: "
              f"{lora_share(root / 'policy'):.1%} of the base's parameters; "
              f"activation checkpointing {'on' if args.checkpointing else 'off'}; allocator "
              f"{'MALLOC_MMAP_THRESHOLD_=131072' if args.no_fragmentation else 'glibc default'} in every configuration")
        env = {**os.environ, **NO_FRAGMENTATION} if args.no_fragmentation else None
        results = {}
        for mode in ("shared-rule", "shared-rm", "shared-rm-adapter", "separate"):
            results[mode] = run_child(__file__, [
                "--child", mode, "--root", str(root), "--hidden", str(args.hidden), "--layers", str(args.layers),
                "--batch", str(args.batch), "--steps", str(args.steps), *(["--checkpointing"] if args.checkpointing else [])],
                env=env)
            r = results[mode]
            print(f"{mode:17s} peak RSS {r['peak_mb']:7.0f} MB  added by PPO {r['added_mb']:7.0f} MB  "
                  f"training phase {r['train_added_mb'] or 0:7.0f} MB  step {r['step_seconds']:.2f} s")
        sep = results["separate"]
        for mode in ("shared-rule", "shared-rm", "shared-rm-adapter"):
            r = results[mode]
            train = (f", training phase {r['train_added_mb'] / sep['train_added_mb']:.2f}x" if r["train_added_mb"] and
                     sep["train_added_mb"] else "")
            print(f"{mode} / separate: added {r['added_mb'] / sep['added_mb']:.2f}x, "
                  f"peak RSS {r['peak_mb'] / sep['peak_mb']:.2f}x{train}")
        ratio = results["shared-rm-adapter"]["added_mb"] / sep["added_mb"]
        print(f"reward adapter / separate {ratio:.3f}x: target <= {TARGET}x {'met' if ratio <= TARGET else 'not met'}")


if __name__ == "__main__":
    main()
