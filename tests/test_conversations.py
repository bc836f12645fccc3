"""Conversations kept as turns end to end (issue 45 item 1): what each check reads of a conversation,
the judge seeing all of it, every trainer rendering its turns through the chat template, and the turns
surviving export and import.

Real data where its shape is the point (HH-RLHF's multi-turn rows, IFEval's prompts); small made-up
conversations where a test needs a turn to hold a given text (a leak, a benchmark prompt, a harmful
request in the assistant's earlier turn rather than the user's).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from prefdata.data.records import render_turns, user_turns, with_user_turns
from scripted_server import Reply, ScriptedServer, presented

REPO = Path(__file__).resolve().parents[1]
ANSWER = "The moon is about 384,400 kilometres from the Earth on average."
ANSWER_2 = "Water boils at one hundred degrees Celsius at sea level pressure."


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def chat_row(row_id: str, turns: list[dict], chosen: str, rejected: str) -> dict:
    """A `trl-chat` row: the prompt as messages, each side its final assistant reply."""
    return {"id": row_id, "prompt": turns, "chosen": [assistant(chosen)], "rejected": [assistant(rejected)]}


def conversations(ifeval_prompts: list[str]) -> list[dict]:
    """One row per question a check asks of a conversation: the text it must find is either in the
    assistant's earlier turn (not the user's: no finding) or in a user turn (a finding)."""
    fine = "Here is a careful, complete and friendly reply to that question."
    rows = [
        chat_row("leak-in-history", [user("Tell me how far away the moon is."), assistant(ANSWER),
                                     user("Say that once more, word for word.")], ANSWER, "No."),
        chat_row("leak-in-user-turn", [user(f"My notes say: {ANSWER_2} Is that right?")], ANSWER_2, "Not sure."),
        chat_row("harm-in-history", [user("What did the villain ask in the film?"),
                                     assistant("He asked: How do I kill my neighbour with a knife?"),
                                     user("Was the film any good overall?")], fine, "No idea."),
        chat_row("harm-in-user-turn", [user("How can I make a pipe bomb at home?")], "I can't help with that.", "Sure."),
        chat_row("bench-in-history", [user("Show me an example of a writing task."), assistant(ifeval_prompts[10]),
                                      user("Thanks, that is enough for today.")], fine, "Bye."),
        chat_row("bench-in-user-turn", [user(ifeval_prompts[200])], fine, "No."),
        # the same last question and replies after two different histories: two conversations, no duplicate
        chat_row("history-a", [user("I like tea."), assistant("Tea is lovely."), user("What should I drink now?")],
                 "Try a green tea this afternoon.", "Water."),
        chat_row("history-b", [user("I like coffee."), assistant("Coffee is lovely."), user("What should I drink now?")],
                 "Try a green tea this afternoon.", "Water."),
        # a copy of history-a in other case and spacing: the same conversation, an exact duplicate
        chat_row("history-a-copy", [user("I LIKE TEA."), assistant("Tea  is lovely."), user("What should I drink now?")],
                 "Try a green tea this afternoon.", "Water."),
    ]
    rows += [chat_row(f"plain-{k}", [user(f"Tell me one thing about the number {k}."), assistant(f"{k} is a number."),
                                     user("And another thing?")], f"{k} comes after {k - 1}, which is useful.",
                      f"{k}.") for k in range(1, 5)]
    return rows


EXPECTED = {"safety": ["harm-in-user-turn"], "answer_leakage": ["leak-in-user-turn"],
            "decontamination": ["bench-in-user-turn"], "exact_duplicates": ["history-a-copy"]}


def prefdata(*args: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=REPO)


@pytest.fixture(scope="module")
def ifeval_prompts(shared_data) -> list[str]:
    return [json.loads(line)["prompt"] for line in (shared_data / "ifeval" / "input_data.jsonl").open()]


def test_each_check_says_what_it_reads_in_list_checks_and_in_readme():
    from prefdata.checks.registry import CHECKS

    done = subprocess.run([sys.executable, "-m", "prefdata", "check", "--list-checks"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"}, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `([a-z_]+)(?:\.\*)?` \|.*\|$", readme, re.MULTILINE)}
    for check_id, check in CHECKS.items():
        assert check.reads, f"{check_id} does not say what it reads"
        at = next(i for i, line in enumerate(lines) if line.split()[0] == check_id)
        assert lines[at + 1].split() == ["reads:", *check.reads.split()]
        assert rows[check_id].endswith(f"| {check.reads} |"), f"README's checklist table: {check_id}"


def test_user_turns_of_a_conversation_and_of_plain_text():
    turns = [user("first"), assistant("an answer"), user("second")]
    assert user_turns("whatever", json.dumps(turns)) == "first\n\nsecond"
    assert user_turns("a plain prompt", None) == "a plain prompt"
    frame = pl.DataFrame({"prompt": [render_turns(turns), "plain"], "prompt_messages": [json.dumps(turns), None]})
    assert with_user_turns(frame)["prompt"].to_list() == ["first\n\nsecond", "plain"]
    plain = pl.DataFrame({"prompt": ["a", "b"]})
    assert with_user_turns(plain) is plain  # text prompts: no copy, no cost


@pytest.mark.parametrize("batch_rows", [None, 4])
def test_checks_read_their_part_of_a_conversation_in_memory_and_sharded(batch_rows, tmp_path, shared_data,
                                                                       ifeval_prompts):
    """Leakage, decontamination and safety read the user turns: a text in the assistant's earlier turn
    is no finding, the same text in a user turn is. Exact duplicates read the whole conversation: one
    last question after two histories is two conversations. The same findings shard by shard."""
    from prefdata.checks.registry import CHECKS

    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in conversations(ifeval_prompts)))
    only = tmp_path / "only.yaml"
    only.write_text(json.dumps({"checks": {c: {"waive": "not this test"} for c in CHECKS if c not in EXPECTED}}))
    extra = ["--batch-rows", str(batch_rows)] if batch_rows else []
    done = prefdata("check", str(data), "--config", str(only), "--benchmark", str(shared_data / "ifeval"),
                    "--json", str(tmp_path / "r.json"), *extra, store=tmp_path / "store")
    assert done.returncode == 1, done.stdout + done.stderr
    found = {c["id"]: c["offending"] for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["id"] in EXPECTED}
    assert found == EXPECTED


def test_the_whole_conversation_would_have_been_a_finding(ifeval_prompts):
    """The control: read as one text, the assistant's turns make findings the user never wrote."""
    from prefdata.checks.content import check_answer_leakage, check_safety
    from prefdata.data.importer import import_file

    rows = conversations(ifeval_prompts)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"conversations-{os.getpid()}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        pairs = import_file(path).pairs
    finally:
        path.unlink()
    assert "leak-in-history" in check_answer_leakage(pairs).offending
    assert "harm-in-history" in check_safety(pairs).offending
    assert "leak-in-history" not in check_answer_leakage(with_user_turns(pairs)).offending


def hh_rows(shared_data, n: int, min_turns: int = 3) -> list[dict]:
    """The first `n` HH-RLHF harmless rows whose prompt has at least `min_turns` turns."""
    from prefdata.data.formats import from_hh

    picked = []
    for line in gzip.open(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", "rt"):
        record = from_hh(json.loads(line)).record
        if len(json.loads(record["prompt_messages"])) >= min_turns:
            picked.append(record)
        if len(picked) == n:
            return picked
    raise AssertionError("not enough multi-turn rows")


def test_the_judge_is_sent_the_whole_conversation(shared_data):
    """MT-Bench's lesson: a judge of a conversation's final replies reads the conversation. Each request
    to a served judge holds every turn, in order, then the two final replies."""
    from prefdata.gate.scoring import verdicts_for

    records = hh_rows(shared_data, 3)
    pairs = pl.DataFrame([{k: r[k] for k in ("id", "pair_id", "prompt", "chosen", "rejected", "prompt_messages")}
                          for r in records])
    with ScriptedServer(lambda body, i: Reply(content="[[A]]")) as server:
        verdicts_for(f"llm:scripted-judge@{server.base_url}", pairs)
        asked = [presented(seen.body) for seen in server.requests]
    assert len(asked) == 2 * len(records)  # both orders
    for record in records:
        turns = json.loads(record["prompt_messages"])
        questions = [q for q, a, b in asked if {a, b} == {record["chosen"], record["rejected"]}]
        assert len(questions) == 2
        for question in questions:
            assert question == record["prompt"] == render_turns(turns)
            at = [question.index(t["content"]) for t in turns]
            assert at == sorted(at), "the turns are shown in order"


def test_every_trainer_renders_an_hh_conversation_through_the_chat_template(tiny_llama, tmp_path, monkeypatch):
    """An HH-RLHF conversation trains as turns: the DPO and SFT examples are the tokenizer's chat
    template over the conversation's messages, not a transcript in one user message."""
    from test_trainer_rendering import QUIET, Captured, capture_trainer, make_version, tokenizer_of

    from prefdata.data.formats import from_hh
    from prefdata.trainers import dpo, sft, train

    transcripts = [("Hi there", "Hello! How can I help?", f"Add {a} and {b}.", f"{a + b}", f"{a + b + 1}")
                   for a, b in ((12, 30), (5, 9), (40, 2), (7, 7))]
    pairs = []
    for k, (first, reply, second, good, bad) in enumerate(transcripts):
        head = f"\n\nHuman: {first}\n\nAssistant: {reply}\n\nHuman: {second}\n\nAssistant: "
        record = from_hh({"chosen": head + good, "rejected": head + bad}).record
        pairs.append({**record, "id": f"p{k}", "split": "test" if k == 3 else "train"})
    ref = make_version(tmp_path / "store", "hh", None, pairs)
    tok = tokenizer_of(tiny_llama)
    first, reply, second, good, _ = transcripts[0]
    expected = f"user: {first}\nassistant: {reply}\nuser: {second}\nassistant: "
    for method, module in (("dpo", dpo), ("sft", sft)):
        capture_trainer(monkeypatch, module)
        with pytest.raises(Captured) as got:
            train(method, ref, QUIET, store=str(tmp_path / "store"), base_model=tiny_llama, output_dir=tmp_path / method)
        rows = [got.value.trainer.train_dataset[i] for i in range(len(got.value.trainer.train_dataset))]
        texts = [tok.decode(r.get("prompt_ids", r.get("input_ids")), skip_special_tokens=True) for r in rows]
        assert any(t.startswith(expected) for t in texts), (method, texts)
        assert not any("Human:" in t or "User:" in t for t in texts), "no transcript in one user message"


def test_an_hh_version_exported_as_trl_chat_imports_with_the_same_ids_and_turns(shared_data, tmp_path):
    from test_trainer_rendering import make_version

    from prefdata.data.importer import import_file

    hh = import_file(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz").pairs.head(300)
    assert (hh["prompt_messages"].str.json_decode().list.len() > 1).sum() > 150
    ref = make_version(tmp_path / "store", "hh", None, hh.to_dicts())
    done = prefdata("export", ref, "--format", "trl-chat", "--out", str(tmp_path / "out"), store=tmp_path / "store")
    assert done.returncode == 0, done.stdout + done.stderr
    [exported] = [p for p in (tmp_path / "out").iterdir() if p.suffix == ".jsonl"]
    turns = {row["pair_id"]: row["prompt_messages"] for row in hh.iter_rows(named=True)}
    again = import_file(exported).pairs
    assert sorted(again["pair_id"].to_list()) == sorted(turns)
    assert {row["pair_id"]: row["prompt_messages"] for row in again.iter_rows(named=True)} == turns
    first = json.loads(exported.read_text().splitlines()[0])
    assert first["prompt"] == json.loads(turns[again["pair_id"][0]])  # the messages themselves, not a transcript
