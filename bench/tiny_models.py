"""Tiny random-init models saved like real checkpoints, for tests and benchmarks.

RANDOM WEIGHTS: these models produce gibberish. They exist so that samplers, judges and servers
run end to end on CPU in seconds, through the same `from_pretrained` path a real checkpoint takes.

    build_char_tokenizer()                    char-level PreTrainedTokenizerFast (printable ASCII +
                                              newline; <pad> <s> </s> <unk>) with a chat template
    build_tiny_llama(path, size="test")       LlamaForCausalLM + tokenizer saved to `path`
                                              ("test": ~0.3M params, "demo": ~1M params)
    build_tiny_reward_model(path)             LlamaForSequenceClassification (1 label) + tokenizer

The chat template is a plain "role: content" transcript, so `transformers serve` can answer
/v1/chat/completions with these models (a tokenizer without a template cannot).
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
CHARS = string.printable[:95] + "\n"  # the 95 printable ASCII characters (space included) and newline
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
SIZES = {
    # hidden, layers, heads, intermediate: ~0.3M and ~1.0M parameters with the 100-token vocabulary
    "test": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=4, intermediate_size=384),
    "demo": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
}


def build_char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + tuple(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Every character is its own "word"; Fuse joins them back without the spaces WordLevel would add.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _config(tokenizer, size: str, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=4096, num_key_value_heads=None,
                       pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False, **SIZES[size], **extra)


def build_tiny_llama(path: str | Path, size: str = "test", seed: int = 0) -> Path:
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    model = LlamaForCausalLM(_config(tokenizer, size)).eval()
    # An explicit generation config, as a trained checkpoint ships: greedy unless a request asks to sample.
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_reward_model(path: str | Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    model = LlamaForSequenceClassification(_config(tokenizer, "test", num_labels=1)).eval()
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def n_params(path: str | Path) -> int:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())


def model_bench_parser(doc: str, model_help: str):
    """The parser of a benchmark that times a model (bench_judge, bench_sampling): its docstring as
    the description, layout kept; --model (a local folder, else a tiny model built here) and
    --repeats (the fastest of that many rounds is reported)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help=model_help)
    parser.add_argument("--repeats", type=int, default=2)
    return parser
