"""The model layer: where a model path becomes a loaded model, and what a model computes.

    loading     tokenizers, causal LMs, reward models and configs from a folder, a hub name or a
                .gguf file (converted once into a cached folder); `prefdata model import-gguf`
    chat        the one rendering of a prompt (and a reply) as model input: chat template on or
                off, its sha256 and the system prompt recorded; sampling, judging, template_fit
                and the trainers call it
    reward      a reward model's score of prompt + response, rendered as TRL's RewardTrainer trains
    logprobs    sequence log-probabilities of responses under a causal LM
    generation  the one generate loop: left-padded batches, greedy or sampled (seeded once), stop ids,
                the new tokens and their text; sampling, the in-process judge, the trainers'
                length figure, PPO's rollout and the demo world decode through it

`from_pretrained`, `apply_chat_template` and transformers' `generate` are called here and nowhere else
(tests/test_layers.py; vLLM's engine keeps its own `generate`, in collect.sampling).

May import: prefdata.base.
"""
