"""Tiny random-init models saved like real checkpoints, for tests and benchmarks.

RANDOM WEIGHTS: these models produce gibberish. They exist so that samplers, judges and servers
run end to end on CPU in seconds, through the same `from_pretrained` path a real checkpoint takes.

    build_char_tokenizer()                    char-level PreTrainedTokenizerFast (printable ASCII +
                                              newline; <pad> <s> </s> <unk>) with a chat template
    build_tiny_llama(path, size="test")       LlamaForCausalLM + tokenizer saved to `path`
                                              ("test": ~0.3M params, "demo": ~1M params)
    build_tiny_reward_model(path)             LlamaForSequenceClassification (1 label) + tokenizer
    build_tiny_gguf(path)                     a ~60k-parameter llama written as a GGUF file, as
                                              llama.cpp's converter writes one (byte-level BPE with a
                                              ChatML template; q/k rows permuted), and the same
                                              model as a save_pretrained folder beside it

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


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _llama_cpp_permute(weights, n_head: int):
    """The row order llama.cpp's convert_hf_to_gguf.py gives q and k projections (rotary halves
    interleaved); transformers' GGUF loader undoes it."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def build_tiny_gguf(path: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """A random tiny llama as a GGUF file at `path` (float32 tensors, grouped-query attention, a
    byte-level BPE vocabulary with two merges and ChatML's control tokens, the chat template in its
    metadata) and the same model saved with save_pretrained in `path`.hf/ (with the tokenizer read
    back from the file), so a test can compare what is read from the GGUF file with the weights that
    went in. Returns (gguf file, hf folder)."""
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    torch.manual_seed(seed)
    tokens = list(bytes_to_unicode().values()) + ["he", "\u0120t", "<|im_start|>", "<|im_end|>"]
    types = [1] * (len(tokens) - 2) + [3, 3]  # 1 normal, 3 control
    start, end = len(tokens) - 2, len(tokens) - 1
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=512,
                         rms_norm_eps=1e-5, bos_token_id=start, eos_token_id=end,
                         pad_token_id=end, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    path = Path(path)
    hf = path.with_name(path.name + ".hf")
    model.save_pretrained(hf)

    writer = gguf.GGUFWriter(str(path), "llama")
    head_dim = config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_rope_dimension_count(head_dim)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_vocab_size(config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["h e", "\u0120 t"])
    writer.add_bos_token_id(start)
    writer.add_eos_token_id(end)
    writer.add_pad_token_id(end)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for name, tensor in model.state_dict().items():
        data = tensor.float().numpy()
        if name not in names:
            _, _, layer, *rest = name.split(".")  # model.layers.N.<part>.weight
            part = ".".join(rest[:-1])
            names[name] = f"blk.{layer}.{parts[part]}.weight"
            if part == "self_attn.q_proj":
                data = _llama_cpp_permute(data, config.num_attention_heads)
            elif part == "self_attn.k_proj":
                data = _llama_cpp_permute(data, config.num_key_value_heads)
        writer.add_tensor(names[name], data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from transformers import AutoTokenizer

    # the tokenizer the file describes, beside the weights that went in (the folder is then complete)
    AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(hf)
    return path, hf


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
