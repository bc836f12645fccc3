"""A character-level tokenizer built locally with the `tokenizers` library.

One token per character (a WordLevel model over single characters, after a pre-tokenizer that
isolates every character), `<bos>` prepended by the post-processor, `<eos>` ending completions,
`<pad>` on the left so batched greedy generation lines prompts up at the right edge. Wrapped as a
`PreTrainedTokenizerFast` and saved with `save_pretrained`, so `AutoTokenizer.from_pretrained(path)`
loads it like any hub tokenizer and a real model's tokenizer can replace it by path.

Its chat template is the bare text of the user turns after `<bos>`: the model knows no roles, and
an OpenAI-compatible server (`transformers serve`) must hand it exactly the prompt format it was
trained on, so the judge and the samplers reach it through the same chat API as a real model.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
# Everything the world's formats use, plus upper case and a little punctuation for judge prompts
# ("A"/"B" verdicts) and for user text; anything else maps to <unk>.
# System turns are dropped: a 1M-parameter model trained on "347+058=" has no use for instructions.
CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
CHARACTERS = string.digits + string.ascii_lowercase + string.ascii_uppercase + " +-=:?|>.,\n"


def build_tokenizer():
    """The char-level tokenizer as a `PreTrainedTokenizerFast` (left padding)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + tuple(CHARACTERS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.add_special_tokens(list(SPECIALS))
    # Every character its own piece; [\s\S] rather than "." so a newline is a token too.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join characters back without the spaces WordLevel would add
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tokenizer(tokenizer, path: Path) -> None:
    tokenizer.save_pretrained(path)
    # transformers 5 writes its own class name; the 4.x name loads in both (pyproject allows >= 4.50).
    cfg_path = Path(path) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
