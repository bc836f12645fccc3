"""template_fit: the pairs as the trainer tokenises them, with real tokenizers saved by save_pretrained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from prefdata.checks.checklist import CheckInputs, load_config, run_checklist
from prefdata.checks.template_fit import check_template_fit, load_tokenizer, render

REPO = Path(__file__).resolve().parents[1]

PAIRS = pl.DataFrame({
    "id": ["p1", "p2", "p3"],
    "prompt": ["What is 2+2?", "Name a colour.", "Say hi."],
    "chosen": ["4", "Blue, like the sky on a clear day.", "hi"],
    "rejected": ["5", "Sound.", "bye"],
})


def _saved(tokenizer, path: Path) -> Path:
    """Save and load back, the way a trainer meets a tokenizer."""
    tokenizer.save_pretrained(path)
    return path


def _char_tokenizer(template: str | None):
    from bench.tiny_models import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = template
    return tok


def test_good_template_passes_and_renders_like_the_trainer(tiny_llama):
    tok = load_tokenizer(str(tiny_llama))
    result = check_template_fit(PAIRS, tok)
    assert result.status == "pass" and result.metric == 0.0 and result.offending == ()
    prompt, full = render(tok, "Say hi.", "hi")
    # the template ends the turn with "\n" and writes no EOS: the trainer's text ends with one
    assert prompt == "user: Say hi.\nassistant: " and full == "user: Say hi.\nassistant: hi\n</s>"
    # one BOS, from the tokenizer (the template writes none)
    ids = tok(full)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id


def test_truncation_at_a_small_max_length(tiny_llama):
    tok = load_tokenizer(str(tiny_llama))
    # "user: Name a colour.\nassistant: " is 32 characters + BOS: the long chosen side passes 40 tokens
    result = check_template_fit(PAIRS, tok, max_length=40)
    assert result.status == "fail" and result.offending == ("p2",)
    assert result.details["truncated"] == 1 and result.metric == pytest.approx(1 / 3)
    assert result.details["problems"]["p2"] == ["truncated"]
    assert check_template_fit(PAIRS, tok, max_length=80).status == "pass"  # 1 + 32 + 34 + "\\n"


def test_template_that_writes_bos_keeps_one_bos(tmp_path):
    """A template writing the BOS while the tokenizer adds one would give two (TRL's gotcha); the one
    rendering drops the template's, so sampling and every trainer see one, and the check finds none."""
    template = "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" \
               "{% if add_generation_prompt %}assistant: {% endif %}"
    tok = load_tokenizer(str(_saved(_char_tokenizer(template), tmp_path / "tok")))
    result = check_template_fit(PAIRS, tok)
    assert result.status == "pass" and result.details["doubled_bos"] == 0
    prompt, full = render(tok, "Say hi.", "hi")
    assert tok(prompt)["input_ids"][:2] == [tok.bos_token_id, tok("u", add_special_tokens=False)["input_ids"][0]]
    assert not prompt.startswith(tok.bos_token) and full.startswith(prompt)


def test_template_that_drops_eos_on_the_last_turn_gets_it_back(tmp_path):
    # EOS after every turn but the last one: the response the loss sees would never end; the one
    # rendering ends every completion with the EOS, as TRL does for text.
    dropping = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% if not loop.last %}{{ eos_token }}" \
               "{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
    tok = load_tokenizer(str(_saved(_char_tokenizer(dropping), tmp_path / "dropping")))
    result = check_template_fit(PAIRS, tok)
    assert result.details["missing_eos"] == 0
    prompt, full = render(tok, "Say hi.", "hi")
    assert full.endswith("assistant: hi" + tok.eos_token)  # (HF renders templates with trim_blocks: no "\n")
    # ...but this template writes the user's turn differently alone (no EOS: it is the last turn) than
    # inside the conversation: the prompt sampled on is not the context trained on
    assert not full.startswith(prompt) and result.status == "fail" and result.details["prompt_not_prefix"] == 3

    keeping = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% if m['role'] == 'assistant' %}" \
              "{{ eos_token }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
    tok = load_tokenizer(str(_saved(_char_tokenizer(keeping), tmp_path / "keeping")))
    assert check_template_fit(PAIRS, tok).status == "pass"  # EOS then "\n": still ends with EOS


def test_plain_tokenizer_without_eos_token(tmp_path):
    tok = _char_tokenizer(None)
    tok.eos_token = None
    tok = load_tokenizer(str(_saved(tok, tmp_path / "no-eos")))
    assert tok.eos_token is None and not tok.chat_template
    result = check_template_fit(PAIRS, tok)
    assert result.status == "fail" and result.details["missing_eos"] == 3
    assert result.details["template"] == "plain concatenation"


def _merging_bpe(path: Path) -> Path:
    """A BPE tokenizer without a chat template whose merges join across a prompt/response boundary:
    "a" + "b" is one token "ab"."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = list("abcdefghijklmnopqrstuvwxyz ?.")
    vocab = {t: i for i, t in enumerate(specials + chars + ["ab"])}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="<unk>"))
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(path)
    return path


def test_prompt_tokens_that_merge_with_the_response(tmp_path):
    tok = load_tokenizer(str(_merging_bpe(tmp_path / "bpe")))
    assert not tok.chat_template
    pairs = pl.DataFrame({
        "id": ["merges", "clean"],
        "prompt": ["say a", "say c"],       # "a" + "b..." becomes "ab": the prompt's last token is gone
        "chosen": ["bcd", "bcd"],
        "rejected": ["x", "x"],
    })
    result = check_template_fit(pairs, tok)
    assert result.offending == ("merges",) and result.details["problems"]["merges"] == ["prompt_not_prefix"]
    assert result.status == "fail" and result.metric == 0.5
    waived = check_template_fit(pairs, tok, max_offending_share=0.5)
    assert waived.status == "pass"


def test_conversational_rows_keep_their_turns(tiny_llama):
    tok = load_tokenizer(str(tiny_llama))
    turns = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}])
    prompt, full = render(tok, "Say hi.", "hi", turns)
    assert prompt == "system: Be brief.\nuser: Say hi.\nassistant: "
    assert full == "system: Be brief.\nuser: Say hi.\nassistant: hi\n</s>"


def test_runner_skips_without_a_tokenizer_and_config_sets_max_length(tiny_llama, tmp_path):
    [skipped] = run_checklist(CheckInputs(pairs=PAIRS), only=["template_fit"])
    assert skipped.status == "skip" and "--tokenizer" in skipped.message
    config_file = tmp_path / "c.yaml"
    config_file.write_text("checks:\n  template_fit: {max_length: 40}\n")
    [cut] = run_checklist(CheckInputs(pairs=PAIRS, tokenizer=load_tokenizer(str(tiny_llama))),
                          load_config(config_file), only=["template_fit"])
    assert cut.status == "fail" and cut.offending == ("p2",)
    config_file.write_text("checks:\n  template_fit: {max_length: 0}\n")
    with pytest.raises(Exception, match="out of range"):
        load_config(config_file)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(cwd / "store")}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)


def test_cli_check_with_tokenizer_and_max_length(tiny_llama, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS.drop("id").to_dicts()))
    done = _cli("check", str(data), "--tokenizer", str(tiny_llama), "--max-length", "40",
                "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    report = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert report["template_fit"]["status"] == "fail", done.stdout + done.stderr
    assert report["template_fit"]["details"]["truncated"] == 1 and done.returncode == 1

    skipped = _cli("check", str(data), "--json", str(tmp_path / "s.json"), cwd=tmp_path)
    report = {c["id"]: c for c in json.loads((tmp_path / "s.json").read_text())["checks"]}
    assert report["template_fit"]["status"] == "skip" and "--tokenizer" in report["template_fit"]["message"]
    assert skipped.returncode in (0, 1)

    bad = _cli("check", str(data), "--tokenizer", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert bad.returncode == 2 and "--tokenizer" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_trainer_rows_without_ids_are_named_by_index(tiny_llama):
    """The trainers call the check on their own rows (prompt, chosen, rejected; no id column)."""
    rows = pl.DataFrame(PAIRS.drop("id").to_dicts())
    result = check_template_fit(rows, load_tokenizer(str(tiny_llama)), max_length=40)
    assert result.status == "fail" and result.offending == ("1",)


def test_the_rendering_given_is_the_one_used(tmp_path):
    """A template that writes only the user's text (the demo world's) cannot carry a reply: chat auto
    renders plain text there; a Rendering passed in (what train and a version's lineage say) wins."""
    from prefdata.models.chat import Rendering, resolve

    from prefdata.world.tokenizer import CHAT_TEMPLATE as USER_TURNS_ONLY

    tok = load_tokenizer(str(_saved(_char_tokenizer(USER_TURNS_ONLY), tmp_path / "tok")))
    auto = check_template_fit(PAIRS, tok)
    assert auto.status == "pass" and auto.details["template"] == "plain concatenation"
    assert auto.details["rendering"] == {"chat": False, "template_sha256": None, "system": None}
    assert render(tok, "Say hi.", "hi") == ("Say hi.", "Say hi.hi" + tok.eos_token)
    with pytest.raises(ValueError, match="does not write the assistant's turn"):
        resolve(tok, "true")
    system = Rendering(False, None, "Be brief.")
    assert render(tok, "Say hi.", "hi", rendering=system) == ("Be brief.\n\nSay hi.", "Be brief.\n\nSay hi.hi" + tok.eos_token)


def test_cli_check_chat_option(tiny_llama, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS.drop("id").to_dicts()))
    plain = _cli("check", str(data), "--tokenizer", str(tiny_llama), "--chat", "false", "--system-prompt", "Be brief.",
                 "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    report = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert report["template_fit"]["details"]["template"] == "plain concatenation", plain.stdout + plain.stderr
    assert report["template_fit"]["details"]["rendering"] == {"chat": False, "template_sha256": None, "system": "Be brief."}

    bad = _cli("check", str(data), "--tokenizer", str(tiny_llama), "--chat", "maybe", cwd=tmp_path)
    assert bad.returncode == 2 and "--chat" in bad.stderr and "auto, true, false" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
