"""`prefdata collect`: a real run of the collect flow from the command line (a tiny model samples, a
rule judges, Prefect's test server runs it), its cache on a rerun, and one-line errors for bad specs."""

from __future__ import annotations

import json

import pytest

from prefdata.cli import main
from prefdata.store import Store

RULE = '''
def checksum(prompt, completion):
    """A tiny deterministic rule: the side with the larger character checksum (mod 7) wins."""
    return float(sum(map(ord, completion)) % 7)
'''


@pytest.fixture(scope="module")
def prefect_api():
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield PREFECT_API_URL.value()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out = capsys.readouterr()
    return exited.value.code, out.out, out.err


@pytest.fixture()
def rule_module(tmp_path, monkeypatch) -> str:
    (tmp_path / "collect_rules.py").write_text(RULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "collect_rules:checksum"


def test_collect_makes_a_draft_and_a_rerun_hits_the_cache(prefect_api, tiny_llama, tmp_path, rule_module,
                                                          sample_calls, capsys):
    calls = sample_calls
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is 2+2?\nName a colour.\nSay hi.\nCount to three.\n")
    args = ("collect", "--prompts", str(prompts), "--policy", str(tiny_llama), "--judge", f"rule:{rule_module}",
            "--name", "tiny-collect", "--candidates", "2", "--max-new-tokens", "4",
            "--cache-dir", str(tmp_path / "cache"), "--queue-dir", str(tmp_path / "queues"),
            "--store", str(tmp_path / "store"), "--json", str(tmp_path / "run.json"))
    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    for stage in ("sample:", "pair:", "judge:", "route:", "humans:", "draft:"):
        assert stage in out
    first = json.loads((tmp_path / "run.json").read_text())
    assert (first["prompts"], first["candidates"], first["comparisons"]) == (4, 8, 4)
    assert first["judge"]["n"] == 4
    assert calls["sample"] == 1  # one chunk of four prompts
    version = Store(str(tmp_path / "store")).get(first["version"])
    assert version.status == "draft" and version.manifest["lineage"]["components"]["judge"] == {
        "kind": "verifier", "verifier": rule_module}
    assert (tmp_path / "queues" / "tiny-collect.jsonl").is_file()

    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    again = json.loads((tmp_path / "run.json").read_text())
    assert calls["sample"] == 1  # the rerun sampled nothing: every chunk came from the cache
    assert again["version"] == first["version"]


@pytest.mark.parametrize("change, message", [
    ({"--judge": "nope"}, "--judge 'nope': use llm:MODEL@URL"),
    ({"--judge": "rule:no_such_module:f"}, "cannot import it"),
    ({"--judge": "llm:judge@ftp://host"}, "use llm:MODEL@http://"),
    ({"--judge": "llm:judge@http://127.0.0.1:8000/v1:no-such-template-v9"}, "judge template 'no-such-template-v9'"),
    ({"--judge": "rm:/no/such/folder"}, "is not a reward-model folder"),
    ({"--policy": "http://127.0.0.1:8000/v1"}, "needs --model"),
    ({"--policy": "/no/such/model"}, "not a model folder"),
    ({"--humans": "crowd"}, "--humans 'crowd'"),
    ({"--candidates": "1"}, "candidates"),
    ({"--name": "../x"}, "dataset name"),
])
def test_bad_specs_are_one_line_and_exit_2(tiny_llama, tmp_path, capsys, change, message):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Say hi.\n")
    options = {"--prompts": str(prompts), "--policy": str(tiny_llama), "--judge": "rule:prefdata.world:verify",
               "--name": "x", "--store": str(tmp_path / "store"), **change}
    code, out, err = cli(capsys, "collect", *[x for kv in options.items() for x in kv])
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "store").exists()


def test_llm_spec_parses_url_and_template():
    from prefdata.collect_cli import judge_params

    assert judge_params("llm:my/judge@http://127.0.0.1:8000/v1:world-judge-v2") == {
        "kind": "llm", "model": "my/judge", "base_url": "http://127.0.0.1:8000/v1", "template": "world-judge-v2"}
    assert judge_params("llm:j@https://api.example.org/v1")["template"] == "pairwise-v1"
