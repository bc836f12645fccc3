"""One registry of judge backends, scorers and rewards (issue 48, item 1): every KIND of a KIND:TARGET spec
is a registered backend (prefdata.base.specs, prefdata/gate/backends.py), so a backend the operator
registers works as a judge in collect, a scorer in check and a reward in the trainers with no change to
prefdata; an unknown kind is one line listing the kinds of its role; `world` is a reward too; the old
Judge kinds (verifier, reward_model) still load."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from prefdata.base.errors import UnusableInput
from prefdata.commands.cli import main  # at load: it keeps the stdout it saw then

DUMMY = '''
from prefdata.base.specs import Backend
from prefdata.collect.judging import Verdict

CALLS = []


class Shorter:
    """The shorter response wins; equal lengths are undecided."""

    def __init__(self, target, options):
        self.target, self.options = target, dict(options)

    def judge(self, items):
        CALLS.append((self.target, len(items)))
        verdicts = []
        for item in items:
            a, b = len(item.response_a), len(item.response_b)
            label = None if a == b else ("a" if a < b else "b")
            verdicts.append(Verdict(item.pair_id, label, 1.0 if label else None,
                                    "shorter" if label else "equal_scores", "dummy", f"dummy:{self.target}"))
        return verdicts


class Dummy(Backend):
    roles = ("judge", "scorer", "reward")
    usage = "dummy:ANYTHING"

    def judge(self, spec, options):
        return Shorter(spec.target, options)

    def reward(self, spec):
        def reward(prompts, completions):
            CALLS.append(("reward", len(completions)))
            return [-float(len(c)) for c in completions]

        reward.__name__ = "dummy_shorter"
        return reward


backend = Dummy()
NOT_A_BACKEND = 3
'''

# chosen is the shorter side in p1 and p2, the longer in p3; p4's sides are of one length
PAIRS = pl.DataFrame({
    "id": ["p1", "p2", "p3", "p4"],
    "prompt": ["q1", "q2", "q3", "q4"],
    "chosen": ["42", "yes", "a long answer", "abc"],
    "rejected": ["forty-two", "yes, it is", "no", "xyz"],
})


@pytest.fixture()
def dummy(tmp_path, monkeypatch, register):
    """The backend `dummy`, registered only in the operator's registry file (PREFDATA_REGISTRY)."""
    (tmp_path / "dummy_backends.py").write_text(DUMMY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dummy_backends", raising=False)
    register(backends={"dummy": "dummy_backends:backend", "broken": "dummy_backends:NOT_A_BACKEND"})
    return importlib.import_module("dummy_backends")


def test_a_backend_in_the_operators_registry_file_judges_and_scores_with_no_change_to_prefdata(dummy):
    from prefdata.collect.judging import PairToJudge
    from prefdata.commands.collect import judge_params
    from prefdata.flows.collect import make_judge
    from prefdata.flows.params import Judge
    from prefdata.gate.scoring import verdicts_for

    # collect: --judge dummy:anything -> the flow's Judge -> the judge its backend builds
    fields = judge_params("dummy:anything")
    assert (fields["kind"], fields["model"]) == ("dummy", "anything")
    judge = Judge(**fields)
    assert judge == Judge.model_validate("dummy:anything")  # the flows' spec string reads the same
    assert judge.identity() == {"kind": "dummy", "model": "anything", "template": "pairwise-v1", "max_tokens": 512}
    runtime = {"base_url": None, "requests_in_flight": 3, "timeout_s": 5.0, "max_retries": 0, "api_key_env": None,
               "limit_name": "x", "slot_timeout_s": None}
    made = make_judge(judge.identity(), runtime)
    assert made.target == "anything" and made.options == {"requests_in_flight": 3, "timeout_s": 5.0, "max_retries": 0,
                                                          "api_key_env": None, "max_tokens": 512}
    [verdict] = made.judge([PairToJudge("q", "short", "a longer one")])
    assert (verdict.label, verdict.judge_model) == ("a", "dummy:anything")

    # check --scorer dummy:x: no scorer of its own, so its judge judges the sample, chosen shown as A
    frame = verdicts_for("dummy:x", PAIRS)
    assert frame["id"].to_list() == ["p1", "p2", "p3", "p4"]
    assert frame["preferred"].to_list() == ["chosen", "chosen", "rejected", None]
    assert ("x", 4) in dummy.CALLS


def test_the_check_command_reaches_an_operators_scorer(dummy, tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS.to_dicts()))
    report = tmp_path / "report.json"
    with pytest.raises(SystemExit):
        main(["check", str(data), "--scorer", "dummy:x", "--json", str(report), "--store", str(tmp_path / "store")])
    capsys.readouterr()
    assert ("x", 4) in dummy.CALLS
    [direction] = [c for c in json.loads(report.read_text())["checks"] if c["id"] == "label_direction"]
    assert direction["status"] != "skip", direction


def test_a_version_checked_shard_by_shard_takes_only_a_scorer_that_reads_no_text(dummy, tmp_path, capsys):
    """A backend says whether its scorer reads the pairs' text (reads_pairs); a sharded check never holds
    every text, so it refuses one that does, by the trait, not by the kind's name."""
    from prefdata.base.specs import backend

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS.to_dicts()))
    assert backend("dummy").reads_pairs and not backend("verdicts").reads_pairs
    with pytest.raises(SystemExit) as exited:
        main(["check", str(data), "--scorer", "dummy:x", "--batch-rows", "2", "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "checked shard by shard" in err and "dummy:x" in err, err
    assert not dummy.CALLS  # refused before it judged anything


def test_an_unknown_kind_is_one_line_listing_the_kinds_of_its_role(dummy):
    from prefdata.base.specs import parse_spec

    with pytest.raises(UnusableInput) as judge:
        parse_spec("dumy:x", "judge", "--judge")
    message = str(judge.value)
    assert message.startswith("--judge 'dumy:x': 'dumy' is not a registered judge backend (did you mean 'dummy'?): "
                              "use llm:MODEL@http://HOST:PORT/v1 or llm:PATH, optionally :TEMPLATE-vN; rm:PATH; "
                              "rule:NAME; dummy:ANYTHING; or world; to add one"), message
    assert "[backends]" in message and "prefdata.backends" in message and "\n" not in message
    with pytest.raises(UnusableInput, match=r":TEMPLATE-vN; rm:PATH; lm:PATH; rule:NAME; verdicts:FILE; "
                                            r"dummy:ANYTHING; or world; to add one"):
        parse_spec("oracle:x", "scorer", "--scorer")
    with pytest.raises(UnusableInput, match=r"--scorer 'oracle:x': 'oracle' is not a registered scorer backend"):
        parse_spec("oracle:x", "scorer", "--scorer")
    # a registered backend in a place none of its roles is: what that place takes
    with pytest.raises(UnusableInput, match=r"rewards: 'llm:m@http://127.0.0.1:1/v1': use rm:PATH; rule:NAME; "
                                            r"dummy:ANYTHING; or world \('llm:' is a judge and scorer backend, not a "
                                            r"reward\)"):
        parse_spec("llm:m@http://127.0.0.1:1/v1", "reward", "rewards:")
    # a registered name that is no backend: one line, and left out of every listing
    with pytest.raises(UnusableInput, match=r"'broken': the registered backend is a int without roles"):
        parse_spec("broken:x", "judge", "--judge")
    with pytest.raises(UnusableInput) as listed:
        parse_spec("nope:x", "judge", "--judge")
    assert "broken" not in str(listed.value)


def test_an_unknown_kind_on_the_command_line_exits_2_in_one_line(tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS.to_dicts()))
    with pytest.raises(SystemExit) as exited:
        main(["check", str(data), "--scorer", "oracle:x", "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exited.value.code == 2 and len(lines) == 1, err
    assert "'oracle' is not a registered scorer backend" in lines[0] and "verdicts:FILE" in lines[0]


def test_a_backend_cannot_shadow_a_built_in_one(register):
    from prefdata.base.specs import parse_spec

    register(backends={"rm": "somewhere:else"})
    with pytest.raises(UnusableInput, match=r"\[backends\] rm is already registered by prefdata"):
        parse_spec("rm:/x", "judge", "--judge")


def test_an_operators_backend_is_a_reward_and_hackable_unless_it_says_not(dummy):
    from prefdata.trainers.guards import hackable
    from prefdata.trainers.rewards import check_reward_models, reward_function, reward_specs

    [spec] = reward_specs(["dummy:x"])
    reward = reward_function(spec)
    assert reward.__name__ == "dummy_shorter"
    assert reward(["raw"], ["abc"], **{"raw_prompt": ["q"]}) == [-3.0]
    assert hackable(["dummy:x"]) and hackable(["rule:world", "dummy:x"])
    check_reward_models(["dummy:x"], 0.6)  # only rm: folders have a card to read


def test_world_is_a_reward_as_everywhere_a_rule_is_named():
    from prefdata.trainers.guards import hackable
    from prefdata.trainers.rewards import check_reward_models, reward_function, reward_specs
    from prefdata.world import WorldConfig, sampling_prompts, verify

    [world] = reward_specs(["world"])
    assert (world.kind, world.target) == ("rule", "prefdata.world:verify")
    reward = reward_function(world)
    assert reward.__name__ == "rule_verify"
    prompts = sampling_prompts(WorldConfig(), 4)
    completions = ["0000", "1234", "9999", "0042"]
    assert reward(prompts, completions) == [float(verify(p, c)) for p, c in zip(prompts, completions)]
    assert not hackable(["world"]) and not hackable(["world", "rule:prefdata.world:verify"])
    assert hackable(["world", "rm:/x"]) and hackable(["no spec"])
    check_reward_models(["world"], 0.6)
    with pytest.raises(UnusableInput, match=r"rewards: 'rm:/no/such/rm': reward model /no/such/rm not found"):
        reward_specs(["world", "rm:/no/such/rm"])


def test_the_old_judge_kinds_still_load():
    """Saved deployments (prefect.yaml's `kind: verifier`), flow-run parameters and older drafts' lineage
    name the kinds before the one vocabulary: read as rule and rm."""
    import yaml

    from prefdata.flows.params import Judge

    assert Judge(kind="verifier") == Judge(kind="rule") == Judge.model_validate({"kind": "verifier", "verifier": "world"})
    old = Judge.model_validate({"kind": "reward_model", "model": "/m", "then": {"kind": "verifier"}})
    assert old.kind == "rm" and old.lineage() == {"kind": "rm", "model": "/m",
                                                  "then": {"kind": "rule", "verifier": "prefdata.world:verify"}}
    deployments = yaml.safe_load((Path(__file__).resolve().parents[1] / "prefect.yaml").read_text())["deployments"]
    saved = [d["parameters"]["judge"] for d in deployments if "judge" in d.get("parameters", {})]
    assert saved and all(Judge.model_validate(j).kind in ("rule", "llm", "rm") for j in saved)


def test_parsing_a_spec_imports_no_model_library():
    code = ("import sys\nfrom prefdata.base.specs import parse_spec, usage\n"
            "parse_spec('llm:m@http://127.0.0.1:1/v1', 'judge', '--judge'); parse_spec('rm:/x', 'reward', 'rewards:')\n"
            "parse_spec('verdicts:v.jsonl', 'scorer', '--scorer'); usage(None)\n"
            "try:\n    parse_spec('zz:x', 'scorer', '--scorer')\nexcept Exception:\n    pass\n"
            "print([m for m in ('torch', 'transformers', 'polars', 'trl', 'prefect') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
