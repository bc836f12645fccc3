"""A conversation's history in Argilla as a chat field (issue 45), against a real argilla-server
2.8.0 on 127.0.0.1 (one per module, in the environment cached at .prefdata/argilla/venv), over
real HTTP, with Argilla's own SDK, and in a real browser (Debian's chromium).

A multi-turn `trl-chat` file is imported as a user would, its version pushed for a label audit,
and the dataset read back through the SDK: a chat prompt field holding the turns in order. Plain
rows keep the text field; each kind of dataset takes the other kind of row without losing it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import local_argilla

from prefdata.base.errors import PrefdataError, UnusableInput

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / ".prefdata" / "test-artifacts"

# Three conversations as TRL's conversational preference rows: the prompt the turns so far (user,
# assistant, user), chosen and rejected the final assistant reply. Words in the earlier turns
# ("Lisbon", "café") are what the chat field must show and the search must find.
CONVERSATIONS = [
    {"prompt": [{"role": "user", "content": "Which city is the capital of Portugal?"},
                {"role": "assistant", "content": "Lisbon is the capital of Portugal."},
                {"role": "user", "content": "And roughly how many people live there?"}],
     "chosen": [{"role": "assistant", "content": "About 550,000 in the city proper, nearly 3 million in the metro area."}],
     "rejected": [{"role": "assistant", "content": "About 40 million people."}]},
    {"prompt": [{"role": "user", "content": "I ordered a café au lait in Paris."},
                {"role": "assistant", "content": "Nice! That is coffee with hot milk."},
                {"role": "user", "content": "Is it the same as a latte?"}],
     "chosen": [{"role": "assistant", "content": "Close: a latte uses espresso, this one brewed coffee."}],
     "rejected": [{"role": "assistant", "content": "Yes, exactly the same drink."}]},
    {"prompt": [{"role": "user", "content": "Name a prime number."},
                {"role": "assistant", "content": "7 is prime."},
                {"role": "user", "content": "Another one, larger than 10?"}],
     "chosen": [{"role": "assistant", "content": "11."}],
     "rejected": [{"role": "assistant", "content": "12."}]},
]


@pytest.fixture(scope="module")
def argilla(tmp_path_factory):
    """(LocalArgilla, ServerInfo) of a real server with a fresh database, on a free port."""
    from prefdata.argilla.server import free_port

    server = local_argilla(tmp_path_factory.mktemp("argilla-chat"))
    info = server.start(port=free_port(), log=print)
    yield server, info
    server.stop()


def _cli(*args: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env={**os.environ, "PREFDATA_STORE": str(store), "COLUMNS": "200"})


def _turns(value) -> list[tuple[str, str]]:
    """A chat field's value as (role, content) pairs, whether the SDK gives models or dicts."""
    return [(m["role"], m["content"]) if isinstance(m, dict) else (m.role, m.content) for m in value]


def _sdk(info, key=None):
    import argilla as rg

    return rg.Argilla(api_url=info.url, api_key=key or info.api_key)


def _dataset(info, name: str, key=None):
    return _sdk(info, key).datasets(name, workspace="prefdata")


@pytest.fixture(scope="module")
def chat_version(tmp_path_factory):
    """The three conversations imported with `prefdata import` (a store of their own) and that
    version's pairs, each with its prompt_messages."""
    from prefdata.data.store import Store

    folder = tmp_path_factory.mktemp("chat-import")
    store, src = folder / "store", folder / "conversations.jsonl"
    src.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in CONVERSATIONS), encoding="utf-8")
    run = _cli("import", str(src), "--format", "trl-chat", "--name", "chat3", store=store)
    assert run.returncode == 0, run.stderr
    ref = Store(str(store)).versions("chat3")[0].ref
    pairs = Store(str(store)).load(ref)
    assert pairs.height == 3 and pairs["prompt_messages"].null_count() == 0
    return store, ref, pairs


def test_multi_turn_import_shows_as_a_chat_and_its_votes_pull_back(argilla, chat_version, tmp_path):
    """`prefdata argilla push NAME@VERSION` of an imported conversation makes a chat prompt field
    holding the three turns in order with their roles; an annotator answers with the SDK, and
    `prefdata argilla pull` gives the votes back under the version's pair ids and labels."""
    import argilla as rg

    from prefdata.argilla import add_user

    _, info = argilla
    store, ref, pairs = chat_version
    push = _cli("argilla", "push", ref, "--dataset", "chat-audit", "--url", info.url, "--api-key", info.api_key,
                store=store)
    assert push.returncode == 0, push.stderr
    assert "3 pushed" in push.stdout

    dataset = _dataset(info, "chat-audit")
    prompt_field = dataset.settings.fields["prompt"]
    assert isinstance(prompt_field, rg.ChatField) and prompt_field.type == "chat"
    assert prompt_field.title == "Conversation"
    assert [dataset.settings.fields[n].type for n in ("response_a", "response_b")] == ["text", "text"]
    by_id = {p["id"]: p for p in pairs.iter_rows(named=True)}
    conversation = {row["prompt"][0]["content"]: row for row in CONVERSATIONS}
    records = list(dataset.records())
    assert {r.id for r in records} == set(by_id)
    for record in records:
        turns = _turns(record.fields["prompt"])
        source = conversation[turns[0][1]]
        assert turns == [(m["role"], m["content"]) for m in source["prompt"]], "every turn, in order, with its role"
        assert [r for r, _ in turns] == ["user", "assistant", "user"]
        pair = by_id[record.id]
        assert {record.fields["response_a"], record.fields["response_b"]} == {pair["chosen"], pair["rejected"]}
        assert pair["chosen"] == source["chosen"][0]["content"], "the final reply is the response, not a turn"

    # an annotator answers with the SDK only: the chosen side on two pairs, the rejected one on the third
    key = add_user(url=info.url, api_key=info.api_key, username="chat_ann", password="pw-chat-ann-secret")
    mine = _dataset(info, "chat-audit", key)
    me = _sdk(info, key).me
    answered = sorted(mine.records(), key=lambda r: r.id)
    assert _turns(answered[0].fields["prompt"])[0][0] == "user", "the annotator reads the chat too"
    overturned = answered[0].id
    expected = {}
    for record in answered:
        pair = by_id[record.id]
        preferred = pair["rejected"] if record.id == overturned else pair["chosen"]
        shown = "a" if record.fields["response_a"] == preferred else "b"
        record.responses.add(rg.Response("preference", shown, user_id=me.id, status="submitted"))
        expected[record.id] = "b" if record.id == overturned else "a"  # response_a is chosen in an audit
    mine.records.log(answered)

    votes_path = tmp_path / "votes.parquet"
    pull = _cli("argilla", "pull", "--dataset", "chat-audit", "--out", str(votes_path), "--url", info.url,
                "--api-key", info.api_key, store=store)
    assert pull.returncode == 0, pull.stderr
    votes = pl.read_parquet(votes_path)
    assert sorted(votes.select("pair_id", "annotator", "vote", "label").rows()) == sorted(
        (pid, "chat_ann", vote, "a") for pid, vote in expected.items())


def test_search_reads_a_chat_fields_messages_not_its_json(argilla, chat_version):
    """The server's search engine (sql_search.py) finds a word of any turn, accents included, and
    not the JSON's own keys."""
    _, info = argilla
    store, ref, pairs = chat_version
    push = _cli("argilla", "push", ref, "--dataset", "chat-search", "--url", info.url, "--api-key", info.api_key,
                store=store)
    assert push.returncode == 0, push.stderr
    dataset = _dataset(info, "chat-search")
    first_turn = {p["id"]: json.loads(p["prompt_messages"])[0]["content"] for p in pairs.iter_rows(named=True)}

    def found(query: str) -> set[str]:
        return {first_turn[r.id] for r in dataset.records(query=query)}

    assert found("Lisbon") == {CONVERSATIONS[0]["prompt"][0]["content"]}  # only in an earlier assistant turn
    assert found("café") == {CONVERSATIONS[1]["prompt"][0]["content"]}  # only in a turn: accents read as written
    assert found("latte Paris") == {CONVERSATIONS[1]["prompt"][0]["content"]}  # every word, in any turn
    assert found("CAPITAL portugal") == {CONVERSATIONS[0]["prompt"][0]["content"]}
    assert found("content") == set() and found("role") == set(), "the messages' keys are not their text"
    assert found("assistant") == set(first_turn.values()), "a role matches whole, as Elasticsearch's keyword"


def test_plain_single_turn_rows_still_make_a_text_field(argilla):
    import argilla as rg

    from prefdata.argilla import push_pairs

    _, info = argilla
    rows = [{"pair_id": f"plain{i}", "prompt": f"What is {i} + {i}?", "response_a": f"{2 * i}",
             "response_b": f"{2 * i + 1}"} for i in range(3)]
    push_pairs(rows, url=info.url, api_key=info.api_key, dataset="plain", progress=False)
    dataset = _dataset(info, "plain")
    field = dataset.settings.fields["prompt"]
    assert isinstance(field, rg.TextField) and field.type == "text" and field.title == "Prompt"
    assert {r.id: r.fields["prompt"] for r in dataset.records()} == {r["pair_id"]: r["prompt"] for r in rows}
    # rows whose prompt_messages column is there but empty are plain rows too
    push_pairs([{**r, "pair_id": f"nulls{i}", "prompt_messages": None} for i, r in enumerate(rows)],
               url=info.url, api_key=info.api_key, dataset="plain-nulls", progress=False)
    assert _dataset(info, "plain-nulls").settings.fields["prompt"].type == "text"


def test_each_kind_of_dataset_takes_the_other_kind_of_row(argilla, chat_version):
    """A text-field dataset gets a conversation as its text rendering (every turn); a chat dataset
    gets a plain row as one user message. Nothing is lost either way."""
    from prefdata.argilla import push_pairs
    from prefdata.argilla.audit import audit_rows

    _, info = argilla
    _, _, pairs = chat_version
    conversations = audit_rows(pairs)
    plain = {"pair_id": "single", "prompt": "Say hello.", "response_a": "Hello!", "response_b": "No."}

    push_pairs([plain], url=info.url, api_key=info.api_key, dataset="text-first", progress=False)
    push_pairs(conversations, url=info.url, api_key=info.api_key, dataset="text-first", progress=False)
    text_first = _dataset(info, "text-first")
    assert text_first.settings.fields["prompt"].type == "text"
    shown = {r.id: r.fields["prompt"] for r in text_first.records()}
    for row in conversations.iter_rows(named=True):
        assert shown[row["pair_id"]] == row["prompt"]
        assert all(m["content"] in shown[row["pair_id"]] for m in json.loads(row["prompt_messages"]))

    push_pairs(conversations, url=info.url, api_key=info.api_key, dataset="chat-first", progress=False)
    push_pairs([plain], url=info.url, api_key=info.api_key, dataset="chat-first", progress=False)
    chat_first = _dataset(info, "chat-first")
    assert chat_first.settings.fields["prompt"].type == "chat"
    shown = {r.id: _turns(r.fields["prompt"]) for r in chat_first.records()}
    assert shown["single"] == [("user", "Say hello.")]
    assert len(shown) == 4 and all(len(turns) == 3 for pid, turns in shown.items() if pid != "single")


def test_simulated_annotators_read_a_chat_prompt_as_its_text(argilla, chat_version):
    """The demo's simulated crowd hands its verifier the pair's prompt text, as it does for a text field."""
    from prefdata.argilla import push_pairs
    from prefdata.argilla.audit import audit_rows
    from prefdata.argilla.crowd import SimulatedCrowd
    from prefdata.world import annotator_pool

    _, info = argilla
    _, _, pairs = chat_version
    push_pairs(audit_rows(pairs), url=info.url, api_key=info.api_key, dataset="chat-crowd", progress=False)
    seen: list = []

    def verifier(prompt, response):
        seen.append(prompt)
        return response in set(pairs["chosen"])

    crowd = SimulatedCrowd(info.url, info.api_key, "chat-crowd", annotator_pool(1, 1.0, 0.0), verifier=verifier)
    assert crowd.answer_once() == 3
    assert set(seen) == set(pairs["prompt"]) and all("User: " in p for p in seen)


def test_bad_prompt_messages_are_one_line_before_any_record_is_sent(argilla):
    import warnings

    from prefdata.argilla import push_pairs

    _, info = argilla

    def dataset():
        with warnings.catch_warnings():  # the SDK warns of an absent dataset
            warnings.simplefilter("ignore")
            return _sdk(info).datasets("bad-messages", workspace="prefdata")

    row = {"pair_id": "bad1", "prompt": "hi", "response_a": "a", "response_b": "b"}
    cases = {
        "not json": "prompt_messages is not JSON",
        json.dumps({"role": "user", "content": "hi"}): "prompt_messages is a dict",
        "[]": "prompt_messages is an empty list",
        json.dumps([{"role": "user"}]): "message 1 is not a {role, content} pair of texts",
    }
    for value, said in cases.items():
        with pytest.raises(UnusableInput) as caught:
            push_pairs([row, {**row, "pair_id": "bad2", "prompt_messages": value}], url=info.url,
                       api_key=info.api_key, dataset="bad-messages", progress=False)
        message = str(caught.value)
        assert "\n" not in message and said in message and "row 1 ('bad2')" in message
        assert "list of {role, content} messages" in message  # how to fix it
    assert dataset() is None, "a malformed row is refused before the server is asked for anything"

    # a message longer than the server takes: known once the field is a chat, before any record is sent
    too_long = json.dumps([{"role": "user", "content": "x" * 20001}])
    with pytest.raises(UnusableInput, match=r"pair 'bad2': prompt message 1 is 20001 characters, more than the 20000"):
        push_pairs([row, {**row, "pair_id": "bad2", "prompt_messages": too_long}], url=info.url, api_key=info.api_key,
                   dataset="bad-messages", progress=False)
    assert dataset().settings.fields["prompt"].type == "chat" and list(dataset().records()) == []


def test_drafts_and_datasets_not_made_by_prefdata_are_told_apart_for_both_field_types(argilla, chat_version):
    """A draft left by a chat push cut off after its fields is finished; a dataset whose prompt is
    another kind of field, or whose responses are chats, is refused as not prefdata's."""
    import httpx

    import argilla as rg

    from prefdata.argilla import push_pairs
    from prefdata.argilla.audit import audit_rows

    _, info = argilla
    _, _, pairs = chat_version
    client = _sdk(info)
    owner = httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": info.api_key}, timeout=60)

    def draft(name: str, fields: dict[str, str]):
        made = client.api.datasets.create(rg.Dataset(name=name, workspace="prefdata", client=client).api_model())
        for field, kind in fields.items():
            settings = {"type": kind, **({"template": "<p>{{record.fields}}</p>"} if kind == "custom" else {})}
            response = owner.post(f"/api/v1/datasets/{made.id}/fields",
                                  json={"name": field, "title": field, "settings": settings})
            assert response.status_code == 201, response.text
        return made

    draft("half-chat", {"prompt": "chat", "response_a": "text"})
    result = push_pairs(audit_rows(pairs), url=info.url, api_key=info.api_key, dataset="half-chat", progress=False)
    assert (result.pushed, result.records) == (3, 3)
    assert _dataset(info, "half-chat").settings.fields["prompt"].type == "chat"

    draft("custom-prompt", {"prompt": "custom"})
    with pytest.raises(PrefdataError, match="not made by prefdata"):
        push_pairs(audit_rows(pairs), url=info.url, api_key=info.api_key, dataset="custom-prompt", progress=False)

    # a published dataset with every name prefdata uses, but the responses as chats
    settings = rg.Settings(
        fields=[rg.ChatField(name="prompt"), rg.ChatField(name="response_a"), rg.ChatField(name="response_b")],
        questions=[rg.LabelQuestion(name="preference", labels=["a", "b", "tie"])])
    rg.Dataset(name="chat-responses", workspace="prefdata", settings=settings, client=client).create()
    with pytest.raises(PrefdataError, match=r"not made by prefdata \(prompt is a chat field, response_a is a chat "
                                            r"field, response_b is a chat field"):
        push_pairs(audit_rows(pairs), url=info.url, api_key=info.api_key, dataset="chat-responses", progress=False)


# -- a person in a real browser ---------------------------------------------------------------------------

def test_browser_annotator_sees_the_earlier_turns_and_answers(argilla, chat_version):
    """An annotator signs in to the web UI, opens the chat dataset and sees the conversation's
    earlier turns on the page (the first user turn and the assistant's reply to it), then picks a
    response and submits; the vote pulls back."""
    from test_argilla import annotation_page, submit

    from prefdata.argilla import add_user, pull_votes, push_pairs
    from prefdata.argilla.audit import audit_rows

    _, info = argilla
    _, _, pairs = chat_version
    push_pairs(audit_rows(pairs), url=info.url, api_key=info.api_key, dataset="chat-browser", progress=False)
    add_user(url=info.url, api_key=info.api_key, username="chat_web", password="pw-chat-web-secret")
    dataset_id = str(_dataset(info, "chat-browser").id)
    with annotation_page(info, "chat_web", "pw-chat-web-secret", dataset_id) as (page, shown):
        turns = shown["fields"]["prompt"]
        assert [m["role"] for m in turns] == ["user", "assistant", "user"]
        for message in turns:  # every turn on the page, the earlier ones included
            page.get_by_text(message["content"], exact=True).wait_for(timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "argilla-chat.png"))  # what the annotator saw
        page.get_by_text("Response A is better").click()
        submit(page)
    votes = pull_votes(url=info.url, api_key=info.api_key, dataset="chat-browser")
    assert shown["external_id"] in set(pairs["id"])
    assert votes.select("pair_id", "annotator", "shown").rows() == [(shown["external_id"], "chat_web", "a")]
