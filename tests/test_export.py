"""`prefdata export`, through the real command line: a version made validated by `prefdata import` and
`prefdata publish` (the world's checklist), written in each format, loaded back with
`datasets.load_dataset` and held to the store's rows; the sidecar; the refusals `prefdata train`
makes (a draft, a tampered version), word for word; and the trl-chat round trip through `prefdata
import`, which gives back the very pair ids."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see prefdata/world/build.py

import pytest

from prefdata.world import WorldConfig, sampling_prompts
from prefdata.world.tasks import ARITH_RE

REPO = Path(__file__).resolve().parents[1]
FORMATS = ("trl", "trl-chat", "openrlhf", "llama-factory")
SYSTEM = "You are a calculator."


def cli(*args: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env, timeout=600)


def _answer(prompt: str) -> int:
    a, op, b = ARITH_RE.match(prompt).groups()
    return int(a) + int(b) if op == "+" else int(a) - int(b)


def arith_rows(prompts: list[str]) -> list[dict]:
    """TRL standard rows: the right answer against one off by ten (the world's carry mistake)."""
    return [{"prompt": p, "chosen": f"{_answer(p):04d}", "rejected": f"{_answer(p) + 10:04d}"} for p in prompts]


def chat_rows(prompts: list[str]) -> list[dict]:
    """TRL conversational rows of four turns (system, a question answered, the question asked), every
    fourth in the test split."""
    rows = []
    for i in range(len(prompts) // 2):
        first, last = prompts[2 * i], prompts[2 * i + 1]
        rows.append({"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first},
                                {"role": "assistant", "content": f"{_answer(first):04d}"},
                                {"role": "user", "content": last}],
                     "chosen": [{"role": "assistant", "content": f"{_answer(last):04d}"}],
                     "rejected": [{"role": "assistant", "content": f"{_answer(last) + 10:04d}"}],
                     "split": "test" if i % 4 == 0 else "train"})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def imported(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> dict:
    """Two validated versions, made as a user makes them: `arith` (text pairs, no split) and `chat`
    (multi-turn conversations with a system prompt, train and test splits)."""
    root = tmp_path_factory.mktemp("export")
    store = root / "store"
    prompts = sampling_prompts(WorldConfig(), 112)
    card = str(REPO / "prefdata/world/guidelines.md")
    checklist = str(REPO / "prefdata/world/checklist.yaml")
    sources = {"arith": write_jsonl(root / "arith.jsonl", arith_rows(prompts[:64])),
               "chat": write_jsonl(root / "chat.jsonl", chat_rows(prompts[64:]))}
    refs = {}
    for name, src in sources.items():
        ref = imported(cli("import", str(src), "--name", name, "--card", card, store=store))
        published = cli("publish", ref, "--config", checklist, "--report-dir", str(root / f"report-{name}"), store=store)
        assert published.returncode == 0, published.stdout + published.stderr
        refs[name] = ref
    return {"store": store, "root": root, "sources": sources, **refs}


def stored(versions: dict, name: str) -> dict[str, list[dict]]:
    """The version's pairs per split as the store holds them (no split column: all train)."""
    from prefdata.data.store import Store

    pairs = Store(str(versions["store"])).load(versions[name])
    split = pairs["split"].fill_null("train") if "split" in pairs.columns else None
    found: dict[str, list[dict]] = {}
    for i, row in enumerate(pairs.to_dicts()):
        found.setdefault(split[i] if split is not None else "train", []).append(row)
    return found


def as_format(fmt: str, pair: dict) -> dict:
    """What each format's row must be for a stored pair (each format's documented fields)."""
    turns = ([{"role": "user", "content": pair["prompt"]}] if not pair.get("prompt_messages")
             else json.loads(pair["prompt_messages"]))
    if fmt == "trl":
        return {"prompt": pair["prompt"], "chosen": pair["chosen"], "rejected": pair["rejected"]}
    if fmt == "trl-chat":
        return {"prompt": turns, "chosen": [{"role": "assistant", "content": pair["chosen"]}],
                "rejected": [{"role": "assistant", "content": pair["rejected"]}]}
    if fmt == "openrlhf":
        return {"chosen": turns + [{"role": "assistant", "content": pair["chosen"]}],
                "rejected": turns + [{"role": "assistant", "content": pair["rejected"]}]}
    return {"instruction": pair["prompt"], "input": "", "chosen": pair["chosen"], "rejected": pair["rejected"]}


def load_split(path: Path, cache: Path) -> list[dict]:
    from datasets import load_dataset

    return load_dataset("json", data_files={"rows": str(path)}, split="rows", cache_dir=str(cache)).to_list()


def one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr.strip()


def key(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


# -- every format, loaded back with datasets ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["arith", "chat"])
def test_each_format_loads_with_datasets_and_holds_the_stored_pairs(versions, tmp_path, fmt, name):
    ref, out = versions[name], tmp_path / "out"
    done = cli("export", ref, "--format", fmt, "--out", str(out), store=versions["store"])
    assert done.returncode == 0, done.stderr
    expected = stored(versions, name)
    sidecar = json.loads((out / "prefdata_export.json").read_text())
    manifest = json.loads(cli("show", ref, "--json", store=versions["store"]).stdout)
    # one file per split: the chat version's train and test; arith has no split, so every pair is train
    assert set(expected) == ({"train", "test"} if name == "chat" else {"train"})
    for split, pairs in expected.items():
        rows = load_split(out / f"{split}.jsonl", tmp_path / "hf")
        assert sorted(map(key, rows)) == sorted(key(as_format(fmt, p)) for p in pairs)
    assert sidecar["version"] == ref and sidecar["content_hash"] == ref.partition("@")[2] == manifest["version"]
    assert sidecar["format"] == fmt
    assert sidecar["rows"] == {s: len(p) for s, p in expected.items()} == manifest["counts"]["rows"]["default"]
    exported = dt.datetime.fromisoformat(sidecar["exported_at"])
    assert abs((dt.datetime.now(dt.timezone.utc) - exported).total_seconds()) < 600
    written = {"prefdata_export.json", *(f"{s}.jsonl" for s in expected)}
    written |= {"dataset_info.json"} if fmt == "llama-factory" else set()
    assert {p.name for p in out.iterdir()} == written and set(sidecar["files"]) == written - {"prefdata_export.json"}
    assert f"exported {ref} as {fmt}" in done.stdout


def test_the_rows_are_the_stored_text_and_trl_chat_keeps_every_turn(versions, tmp_path):
    """No chat template anywhere: trl's prompt is the stored text (a conversation flattened as the
    store flattens it), trl-chat's is the source's own messages, system prompt and all."""
    source = {r["chosen"][0]["content"]: r for r in map(json.loads, versions["sources"]["chat"].read_text().splitlines())}
    for fmt in ("trl", "trl-chat"):
        out = tmp_path / fmt
        assert cli("export", versions["chat"], "--format", fmt, "--out", str(out), store=versions["store"]).returncode == 0
        rows = [json.loads(line) for split in ("train", "test") for line in (out / f"{split}.jsonl").read_text().splitlines()]
        assert len(rows) == len(source)
        for row in rows:
            if fmt == "trl-chat":
                original = source[row["chosen"][0]["content"]]
                assert row["prompt"] == original["prompt"] and row["prompt"][0] == {"role": "system", "content": SYSTEM}
                assert row["rejected"] == original["rejected"]
            else:
                original = source[row["chosen"]]
                assert row["prompt"] == "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in original["prompt"])
                assert "<|" not in row["prompt"] and "[INST]" not in row["prompt"]


def test_llama_factory_gets_its_dataset_info(versions, tmp_path):
    out = tmp_path / "lf"
    done = cli("export", versions["chat"], "--format", "llama-factory", "--out", str(out), store=versions["store"])
    assert done.returncode == 0, done.stderr
    info = json.loads((out / "dataset_info.json").read_text())
    name = versions["chat"].replace("@", "_")
    columns = {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
    assert info == {name: {"file_name": "train.jsonl", "formatting": "alpaca", "ranking": True, "columns": columns},
                    f"{name}_test": {"file_name": "test.jsonl", "formatting": "alpaca", "ranking": True, "columns": columns}}


# -- the round trip ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["arith", "chat"])
def test_trl_chat_imported_back_gives_the_same_pair_ids(versions, tmp_path, name):
    import polars as pl

    out = tmp_path / "out"
    assert cli("export", versions[name], "--format", "trl-chat", "--out", str(out), store=versions["store"]).returncode == 0
    for split, pairs in stored(versions, name).items():
        back = tmp_path / f"{split}.parquet"
        done = cli("import", str(out / f"{split}.jsonl"), "--format", "trl-chat", "--out", str(back), store=versions["store"])
        assert done.returncode == 0 and f"kept {len(pairs)} + quarantined 0" in done.stdout, done.stdout + done.stderr
        rows = pl.read_parquet(back)
        assert sorted(rows["pair_id"].to_list()) == sorted(p["pair_id"] for p in pairs)
        assert sorted(rows["prompt"].to_list()) == sorted(p["prompt"] for p in pairs)


# -- refusals: what `prefdata train` refuses, in its words ----------------------------------------------------


def refusal(ref: str, store: Path) -> str:
    """What `prefdata train` says of this version: load_validated's GateFailed."""
    from prefdata.base.errors import GateFailed
    from prefdata.trainers.data import load_validated

    with pytest.raises(GateFailed) as refused:
        load_validated(ref, str(store))
    return f"prefdata: error: {refused.value}"


def test_a_draft_is_refused_like_train_refuses_it(versions, tmp_path):
    store = tmp_path / "store"
    src = write_jsonl(tmp_path / "d.jsonl", arith_rows(sampling_prompts(WorldConfig(), 8)))
    ref = imported(cli("import", str(src), "--name", "draft", store=store))
    done = cli("export", ref, "--format", "trl", "--out", str(tmp_path / "out"), store=store)
    assert done.returncode == 1 and one_line(done) == refusal(ref, store)
    assert "is draft, not validated: run `prefdata publish" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_tampered_version_is_refused_like_train_refuses_it(versions, tmp_path):
    """A copy of the validated store: one with a data file changed, one with a draft's status set to
    validated by hand (its signature no longer matches)."""
    store = tmp_path / "store"
    shutil.copytree(versions["store"], store)  # its key file too
    name, version = versions["chat"].split("@")
    shard = next((store / name / version / "data").glob("train-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-10] + b"0123456789")
    done = cli("export", versions["chat"], "--format", "trl-chat", "--out", str(tmp_path / "out"), store=store)
    assert done.returncode == 1 and one_line(done) == refusal(versions["chat"], store)
    assert "fails verification" in done.stderr and "changed: data/train" in done.stderr
    assert not (tmp_path / "out").exists()

    src = write_jsonl(tmp_path / "d.jsonl", arith_rows(sampling_prompts(WorldConfig(), 8)))
    draft = imported(cli("import", str(src), "--name", "forged", store=store))
    manifest = store / "forged" / draft.partition("@")[2] / "manifest.json"
    record = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**record, "status": "validated"}))
    done = cli("export", draft, "--format", "trl", "--out", str(tmp_path / "out"), store=store)
    assert done.returncode == 1 and one_line(done) == refusal(draft, store) and "fails verification" in done.stderr
    assert not (tmp_path / "out").exists()


# -- bad input: one line, exit 2, before any work --------------------------------------------------------------


def test_bad_input_is_one_line_and_exit_2(versions, tmp_path):
    store, ref = versions["store"], versions["arith"]
    bad_format = cli("export", "nothing@abcd", "--format", "dpo", "--out", str(tmp_path / "o"), store=tmp_path / "none")
    assert bad_format.returncode == 2
    assert "--format 'dpo': choose one of trl, trl-chat, openrlhf, llama-factory" in one_line(bad_format)
    (tmp_path / "file").write_text("x")
    a_file = cli("export", ref, "--format", "trl", "--out", str(tmp_path / "file"), store=store)
    assert a_file.returncode == 2 and "is a file, not a folder" in one_line(a_file)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    full = cli("export", ref, "--format", "trl", "--out", str(tmp_path / "full"), store=store)
    assert full.returncode == 2 and "is not empty" in one_line(full) and (tmp_path / "full" / "notes.txt").read_text() == "mine"
    unknown = cli("export", "nothing@abcd", "--format", "trl", "--out", str(tmp_path / "o"), store=store)
    assert unknown.returncode == 2 and "no dataset named 'nothing'" in one_line(unknown)
    missing = cli("export", ref, "--out", str(tmp_path / "o"), store=store)
    assert missing.returncode == 2 and "--format" in missing.stderr
    assert not (tmp_path / "o").exists()


def test_an_export_folder_is_replaced_by_the_next_export(versions, tmp_path):
    """Exporting into a folder a previous export wrote replaces its files: no test.jsonl of the chat
    version is left beside the arith version's train.jsonl; a file no export wrote stops it."""
    out = tmp_path / "out"
    done = cli("export", versions["chat"], "--format", "llama-factory", "--out", str(out), store=versions["store"])
    assert done.returncode == 0, done.stderr
    assert cli("export", versions["arith"], "--format", "trl", "--out", str(out), store=versions["store"]).returncode == 0
    assert {p.name for p in out.iterdir()} == {"train.jsonl", "prefdata_export.json"}
    assert json.loads((out / "prefdata_export.json").read_text())["version"] == versions["arith"]
    (out / "extra.txt").write_text("x")
    again = cli("export", versions["arith"], "--format", "trl", "--out", str(out), store=versions["store"])
    assert again.returncode == 2 and "holds files no export wrote (extra.txt)" in one_line(again)
