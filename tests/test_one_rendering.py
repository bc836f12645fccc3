"""One pair, one rendering (issue 21, item 1): the token ids its prompt was sampled on, the ids the
template_fit check measures, and the ids in every pair trainer's collated batch are the same list.

A real tiny chat model (`tiny_llama`: a char-level Llama whose tokenizer's template writes
"user: ...\\nassistant: ..."), a system prompt, the real sampler, the real check and the real TRL
trainers as `prefdata train` builds them (stopped before their first step).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import polars as pl
import pytest

SYSTEM = "Be brief."
PROMPT, CHOSEN, REJECTED = "Say hi.", "hi", "bye"
REPORT = {"passed": True, "checks": [{"id": "min_size", "status": "pass", "metric": 2, "threshold": 1}]}


class Built(Exception):
    def __init__(self, trainer):
        super().__init__("built")
        self.trainer = trainer


def sampled_prompt_ids(model_dir) -> tuple[list[int], object, object]:
    """The ids `generate` was given for PROMPT by the collect step's sampler, and its rendering."""
    from prefdata.collect.sampling import SamplingParams, TransformersSampler

    sampler = TransformersSampler(model_dir, chat="auto", system=SYSTEM)
    seen: list[list[int]] = []
    real = sampler.model.generate

    def generate(*args, **kwargs):
        seen.extend(row[mask.bool()].tolist() for row, mask in zip(kwargs["input_ids"], kwargs["attention_mask"]))
        return real(*args, **kwargs)

    sampler.model.generate = generate
    sampler.sample([PROMPT], 1, SamplingParams(temperature=0.0, max_new_tokens=2))
    assert len(seen) == 1
    return seen[0], sampler.rendering, sampler.tokenizer


def template_fit_ids(tokenizer, rendering, monkeypatch) -> tuple[list[int], list[list[int]]]:
    """The prompt ids and the prompt + side ids the template_fit check tokenised for the pair."""
    import prefdata.checks.template_fit as template_fit

    calls: list[list[list[int]]] = []
    real = template_fit._ids

    def ids(tok, texts):
        calls.append(real(tok, texts))
        return calls[-1]

    monkeypatch.setattr(template_fit, "_ids", ids)
    pairs = pl.DataFrame({"id": ["p1"], "prompt": [PROMPT], "chosen": [CHOSEN], "rejected": [REJECTED]})
    result = template_fit.check_template_fit(pairs, tokenizer, max_length=256, rendering=rendering)
    assert result.status == "pass", result.message
    prompt_ids, full_ids = calls  # prompts (one per side), then prompt + side
    assert prompt_ids[0] == prompt_ids[1]
    return prompt_ids[0], full_ids


def test_sampled_checked_and_trained_ids_are_one_list(tiny_llama, tmp_path, monkeypatch):
    from prefdata.data.store import Store, tables_for
    from prefdata.trainers import dpo, rm, sft, train

    sampled, rendering, tokenizer = sampled_prompt_ids(tiny_llama)
    assert rendering.chat and rendering.system == SYSTEM
    assert tokenizer.decode(sampled, skip_special_tokens=True) == f"system: {SYSTEM}\nuser: {PROMPT}\nassistant: "
    assert sampled.count(tokenizer.bos_token_id) == 1

    checked, (chosen_full, rejected_full) = template_fit_ids(tokenizer, rendering, monkeypatch)
    assert checked == sampled
    assert chosen_full[:len(sampled)] == sampled and rejected_full[:len(sampled)] == sampled
    assert chosen_full[-1] == rejected_full[-1] == tokenizer.eos_token_id

    # the version as collect writes it: the pair, and the rendering its prompts were sampled with
    store = Store(str(tmp_path / "store"))
    pairs = pl.DataFrame([{"id": "p1", "prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED, "split": "train"},
                          {"id": "p2", "prompt": "Say no.", "chosen": "no", "rejected": "yes", "split": "test"}])
    version = store.create("one", tables_for(pairs), counts={"read": 2, "kept": 2, "quarantined": 0},
                           lineage={"parent": None, "sources": [], "flow_run": None, "components": {},
                                    "rendering": rendering.record()})
    store.set_status(version.ref, "validated", report=REPORT)

    config = {"max_steps": 1, "per_device_train_batch_size": 1, "sft_ratio": 0.0, "length_max_new_tokens": 0,
              "report_to": "none", "lora_r": 4, "lora_alpha": 8}
    for method, module in (("dpo", dpo), ("rm", rm), ("sft", sft)):
        def built(name, trainer, *args, **kwargs):
            raise Built(trainer)

        monkeypatch.setattr(module, "train_and_measure", built)
        with pytest.raises(Built) as got:
            train(method, version.ref, config, store=str(tmp_path / "store"), base_model=str(tiny_llama),
                  output_dir=tmp_path / method)
        trainer = got.value.trainer
        [row] = [r for r in trainer.train_dataset]
        features = {k: v for k, v in row.items() if k.endswith(("_ids", "_mask")) or k == "labels"}
        batch = trainer.data_collator([features])
        collated = [[t for t, m in zip(ids, mask) if m]
                    for ids, mask in zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist())]
        if method == "sft":
            assert collated == [chosen_full], method
            assert batch["labels"][0, :len(sampled)].tolist() == [-100] * len(sampled)  # the prompt is not trained
        else:
            assert collated == [chosen_full, rejected_full], method
        if method == "dpo":
            assert row["prompt_ids"] == sampled
