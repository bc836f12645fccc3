"""`prefdata collect`: a real run of the collect flow from the command line (a tiny model samples, a
rule judges, Prefect's test server runs it), its cache on a rerun, and one-line errors for bad specs."""

from __future__ import annotations

import json
import os
import math
from pathlib import Path

import pytest

from prefdata.commands.cli import main
from prefdata.data.store import Store

RULE = '''
def checksum(prompt, completion):
    """A tiny deterministic rule: the side with the larger character checksum (mod 7) wins."""
    return float(sum(map(ord, completion)) % 7)
'''


def cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out = capsys.readouterr()
    return exited.value.code, out.out, out.err


@pytest.fixture()
def rule_module(tmp_path, monkeypatch, register) -> str:
    (tmp_path / "collect_rules.py").write_text(RULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    register(verifiers={"checksum": "collect_rules:checksum"})  # the operator's allow-list (prefdata/base/registry.py)
    return "collect_rules:checksum"


def collect_args(tmp_path, prompts, model, rule: str, name: str) -> tuple[str, ...]:
    """`prefdata collect` on the tiny model with a rule judge, everything it writes under tmp_path."""
    return ("collect", "--prompts", str(prompts), "--policy", str(model), "--judge", f"rule:{rule}",
            "--name", name, "--candidates", "2", "--max-new-tokens", "4",
            "--cache-dir", str(tmp_path / "cache"), "--queue-dir", str(tmp_path / "queues"),
            "--store", str(tmp_path / "store"), "--json", str(tmp_path / "run.json"))


def test_collect_makes_a_draft_and_a_rerun_hits_the_cache(prefect_api, tiny_llama, tmp_path, rule_module,
                                                          sample_calls, capsys):
    calls = sample_calls
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is 2+2?\nName a colour.\nSay hi.\nCount to three.\n")
    args = collect_args(tmp_path, prompts, tiny_llama, rule_module, "tiny-collect")
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
        "kind": "rule", "verifier": rule_module}
    assert (tmp_path / "queues" / "tiny-collect.jsonl").is_file()

    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    again = json.loads((tmp_path / "run.json").read_text())
    assert calls["sample"] == 1  # the rerun sampled nothing: every chunk came from the cache
    assert again["version"] == first["version"]


SHORTER = '''
from prefdata.base.specs import Backend
from prefdata.collect.judging import Verdict

JUDGED = []


class Shorter:
    def judge(self, items):
        JUDGED.extend(items)
        return [Verdict(i.pair_id, None if len(i.response_a) == len(i.response_b) else
                        "a" if len(i.response_a) < len(i.response_b) else "b", 1.0, "shorter", "shorter", "shorter")
                for i in items]


class ShorterWins(Backend):
    roles = ("judge",)
    usage = "shorter:ANYTHING"

    def judge(self, spec, options):
        return Shorter()


backend = ShorterWins()
'''


def test_collect_judges_with_a_backend_the_operator_registered(prefect_api, tiny_llama, tmp_path, monkeypatch,
                                                               register, capsys):
    """`--judge shorter:anything`: a backend named only in the operator's registry file judges the run,
    with no change to prefdata; the lineage names it by its kind."""
    import sys

    (tmp_path / "shorter_backend.py").write_text(SHORTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shorter_backend", raising=False)
    register(backends={"shorter": "shorter_backend:backend"})
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Say hi.\nName a colour.\n")
    args = [*collect_args(tmp_path, prompts, tiny_llama, "unused", "shorter")]
    args[args.index("--judge") + 1] = "shorter:anything"
    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    run = json.loads((tmp_path / "run.json").read_text())
    from shorter_backend import JUDGED

    assert run["judge"]["n"] == run["comparisons"] == len(JUDGED) > 0
    judge = Store(str(tmp_path / "store")).get(run["version"]).manifest["lineage"]["components"]["judge"]
    assert judge == {"kind": "shorter", "model": "anything", "template": "pairwise-v1", "max_tokens": 512}


STDOUT_LINES = ("collect", "sample + judge", "sample", "pair", "judge", "route", "humans", "draft")


def test_collect_shows_each_stage_live_on_stderr_and_a_rerun_shows_them_from_the_cache(
        prefect_api, tiny_llama, tmp_path, rule_module, sample_calls, capsys):
    """The progress lines come from the flow run's task runs in Prefect's API (what any task runner
    reports), one per stage; stderr is not a terminal here, so they are plain lines, never redrawn."""
    from prefdata.flows.params import Judge, Policy

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"What is {i}+{i}?\n" for i in range(20)))
    args = collect_args(tmp_path, prompts, tiny_llama, rule_module, "tiny-progress")
    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    result = json.loads((tmp_path / "run.json").read_text())
    samples = math.ceil(20 / Policy().chunk_size)  # 3 chunks of at most 8 prompts
    judges = math.ceil(result["comparisons"] / Judge().chunk_size)
    assert sample_calls["sample"] == samples and samples == 3  # the chunks the flow really ran
    lines = err.splitlines()
    assert "progress: load prompts done" in lines, err
    assert f"progress: sample {samples}/{samples} chunks" in lines, err
    assert f"progress: judge {judges}/{judges} chunks" in lines, err
    assert "progress: write draft done" in lines, err
    assert not any(c in err for c in "\r\x1b"), "plain lines: no redraws, no colours"
    # stdout stays the run's result, as before: the same lines, no progress in it
    assert [line.split(":")[0] for line in out.splitlines()] == list(STDOUT_LINES), out
    routes = ", ".join(f"{n} {route}" for route, n in result["routes"]["route"].items())
    assert f"route: {routes}" in out.splitlines(), out  # pairs per route, as the counters hold them

    code, again, err = cli(capsys, *args)
    assert code == 0, again + err
    assert sample_calls["sample"] == samples  # nothing sampled again
    lines = err.splitlines()
    assert f"progress: sample {samples}/{samples} chunks ({samples} from cache)" in lines, err
    assert f"progress: judge {judges}/{judges} chunks ({judges} from cache)" in lines, err
    assert "progress: write draft done" in lines, err
    assert again == out


def test_stage_counts_come_from_the_task_runs_names_and_states():
    from prefdata.base.progress import Stage, chunk_name, tally

    stages = [Stage("load prompts", ("load-prompts",)), Stage("sample", ("sample",), "chunks"),
              Stage("judge", ("judge",), "chunks"), Stage("write draft", ("write-draft",))]
    runs = [("load-prompts-0", "COMPLETED", "Completed"),
            ("sample-2df", "PENDING", "Pending"),  # a chunk whose run has not taken its name yet
            (chunk_name("sample", 1, 3), "COMPLETED", "Cached"), (chunk_name("sample", 2, 3), "RUNNING", "Running"),
            (chunk_name("judge", 2, 2), "FAILED", "Failed"),
            ("sample-and-judge-0", "RUNNING", "Running")]  # the subflow's run in its parent: no stage
    counts = tally(stages, runs)
    assert [c.line() for c in counts] == ["load prompts done", "sample 1/3 chunks (1 from cache)",
                                          "judge 0/2 chunks (1 failed)", "write draft waiting"]
    assert [c.finished for c in counts] == [True, False, False, False]
    done = tally(stages, [(chunk_name("sample", i, 3), "COMPLETED", "Completed") for i in (1, 2, 3)])
    assert done[1].line() == "sample 3/3 chunks" and done[1].finished


def test_plain_lines_say_a_stage_when_it_starts_and_ends_never_twice():
    import io

    from prefdata.base.progress import PlainLines, Stage, chunk_name, tally

    stages = [Stage("sample", ("sample",), "chunks")]
    log = io.StringIO()
    lines = PlainLines(log, every_s=3600)
    for states in (["PENDING"], ["RUNNING", "PENDING"], ["COMPLETED", "RUNNING"], ["COMPLETED", "COMPLETED"]):
        lines.update(tally(stages, [(chunk_name("sample", i, 2), s, s.title()) for i, s in enumerate(states, 1)]))
    lines.close(tally(stages, [(chunk_name("sample", i, 2), "COMPLETED", "Completed") for i in (1, 2)]))
    assert log.getvalue() == "progress: sample 0/2 chunks\nprogress: sample 2/2 chunks\n"


def test_live_bars_draw_each_stage_on_a_terminal():
    import io

    from rich.console import Console

    from prefdata.base.progress import LiveBars, Stage, chunk_name, tally

    stages = [Stage("sample", ("sample",), "chunks"), Stage("write draft", ("write-draft",))]
    screen = io.StringIO()
    bars = LiveBars(stages, Console(file=screen, force_terminal=True, width=100))
    bars.update(tally(stages, [(chunk_name("sample", 1, 4), "COMPLETED", "Cached")]))
    bars.close(tally(stages, [(chunk_name("sample", i, 4), "COMPLETED", "Cached") for i in range(1, 5)]))
    assert "\x1b[" in screen.getvalue()  # redrawn in place
    last = screen.getvalue().rsplit("sample", 1)[1]
    assert "4/4" in last and "chunks (4 from cache)" in last


@pytest.mark.parametrize("change, message", [
    ({"--judge": "nope"}, "--judge 'nope': use llm:MODEL@http://HOST:PORT/v1 or llm:PATH"),
    ({"--judge": "lm:/some/model"}, "--judge 'lm:/some/model': use llm:"),  # a scorer's kind, not a judge's
    ({"--judge": "rule:no_such_module:f"}, "--judge rule 'no_such_module:f' is not a registered verifier"),
    ({"--judge": "oracle:x"}, "--judge 'oracle:x': 'oracle' is not a registered judge backend"),
    ({"--judge": "llm:judge@ftp://host"}, "a served judge is llm:MODEL@http://"),
    ({"--judge": "llm:judge@http://127.0.0.1:8000/v1:no-such-template-v9"}, "judge template 'no-such-template-v9'"),
    ({"--judge": "rm:/no/such/folder"}, "is not a reward-model folder"),
    ({"--judge": "llm:/no/such/model"}, "/no/such/model is no model folder or .gguf file"),
    ({"--judge-template": "world-judge-v2"}, "--judge-template is for llm judges"),
    ({"--then-judge": "llm:/no/such/model"}, "--then-judge 'llm:/no/such/model': /no/such/model is no model folder"),
    ({"--policy": "http://127.0.0.1:8000/v1"}, "needs --model"),
    ({"--policy": "/no/such/model"}, "not a model folder"),
    ({"--humans": "crowd"}, "--humans 'crowd'"),
    ({"--candidates": "1"}, "candidates"),
    ({"--name": "../x"}, "dataset name"),
    ({"--chat": "maybe"}, "--chat: 'maybe' is not one of auto, true, false"),
    ({"--policy": "world", "--chat": "true"}, "--policy world: chat: true, but the tokenizer's chat template does "
                                              "not write the assistant's turn"),
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
    from prefdata.commands.collect import judge_params

    assert judge_params("llm:my/judge@http://127.0.0.1:8000/v1:world-judge-v2") == {
        "kind": "llm", "model": "my/judge", "base_url": "http://127.0.0.1:8000/v1", "template": "world-judge-v2"}
    assert judge_params("llm:j@https://api.example.org/v1")["template"] == "pairwise-v1"


def test_llm_spec_without_a_url_is_a_local_model(tiny_llama):
    from prefdata.commands.collect import judge_params

    assert judge_params(f"llm:{tiny_llama}:world-judge-v2") == {
        "kind": "llm", "model": str(tiny_llama.resolve()), "base_url": None, "template": "world-judge-v2"}
    assert judge_params(f"llm:{tiny_llama}")["template"] == "pairwise-v1"


def test_a_local_judge_runs_in_process_and_a_weak_one_says_so(prefect_api, tiny_llama, tmp_path, rule_module, capsys):
    """`--judge llm:PATH`: no server; the judge's max tokens come from the command line and are part of
    its identity (the cache key and the lineage). A random tiny model decides nothing, and the run says
    what that means instead of leaving a row of zeros."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Say hi.\nName a colour.\n")
    args = [*collect_args(tmp_path, prompts, tiny_llama, rule_module, "local-judge")]
    args[args.index("--judge") + 1] = f"llm:{tiny_llama}"
    code, out, err = cli(capsys, *args, "--judge-max-tokens", "4")
    assert code == 0, out + err
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["judge"]["n"] == 2 and run["judge"]["decided"] == 0 and run["judge"]["unparseable"] == 2
    assert "judge: a weak judge here (2 pairs got replies naming no response" in out
    assert "use a verifier (rule:name) or a larger served model" in out.lower()
    judge = Store(str(tmp_path / "store")).get(run["version"]).manifest["lineage"]["components"]["judge"]
    assert judge == {"kind": "llm", "model": str(tiny_llama.resolve()), "template": "pairwise-v1", "max_tokens": 4}


def test_a_second_judge_gets_only_what_the_first_leaves(prefect_api, tiny_llama, tmp_path, rule_module, capsys):
    """--then-judge: the rule decides the pairs whose checksums differ, the LLM judge (in process, its
    max tokens from the command line) gets the rest, and the lineage names both in order."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"Say {w}.\n" for w in ("hi", "yes", "no", "red", "blue", "sky", "tea", "one")))
    args = [*collect_args(tmp_path, prompts, tiny_llama, rule_module, "cascade"), "--candidates", "4",
            "--then-judge", f"llm:{tiny_llama}", "--judge-max-tokens", "4"]
    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    run = json.loads((tmp_path / "run.json").read_text())
    rule, llm = run["judges"]
    assert rule["pairs"] == run["comparisons"] and 0 < llm["pairs"] == rule["pairs"] - rule["decided"]
    assert run["judge"]["decided"] == rule["decided"] + llm["decided"]
    rows = Store(str(tmp_path / "store")).load(run["version"], "comparisons").to_dicts()
    from collect_rules import checksum

    # equal checksums (the rule's ties), and only those, went on to the LLM judge; what it left undecided
    # keeps the rule's verdict
    tied = [r for r in rows if checksum("", r["response_a"]) == checksum("", r["response_b"])]
    assert len(tied) == llm["pairs"]
    by_llm = [r for r in rows if r["judge_model"] == str(tiny_llama.resolve())]
    assert len(by_llm) == llm["decided"] and all(r in tied for r in by_llm)
    assert all(r["judge_reason"] == "equal_scores" for r in tied if r not in by_llm)
    assert f"llm judge 2 decided {llm['decided']} of the {llm['pairs']} it saw" in out
    judge = Store(str(tmp_path / "store")).get(run["version"]).manifest["lineage"]["components"]["judge"]
    assert judge["kind"] == "rule" and judge["then"]["kind"] == "llm" and judge["then"]["max_tokens"] == 4


def test_collect_on_the_demo_world_from_the_command_line(prefect_api, tmp_path, capsys, monkeypatch):
    """README's line: `collect --prompts world --policy world --judge world`: the world's fresh prompts,
    its shipped SFT model and its verifier, with nothing to write first."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "collect", "--prompts", "world", "--policy", "world", "--judge", "world",
                         "--name", "arith", "--n", "8", "--json", str(tmp_path / "run.json"),
                         "--store", str(tmp_path / "store"))
    assert code == 0, out + err
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["prompts"], run["candidates"]) == (8, 32)  # 4 candidates each
    assert run["judge"]["n"] == run["comparisons"] > 0 and run["judge"]["decided"] > 0  # the verifier decides
    version = Store(str(tmp_path / "store")).get(run["version"])
    assert version.manifest["lineage"]["components"]["judge"] == {"kind": "rule", "verifier": "prefdata.world:verify"}
    # the world's policy reads plain text (its template writes no assistant's turn): recorded, and on the card
    assert version.manifest["lineage"]["rendering"] == {"chat": False, "template_sha256": None, "system": None}
    assert "Prompts rendered for sampling: plain text." in Store(str(tmp_path / "store")).read_text(version.ref,
                                                                                                  "README.md")


def test_collect_renders_prompts_and_messages_through_the_chat_template(prefect_api, tiny_llama, tmp_path,
                                                                         rule_module, capsys):
    """--chat true --system-prompt: the draft's lineage records the rendering the trainers read
    (lineage["rendering"]) and its card says it; a prompts file in TRL's conversational format keeps
    each prompt's turns (prompt_messages) beside its text in both tables."""
    from prefdata.models.chat import template_sha256
    from prefdata.models.loading import load_tokenizer

    turns = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Red."},
             {"role": "user", "content": "Another?"}]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in (
        {"prompt": [{"role": "user", "content": "Say hi."}]}, {"prompt": turns}, {"prompt": "Count to three."},
        {"prompt": turns})))  # the same conversation twice is one prompt
    args = [*collect_args(tmp_path, prompts, tiny_llama, rule_module, "tiny-chat"), "--chat", "true",
            "--system-prompt", "Be brief.", "--candidates", "3", "--max-new-tokens", "6"]
    code, out, err = cli(capsys, *args)
    assert code == 0, out + err
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["prompts"], run["candidates"]) == (3, 9)
    store = Store(str(tmp_path / "store"))
    version = store.get(run["version"])
    sha = template_sha256(load_tokenizer(tiny_llama))
    assert version.manifest["lineage"]["rendering"] == {"chat": True, "template_sha256": sha, "system": "Be brief."}
    assert "sampling_api" not in version.manifest["lineage"]["components"]  # in process: no server's API
    card = store.read_text(version.ref, "README.md")
    assert f"Prompts rendered for sampling: chat template sha256:{sha[:12]}, system prompt 'Be brief.'." in card
    comparisons = store.load(version.ref, "comparisons")
    given = {r["prompt"]: r["prompt_messages"] for r in comparisons.select("prompt", "prompt_messages").iter_rows(named=True)}
    assert set(given) == {"Say hi.", "User: Name a colour.\n\nAssistant: Red.\n\nUser: Another?", "Count to three."}
    for text, messages in given.items():
        expected = {"Say hi.": [turns[0] | {"content": "Say hi."}], "Count to three.": None}.get(text, turns)
        assert (json.loads(messages) if messages else None) == expected, text
    pairs = store.load(version.ref)
    assert pairs.height > 0 and "prompt_messages" in pairs.columns


def test_collect_onto_previous_grows_the_newest_validated_version(prefect_api, tmp_path, capsys, monkeypatch):
    """The nightly shape: the second night's draft holds the validated first night's pairs,
    comparisons and votes, then its own (here the same prompts again: every id numbered after the
    parent's copy, its comparison and votes alike), the parent's files shared."""
    monkeypatch.chdir(tmp_path)
    night = ("collect", "--prompts", "world", "--policy", "world", "--judge", "world", "--name", "arith", "--n", "6",
             "--json", str(tmp_path / "run.json"), "--store", str(tmp_path / "store"))
    code, out, err = cli(capsys, *night, "--onto", "previous")  # nothing validated yet: the first night stands alone
    assert code == 0, out + err
    st = Store(str(tmp_path / "store"))
    first = st.get(json.loads((tmp_path / "run.json").read_text())["version"])
    assert first.manifest["lineage"]["parent"] is None
    st.set_status(first.ref, "validated", report={"passed": True, "checks": []})
    code, out, err = cli(capsys, *night, "--onto", "previous")
    assert code == 0, out + err
    child = st.get(json.loads((tmp_path / "run.json").read_text())["version"])
    assert child.manifest["lineage"]["parent"] == first.ref and st.verify(child.ref) == []
    for config in ("default", "comparisons"):
        theirs, ours = st.load(first.ref, config), st.load(child.ref, config)
        assert ours.height == 2 * theirs.height and ours["id"].n_unique() == ours.height
        assert ours.head(theirs.height).equals(theirs)
        assert ours["id"].tail(theirs.height).to_list() == [f"{i}-2" for i in theirs["id"]]
    if "votes" in child.manifest["counts"]["rows"]:
        votes = st.load(child.ref, "votes")
        assert set(votes["pair_id"]) <= set(st.load(child.ref, "comparisons")["id"])
    shared = [rel for rel in first.manifest["files"] if rel.startswith("data/")]
    assert all(os.path.samefile(Path(st.path(first.ref)) / rel, Path(st.path(child.ref)) / rel.replace("-of-00001", "-of-00002"))
               for rel in shared)


def test_collect_onto_a_version_the_store_lacks_fails_before_sampling(prefect_api, tmp_path, capsys, monkeypatch,
                                                                     sample_calls):
    """A wrong `onto` is found before a night of sampling, not when the draft is written."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "collect", "--prompts", "world", "--policy", "world", "--judge", "world",
                         "--name", "arith", "--n", "4", "--store", str(tmp_path / "store"),
                         "--onto", "arith@ffffffffffff")
    assert code == 2  # (Prefect's own log handler may print to the captured stream after it closes)
    assert "onto arith@ffffffffffff: no dataset named 'arith'" in " ".join(err.split())
    assert sample_calls["sample"] == 0
