"""Import: real formats, broken rows quarantined with reasons, counts that reconcile."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter

import polars as pl
import pytest

from prefdata.base.errors import UnusableInput
from prefdata.data.formats import from_comparison, from_hh, from_trl, from_trl_chat, hh_turns, split_hh
from prefdata.data.importer import import_file, version_tables
from prefdata.data.records import pair_id, prompt_id, render_turns


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _transcript(turns: list[dict], reply: str) -> str:
    """An HH transcript written back from its turns and final reply."""
    marker = {"user": "Human", "assistant": "Assistant"}
    return "".join(f"\n\n{marker[t['role']]}: {t['content']}" for t in turns) + f"\n\nAssistant: {reply}"


def test_hh_rlhf_real_file_keeps_every_conversation_as_turns(shared_data):
    src = shared_data / "hh-rlhf-harmless" / "test.jsonl.gz"
    originals = [json.loads(line) for line in gzip.open(src, "rt")]
    result = import_file(src)
    assert result.format == "hh-rlhf"
    assert (result.read, result.kept, result.quarantined) == (2312, 2312, 0)
    assert result.pairs.height == 2312
    rewritten, multi_turn = 0, 0
    for original, row in zip(originals, result.pairs.iter_rows(named=True)):
        turns = json.loads(row["prompt_messages"])
        roles = [t["role"] for t in turns]
        # user first and last, alternating: the final assistant turn is the pair's replies
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
        multi_turn += len(turns) > 1
        assert row["prompt"] == render_turns(turns)
        assert original["chosen"].endswith(row["chosen"]) and original["rejected"].endswith(row["rejected"])
        # the turns and replies give the transcripts back, but for rows where one role spoke twice in a row
        rewritten += (_transcript(turns, row["chosen"]), _transcript(turns, row["rejected"])) == \
            (original["chosen"], original["rejected"])
    assert multi_turn == 2312 - 662  # 662 conversations of the split have one human turn
    assert rewritten == 2312 - 4      # 4 where the human speaks twice: those turns are joined
    # 4 real rows prefer an empty answer: kept (the degenerate_pairs check flags them), not lost
    assert (result.pairs["chosen"].str.strip_chars() == "").sum() == 4


def test_hh_single_turn_pairs_get_the_ids_of_the_same_trl_rows():
    hh = from_hh({"chosen": "\n\nHuman: What is 2+2?\n\nAssistant: 4", "rejected": "\n\nHuman: What is 2+2?\n\nAssistant: 5"})
    trl = from_trl({"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"})
    assert hh.record["prompt"] == "What is 2+2?"
    assert hh.record["pair_id"] == trl.record["pair_id"]
    assert json.loads(hh.record["prompt_messages"]) == [{"role": "user", "content": "What is 2+2?"}]


def test_hh_turns_join_a_role_that_speaks_twice_and_keep_text_before_the_first_marker():
    assert hh_turns("Human: hi\n\nAssistant: hello\n\nHuman: one\n\nHuman: two\n\nAssistant:") == [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "one\n\ntwo"}]


def test_single_turn_pair_ids_do_not_change():
    """The ids single-turn data had before conversations kept their turns (issue 45): every format."""
    one_turn = [{"role": "user", "content": "What is 2+2?"}]
    ids = {from_trl({"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}).record["pair_id"],
           from_trl_chat({"prompt": one_turn, "chosen": [{"role": "assistant", "content": "4"}],
                          "rejected": [{"role": "assistant", "content": "5"}]}).record["pair_id"],
           from_trl_chat({"chosen": [*one_turn, {"role": "assistant", "content": "4"}],
                          "rejected": [*one_turn, {"role": "assistant", "content": "5"}]}).record["pair_id"],
           from_comparison({"prompt": "What is 2+2?", "response_a": "4", "response_b": "5", "label": "a"}).record["pair_id"]}
    assert ids == {"9b2f3796781826fb"}


def test_hh_split_keeps_responses_that_contain_the_marker():
    # A reply that itself contains "\n\nAssistant:" (5 real HH rows do) must not move the prompt cut.
    chosen = "\n\nHuman: hi\n\nAssistant: hello\n\nAssistant: again"
    rejected = "\n\nHuman: hi\n\nAssistant: go away"
    assert split_hh(chosen, rejected) == ("\n\nHuman: hi\n\nAssistant:", "hello\n\nAssistant: again", "go away")


def test_pandalm_three_annotators_majority_counts(shared_data):
    result = import_file(shared_data / "pandalm" / "testset-v1.json")
    assert result.format == "comparisons"
    # 6 rows have a JSON boolean (`true`) where a response's text belongs: wrong_type, not "True"
    assert (result.read, result.kept, result.quarantined) == (999, 993, 6)
    assert result.reasons == {"wrong_type:response_a": 4, "wrong_type:response_b": 2}
    assert sorted(q["raw"]["idx"] for q in result.quarantine) == [157, 158, 159, 161, 162, 164]
    labels = Counter(result.comparisons["label"].to_list())
    # PandaLM README: 105 ties, 422 a, 472 b; the 6 quarantined rows held 4 a and 2 b majorities
    assert (labels["tie"], labels["a"], labels["b"]) == (105, 422 - 4, 472 - 2)
    assert result.votes.height == 3 * 993
    assert set(result.votes["annotator"].unique()) == {"annotator1", "annotator2", "annotator3"}
    assert result.pairs.height == 418 + 470  # ties stay out of chosen/rejected
    assert result.unresolved == {"tie": 105}
    # models follow their responses: the winner's model becomes chosen_model
    first = result.comparisons.row(0, named=True)
    pair = result.pairs.filter(pl.col("id") == first["id"]).row(0, named=True)
    winner = first["label"]
    assert pair["chosen"] == first[f"response_{winner}"]
    assert pair["chosen_model"] == first[f"model_{winner}"]


def test_long_votes_give_the_same_labels_as_wide(tmp_path, shared_data):
    wide = import_file(shared_data / "pandalm" / "testset-v1.json")
    rows = json.loads((shared_data / "pandalm" / "testset-v1.json").read_text())
    data = write_jsonl(tmp_path / "cmp.jsonl", [
        {"id": str(r["idx"]), "prompt": f"{r['instruction']}\n\n{r['input']}".strip(),
         "response_a": str(r["response1"]), "response_b": str(r["response2"])} for r in rows
    ])
    votes = tmp_path / "votes.csv"
    with votes.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pair_id", "annotator", "vote"])
        for r in rows:
            for k in (1, 2, 3):
                writer.writerow([r["idx"], f"annotator{k}", {0: "tie", 1: "a", 2: "b"}[r[f"annotator{k}"]]])
    long = import_file(data, votes=votes)
    assert long.votes_read == long.votes_kept == 2997
    merged = long.comparisons.select("id", "label").join(wide.comparisons.select("id", "label"), on="id")
    assert merged.height == 993  # the wide import quarantines 6 rows with boolean responses
    assert (merged["label"] == merged["label_right"]).all()


def test_ids_are_content_derived_and_stable(tmp_path):
    rows = [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}, {"prompt": "2+2?", "chosen": "4", "rejected": "5"}]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    first, second = import_file(src), import_file(src)
    assert first.pairs["id"].to_list() == second.pairs["id"].to_list()
    pid = pair_id("2+2?", "4", "5")
    assert first.pairs["id"].to_list() == [pid, f"{pid}-2"]  # repeats stay apart, deterministically
    assert pair_id("2+2?", "5", "4") == pid  # which side won does not change the pair's identity
    assert prompt_id("  2+2? ") == prompt_id("2+2?")


def test_broken_rows_are_quarantined_with_reasons(tmp_path):
    good = {"prompt": "p", "chosen": "good", "rejected": "bad"}
    lines = [
        json.dumps(good),
        json.dumps({"prompt": "p", "chosen": "c"}),                              # 2 missing rejected
        json.dumps({"prompt": "p", "chosen": ["not", "text"], "rejected": "r"}),  # 3 wrong type
        json.dumps({"prompt": "   ", "chosen": "c", "rejected": "r"}),            # 4 empty prompt
        json.dumps({"prompt": "p", "chosen": "same", "rejected": "same"}),        # 5 identical sides
        "{not json",                                                              # 6 invalid JSON
        json.dumps([1, 2]),                                                       # 7 not an object
        json.dumps({"prompt": "p", "chosen": "x" * 5000, "rejected": "r"}),       # 8 too large
        json.dumps({"id": "dup", "prompt": "p", "chosen": "one", "rejected": "r"}),  # 9 kept
        json.dumps({"id": "dup", "prompt": "p", "chosen": "two", "rejected": "r"}),  # 10 id conflict
        json.dumps({"prompt": "p", "chosen": "ok", "rejected": "fine", "split": "../x"}),  # 11 bad split
    ]
    raw = ("\n".join(lines) + "\n").encode() + b'{"prompt": "p", "chosen": "\xff\xfe", "rejected": "r"}\n'  # 12
    src = tmp_path / "broken.jsonl"
    src.write_bytes(raw)
    result = import_file(src, fmt="trl", max_text_bytes=4096)
    reasons = {q["row"]: q["reason"] for q in result.quarantine}
    assert reasons == {
        2: "missing_field:rejected", 3: "wrong_type:chosen", 4: "empty_text:prompt", 5: "identical_responses",
        6: "invalid_json", 7: "not_an_object", 8: "text_too_large:chosen", 10: "duplicate_id_conflict",
        11: "invalid_split", 12: "invalid_utf8",
    }
    assert result.read == 12 and result.kept == 2 and result.quarantined == 10
    assert result.read == result.kept + result.quarantined


def test_csv_json_parquet_and_gzip_read_the_same_rows(tmp_path):
    rows = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", "category": "style"} for i in range(5)]
    frame = pl.DataFrame(rows)
    frame.write_csv(tmp_path / "d.csv")
    frame.write_parquet(tmp_path / "d.parquet")
    (tmp_path / "d.json").write_text(json.dumps({"data": rows}))
    with gzip.open(tmp_path / "d.jsonl.gz", "wt") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    ids = {name: import_file(tmp_path / name).pairs["id"].to_list()
           for name in ("d.csv", "d.parquet", "d.json", "d.jsonl.gz")}
    assert len({tuple(v) for v in ids.values()}) == 1 and len(ids["d.csv"]) == 5
    assert import_file(tmp_path / "d.csv").pairs["category"].to_list() == ["style"] * 5


def test_csv_with_broken_rows(tmp_path):
    src = tmp_path / "d.csv"
    src.write_bytes(b"prompt,chosen,rejected\nq,a,b\nq,a\nq,\xff,b\nq,c,d\n")
    result = import_file(src)
    # rows are line numbers: the header is line 1
    assert [(q["row"], q["reason"]) for q in result.quarantine] == [(3, "malformed_csv_row"), (4, "invalid_utf8")]
    assert (result.read, result.kept) == (4, 2)


def test_trl_conversational_explicit_implicit_and_whole_conversations(tmp_path):
    user = {"role": "user", "content": "What is 2+2?"}
    rows = [
        {"prompt": [user], "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]},
        {"chosen": [user, {"role": "assistant", "content": "4"}], "rejected": [user, {"role": "assistant", "content": "5"}]},
        {"prompt": "What is 2+2?", "chosen": [user, {"role": "assistant", "content": "4"}],
         "rejected": [user, {"role": "assistant", "content": "5"}], "score_chosen": 9, "score_rejected": 2},
        {"prompt": [user], "chosen": "4", "rejected": [{"role": "assistant", "content": "5"}]},
    ]
    result = import_file(write_jsonl(tmp_path / "chat.jsonl", rows))
    assert result.format == "trl-chat"
    assert result.pairs.select("prompt", "chosen", "rejected").rows() == [("What is 2+2?", "4", "5")] * 3
    assert [q["reason"] for q in result.quarantine] == ["wrong_type:chosen"]
    assert result.pairs["score_chosen"].to_list() == [None, None, 9.0]


def test_votes_table_faults_are_quarantined(tmp_path):
    data = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "p1", "prompt": "q", "response_a": "x", "response_b": "y"},
        {"id": "p2", "prompt": "q2", "response_a": "x", "response_b": "z"},
    ])
    votes = write_jsonl(tmp_path / "v.jsonl", [
        {"pair_id": "p1", "annotator": "ann1", "vote": "a"},
        {"pair_id": "p1", "annotator": "ann2", "vote": "A"},
        {"pair_id": "p1", "annotator": "ann1", "vote": "b"},      # conflicting
        {"pair_id": "nope", "annotator": "ann1", "vote": "a"},    # unknown id
        {"pair_id": "p2", "annotator": "ann1", "vote": "maybe"},  # invalid vote
        {"pair_id": "p2", "annotator": "ann2", "vote": "tie"},
    ])
    result = import_file(data, votes=votes)
    assert [q["reason"] for q in result.quarantine] == ["conflicting_vote", "unknown_pair_id", "invalid_vote"]
    assert (result.votes_read, result.votes_kept, result.votes_quarantined) == (6, 3, 3)
    assert dict(result.comparisons.select("id", "label").rows()) == {"p1": "a", "p2": "tie"}
    assert result.pairs["id"].to_list() == ["p1"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", b"", "no readable rows"),
        ("bad.json", b"[{\"prompt\": ", "not valid JSON"),
        ("x.jsonl.gz", b"\x1f\x8b\x08\x00garbage", "corrupt gzip"),
        ("cols.jsonl", b'{"question": "q", "answer": "a"}\n', "cannot detect the format"),
        ("blob.bin", b"\x00\x01\x02", "cannot tell the file type"),
        ("p.parquet", b"PAR1 not really", "not a readable Parquet file"),
    ],
)
def test_unusable_files_raise_one_clear_error(tmp_path, name, content, message):
    src = tmp_path / name
    src.write_bytes(content)
    with pytest.raises(UnusableInput, match=message) as info:
        import_file(src)
    assert str(src) in str(info.value) and "\n" not in str(info.value)


def test_missing_column_for_a_forced_format(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "p", "chosen": "c"}])
    with pytest.raises(UnusableInput, match="missing column 'rejected'"):
        import_file(src, fmt="trl")
    with pytest.raises(UnusableInput, match="unknown format"):
        import_file(src, fmt="yaml")


def test_import_to_store_keeps_tables_quarantine_counts_and_lineage(tmp_path):
    """The one import-to-store path (the `import` command's): a draft version with the import's
    tables, quarantine, counts and sources; the same content imported again is the same version."""
    from prefdata.data.importer import import_to_store
    from prefdata.data.store import Store

    rows = [{"prompt": f"q{i}", "chosen": "c", "rejected": f"r{i}"} for i in range(4)] + [{"prompt": "q"}]
    result = import_file(write_jsonl(tmp_path / "d.jsonl", rows))
    store = Store(str(tmp_path / "store"))
    card = "## Annotation guidelines\nPick the right answer."
    version = import_to_store(result, "tiny", store, guidelines=card)
    manifest = version.manifest
    assert version.status == "draft" and {k: manifest["counts"][k] for k in result.summary()} == result.summary()
    assert manifest["lineage"]["sources"] == result.sources and manifest["lineage"]["parent"] is None
    assert manifest["lineage"]["components"] == {"importer": "trl"}
    assert store.load(version.ref).height == 4
    assert [json.loads(line)["reason"] for line in store.read_text(version.ref, "quarantine.jsonl").splitlines()] == \
        [q["reason"] for q in result.quarantine]
    assert "Pick the right answer." in store.read_text(version.ref, "README.md")
    assert import_to_store(result, "tiny", store, guidelines=card).ref == version.ref


def test_version_tables_split_by_split_column(tmp_path):
    rows = [{"prompt": f"q{i}", "chosen": "c", "rejected": f"r{i}", "split": "test" if i % 4 == 0 else "train"} for i in range(8)]
    tables = version_tables(import_file(write_jsonl(tmp_path / "s.jsonl", rows)))
    assert {s: f.height for s, f in tables["default"].items()} == {"test": 2, "train": 6}
    assert tables["sft"]["train"].columns == ["id", "prompt", "completion"]
    assert tables["sft"]["train"].height == 6
