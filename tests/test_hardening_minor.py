"""Issue 44's minor audit findings, each with the behaviour it fixed: a split with a final newline,
a verifier that raises or returns NaN, GGUF paths that are not regular files and a symlinked output
folder, ids in report.md, a long-window zstd file, a source id equal to another row's content id,
and `--dask local:N` past twice the machine's cores."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import polars as pl
import pytest

from prefdata.base.errors import UnusableInput
from prefdata.commands.cli import main
from prefdata.data.importer import import_file

GOOD = {"prompt": "2+2?", "chosen": "4", "rejected": "5"}


def cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out = capsys.readouterr()
    return exited.value.code, out.out, out.err


def reconciles(result) -> bool:
    return result.read == result.kept + result.quarantined == len(result.quarantine) + result.kept


def write_rows(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".parquet":
        pl.DataFrame(rows).write_parquet(path)
    else:
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


# -- item 1: a split value with a final newline ----------------------------------------------------


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "row_by_row"])
@pytest.mark.parametrize("name", ["s.jsonl", "s.json", "s.parquet", "s.csv"])
def test_a_split_with_a_final_newline_is_quarantined(tmp_path, name, columnar):
    rows = [{**GOOD, "split": "test\n"}, {**GOOD, "rejected": "6", "split": "train"},
            {**GOOD, "rejected": "7", "split": "\ntest"}]
    result = import_file(write_rows(tmp_path / name, rows), columnar=columnar)
    assert result.pairs["split"].to_list() == ["train"]
    assert [q["reason"] for q in result.quarantine] == ["invalid_split", "invalid_split"]
    assert "'test\\n'" in result.quarantine[0]["detail"]
    assert (result.read, result.kept, result.quarantined) == (3, 1, 2) and reconciles(result)


def test_a_comparison_with_a_split_with_a_final_newline_is_quarantined(tmp_path):
    rows = [{"prompt": "q", "response_a": "a", "response_b": "b", "label": "a", "split": "test\n"},
            {"prompt": "q2", "response_a": "a", "response_b": "b", "label": "a", "split": "test"}]
    result = import_file(write_rows(tmp_path / "c.jsonl", rows))
    assert [q["reason"] for q in result.quarantine] == ["invalid_split"]
    assert result.comparisons["split"].to_list() == ["test"] and reconciles(result)


# -- item 2: a verifier that raises, or returns NaN --------------------------------------------------

PAIRS = pl.DataFrame({"id": ["p1", "p2"], "prompt": ["12+30=", "hello there"], "chosen": ["42", "a"],
                      "rejected": ["41", "b"]})
RULES = """
import math

def strict(prompt, completion):
    if "+" not in prompt:
        raise ValueError(f"not an arithmetic prompt: {prompt!r}\\nsecond line")
    return completion == "42"

def nan(prompt, completion):
    return math.nan if completion == "a" else 1.0

def text(prompt, completion):
    return "yes"
"""


@pytest.fixture()
def rules(tmp_path, monkeypatch, register):
    (tmp_path / "minor_rules.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    register(verifiers={"strict": "minor_rules:strict", "nan": "minor_rules:nan", "text": "minor_rules:text"})


@pytest.mark.parametrize(("name", "says"), [
    ("strict", "ValueError: not an arithmetic prompt: 'hello there' second line"),
    ("nan", "it returned nan, not a finite number"),
    ("text", "it returned 'yes', not True/False or a number"),
])
def test_a_verifier_that_fails_on_a_row_fails_the_run_naming_it_the_row_and_the_error(rules, name, says):
    from prefdata.gate.scoring import verdicts_for

    with pytest.raises(UnusableInput) as refused:
        verdicts_for(f"rule:{name}", PAIRS)
    message = str(refused.value)
    assert f"--scorer rule:{name} (minor_rules:{name})" in message and says in message, message
    assert "row 'p" in message and "\n" not in message


def test_check_with_a_verifier_that_raises_exits_2_in_one_line(tmp_path, capsys):
    data = write_rows(tmp_path / "d.jsonl", [{"prompt": "hello there", "chosen": "a", "rejected": "b"},
                                             {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}])
    code, _, err = cli(capsys, "check", str(data), "--scorer", "world")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "--scorer rule:world (prefdata.world:verify)" in lines[0] and "ValueError: not an arithmetic prompt" in lines[0]
    assert "internal error" not in err


# -- item 3: GGUF paths that are not regular files, a symlinked output folder ------------------------


@pytest.mark.parametrize(("make", "kind"), [
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    (lambda p: p.mkdir(), "is a folder, not a regular file"),
], ids=["fifo", "dev-zero", "folder"])
def test_a_gguf_path_that_is_not_a_regular_file_says_what_it_is(tmp_path, capsys, make, kind):
    source = tmp_path / "model.gguf"
    make(source)
    code, _, err = cli(capsys, "model", "import-gguf", str(source), str(tmp_path / "out"))
    assert code == 2 and kind in err and "no such GGUF file" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_import_gguf_follows_a_symlinked_empty_output_folder(tmp_path, capsys):
    pytest.importorskip("gguf", reason="the gguf extra is not installed: pip install 'prefdata[gguf]'")
    from bench.tiny_models import build_tiny_gguf

    gguf_file, _ = build_tiny_gguf(tmp_path / "tiny.gguf")
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    code, out, err = cli(capsys, "model", "import-gguf", str(gguf_file), str(link))
    assert code == 0, err
    assert link.is_symlink() and (real / "config.json").is_file() and (real / "prefdata_gguf.json").is_file()
    assert not list(tmp_path.glob(".*tmp-*"))

    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    code, _, err = cli(capsys, "model", "import-gguf", str(gguf_file), str(loop))
    assert code == 2 and "a symlink that loops" in err and len(err.strip().splitlines()) == 1, err


# -- item 4: ids in report.md -------------------------------------------------------------------------

EVIL = "a`b <img src=x onerror=alert(1)>"


def test_report_md_shows_hostile_ids_and_messages_as_text(tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    from prefdata.checks.base import CheckResult
    from prefdata.gate.report import md_code, write_markdown

    offending = (EVIL, "``x", "c|d", "new\nline", "<script>alert(2)</script>")
    results = [CheckResult("exact_duplicates", "fail", metric=1.0, threshold=0.0, offending=offending,
                           message="row <img src=x onerror=alert(3)> [x](javascript:alert(4)) `kept <b>` | piped",
                           details={"examples": [{"id": EVIL, "duplicate_of": "o`"}]})]
    text = write_markdown(results, tmp_path / "report.md", "T <img src=x onerror=alert(5)>").read_text()
    assert f"- {md_code(EVIL)}" in text and md_code(EVIL) == "``a`b <img src=x onerror=alert(1)>``"
    assert "<img" not in text.replace(md_code(EVIL), "")  # outside the code spans, only &lt;img
    page = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    assert "<img" not in page and "<script" not in page and 'href="javascript' not in page, page
    for shown in ("a`b &lt;img src=x onerror=alert(1)&gt;", "``x", "c|d", "new\\nline", "o`"):
        assert f"<code>{shown}</code>" in page, (shown, page)
    assert "<code>kept &lt;b&gt;</code>" in page  # the message's own code span is still one


# -- item 5: a zstd frame with a long window -----------------------------------------------------------


def zstd_stream(data: bytes, window_log: int) -> bytes:
    """`data` as `zstd --long=N` writes a stream (no size in the frame header, so the window is not cut)."""
    zstandard = pytest.importorskip("zstandard")
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log, enable_ldm=True)
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as writer:
        writer.write(data)
    return out.getvalue()


@pytest.mark.parametrize("name", ["long.jsonl.zst", "long.csv.zst", "long.json.zst"])
def test_a_long_window_zstd_file_says_so_and_how_to_read_it(tmp_path, name, capsys):
    rows = [{**GOOD, "rejected": str(i + 10)} for i in range(50)]
    plain = write_rows(tmp_path / name.removesuffix(".zst"), rows).read_bytes()
    src = tmp_path / name
    src.write_bytes(zstd_stream(plain, 31))
    with pytest.raises(UnusableInput) as refused:
        import_file(src)
    message = str(refused.value)
    assert "corrupt" not in message.replace("not corrupt", "") and "2048 MiB (2^31)" in message
    assert "zstd -d --long=31" in message and "128 MiB (--long=27)" in message
    code, _, err = cli(capsys, "import", str(src), "--out", str(tmp_path / "o.jsonl"))
    assert code == 2 and "zstd -d --long=31" in err and len(err.strip().splitlines()) == 1, err

    src.write_bytes(zstd_stream(plain, 27))  # the largest window read
    assert import_file(src).kept == 50


# -- item 6: a source id equal to another row's content id --------------------------------------------


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "row_by_row"])
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
def test_a_source_id_equal_to_a_content_id_gives_the_same_import_in_either_order(tmp_path, suffix, columnar):
    """A row without an id takes its content id, numbered past every source id of the file: the row
    that gives the id keeps it, whichever comes first (before, the later one was quarantined as
    duplicate_id_conflict when the row without an id came first, and both kept otherwise)."""
    without = {"prompt": "q", "chosen": "good", "rejected": "bad", "id": None}
    content_id = import_file(write_rows(tmp_path / f"one{suffix}", [without])).pairs["id"][0]
    given = {"prompt": "other", "chosen": "x", "rejected": "y", "id": content_id}
    copy = {**without, "id": content_id}  # the same row under its own content id (an export's)
    for other, expected in [(given, [(content_id, "other"), (f"{content_id}-2", "q")]),
                            (copy, [(content_id, "q"), (f"{content_id}-2", "q")])]:
        for k, order in enumerate([[other, without], [without, other]]):
            if suffix == ".csv":  # no id is an empty cell
                order = [{**r, "id": r["id"] or ""} for r in order]
            result = import_file(write_rows(tmp_path / f"{k}{suffix}", order), columnar=columnar)
            assert sorted(result.pairs.select("id", "prompt").rows()) == expected, (order, result.quarantine)
            assert result.quarantine == [] and (result.read, result.kept) == (2, 2) and reconciles(result)


# -- item 7: --dask local:N past the machine's cores ----------------------------------------------------


def test_dask_local_workers_are_bounded_by_the_usable_cores(monkeypatch):
    from prefdata.checks import distributed

    monkeypatch.setattr(distributed, "usable_cores", lambda: 2)
    assert distributed.check_address("local:4") == "local:4" and distributed.check_address("local:1") == "local:1"
    for spec in ("local:5", "local:24", "local:99999999999999999999"):
        with pytest.raises(UnusableInput, match=r"at most two workers per core, and this machine gives this process "
                                                r"2 \(local:4\)"):
            distributed.check_address(spec)
    assert distributed.check_address("tcp://10.0.0.1:8786") == "tcp://10.0.0.1:8786"  # a cluster: its own size
    assert distributed.usable_cores() >= 1


def test_check_refuses_more_local_workers_than_cores_in_one_line(tmp_path, capsys):
    from prefdata.checks.distributed import usable_cores

    data = write_rows(tmp_path / "d.jsonl", [GOOD])
    code, _, err = cli(capsys, "check", str(data), "--dask", f"local:{2 * usable_cores() + 1}")
    assert code == 2 and f"(local:{2 * usable_cores()})" in err and len(err.strip().splitlines()) == 1, err


def test_a_comparison_id_equal_to_a_content_id_gives_the_same_import_in_either_order(tmp_path):
    """The same rule on the comparisons format's batched path (comparison_batches): streamed into the
    store a row at a time, the row that gives the id keeps it in either order."""
    from prefdata.data.importer import import_file_to_store
    from prefdata.data.store import Store

    without = {"prompt": "q", "response_a": "good", "response_b": "bad", "label": "a"}
    one = write_rows(tmp_path / "one.jsonl", [without])
    content_id = import_file(one, fmt="comparisons").comparisons["id"][0]
    given = {"id": content_id, "prompt": "other", "response_a": "x", "response_b": "y", "label": "b"}
    outcomes = []
    for k, order in enumerate([[given, without], [without, given]]):
        src = write_rows(tmp_path / f"c{k}.jsonl", order)
        result, version = import_file_to_store(src, f"order{k}", Store(str(tmp_path / "store")), fmt="comparisons",
                                               batch_rows=1)
        rows = Store(str(tmp_path / "store")).load(version.ref, "comparisons")
        outcomes.append((sorted(rows.select("id", "prompt").rows()), result.quarantine))
    assert outcomes[0] == outcomes[1] == ([(content_id, "other"), (f"{content_id}-2", "q")], [])
