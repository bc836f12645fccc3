"""Candidate sampling: the seed's loop (one `generate` per prompt and per candidate) against
prefdata's batched TransformersSampler, side by side in one run, same model, prompts and params.

    .venv/bin/python bench/bench_sampling.py                      # 64 prompts x 4 candidates x 24 tokens
    .venv/bin/python bench/bench_sampling.py --model PATH         # any local causal LM instead

The seed (dpo-ppo-grpo-compare, section 2.3) samples with `sft_model.generate(p, temperature=...)`
once per prompt and per candidate: each call runs max_new_tokens forward passes over a batch of one.
The batched sampler left-pads `--batch-size` prompts into one `generate` call with
num_return_sequences=n, so one forward pass advances batch_size * n candidates, all with the KV cache.

Model: by default a RANDOM-INIT ~1M-parameter char-level Llama (bench.tiny_models, the demo's size)
built in a temporary folder; random weights only matter in that they rarely emit eos, so nearly
every candidate runs the full max_new_tokens in both methods (token counts are printed).
Timing: after one warm-up call each, the fastest of --repeats runs (a shared machine is noisy), with
one torch thread unless --threads says otherwise.
Figures only; no assertions.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def seed_loop(model, tokenizer, prompts: list[str], n: int, params) -> list[str]:
    """The seed's way: one generate call per prompt and per candidate."""
    import torch

    torch.manual_seed(params.seed)
    out = []
    for p in prompts:
        for _ in range(n):
            enc = tokenizer(p, return_tensors="pt")
            with torch.inference_mode():
                ids = model.generate(**enc, do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0,
                                     max_new_tokens=params.max_new_tokens, pad_token_id=tokenizer.pad_token_id)
            out.append(tokenizer.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    from bench.tiny_models import model_bench_parser

    ap = model_bench_parser(__doc__, "a local causal LM folder (default: build a random ~1M-param one)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=16, help="prompts per generate call in the batched sampler")
    # 1 by default: on a shared machine torch's own choice (one thread per core) spin-waits against the
    # other processes and ran both methods ~7x slower here. Both methods always get the same setting.
    ap.add_argument("--threads", type=int, default=1, help="torch threads; 0 = torch's own choice")
    args = ap.parse_args()

    import torch

    from bench.tiny_models import build_tiny_llama, n_params
    from prefdata.collect.sampling import SamplingParams, TransformersSampler

    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    path = Path(args.model) if args.model else build_tiny_llama(Path(tmp.name) / "demo", size="demo")
    rng = random.Random(0)
    prompts = [f"{rng.randint(0, 99)}{rng.choice('+-*')}{rng.randint(0, 99)}=" for _ in range(args.prompts)]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    sampler = TransformersSampler(path, batch_size=args.batch_size, chat="false")  # the naive loop feeds plain text too
    model, tokenizer = sampler.model, sampler.tokenizer
    total = args.prompts * args.n

    seed_loop(model, tokenizer, prompts[:1], 1, params)  # warm-up
    sampler.sample(prompts[:args.batch_size], args.n, params)
    loop_s, loop_texts = best_of(lambda: seed_loop(model, tokenizer, prompts, args.n, params), args.repeats)
    batch_s, groups = best_of(lambda: sampler.sample(prompts, args.n, params), args.repeats)
    batch_texts = [c.text for g in groups for c in g]
    assert len(loop_texts) == len(batch_texts) == total

    chars = lambda texts: sum(len(t) for t in texts)  # noqa: E731 - char-level model: one token per character
    print(f"model: {path} ({n_params(path) / 1e6:.2f}M params){'' if args.model else ' RANDOM weights'}; "
          f"torch threads {torch.get_num_threads()}")
    print(f"{args.prompts} prompts x {args.n} candidates x {args.max_new_tokens} new tokens = {total} candidates; "
          f"temperature {params.temperature}, top_p {params.top_p}, top_k off")
    print(f"{'method':<34}{'seconds':>9}{'cand/s':>10}{'chars out':>11}")
    print(f"{'seed loop (1 generate per cand.)':<34}{loop_s:>9.2f}{total / loop_s:>10.1f}{chars(loop_texts):>11}")
    print(f"{'batched (' + str(args.batch_size) + ' prompts x n per call)':<34}{batch_s:>9.2f}{total / batch_s:>10.1f}"
          f"{chars(batch_texts):>11}")
    print(f"speed-up: {loop_s / batch_s:.1f}x (best of {args.repeats} runs each)")


if __name__ == "__main__":
    main()
