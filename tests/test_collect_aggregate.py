"""How the collect flow turns human votes into labels: majority, or Dawid-Skene over the whole crowd
(prefdata/collect/collection.py `label`, the flow's `humans.aggregate`, `prefdata collect --aggregate`)."""

from __future__ import annotations

import random

import polars as pl
import pytest

from prefdata.collect import collection
from prefdata.data.records import pair_id
from prefdata.world import SimulatedAnnotator, correct_vote, verify, votes_frame
from prefdata.world.tasks import arithmetic_problem

# One careful annotator, one sloppy one and one who votes at random. Majority lets the sloppy and the
# random one outvote the careful one; Dawid-Skene learns from all the votes that the careful one is
# right far more often and follows it.
CROWD = [SimulatedAnnotator("careful", accuracy=0.9, tie_rate=0.0, seed=1),
         SimulatedAnnotator("sloppy", accuracy=0.65, tie_rate=0.0, seed=1),
         SimulatedAnnotator("random", accuracy=0.5, tie_rate=0.0, seed=1)]


def _human_routed(n: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """n world arithmetic comparisons, each of a right and a wrong answer (sides shuffled), all routed
    to humans: (routed, comparisons) as the flow hands them to `label`."""
    rng = random.Random(seed)
    routed, comparisons = [], []
    while len(comparisons) < n:
        example = arithmetic_problem(rng)
        right, wrong = example.completion, f"{(int(example.completion) + rng.randint(1, 9)) % 10000:04d}"
        a, b = (right, wrong) if rng.random() < 0.5 else (wrong, right)
        pid = pair_id(example.prompt, a, b)
        if any(c["pair_id"] == pid for c in comparisons):
            continue
        comparisons.append({"id": pid, "pair_id": pid, "prompt_id": None, "prompt": example.prompt,
                            "response_a": a, "response_b": b, "model_a": "m", "model_b": "m"})
        routed.append({"pair_id": pid, "judge_label": None, "judge_reason": None, "judge_model": None,
                       "judge_template": None, "route": "human", "route_reason": "low_confidence"})
    return routed, comparisons


def test_dawid_skene_outvotes_a_random_annotator():
    routed, comparisons = _human_routed(300)
    frame = pl.DataFrame(comparisons).select("pair_id", "prompt", "response_a", "response_b")
    votes = votes_frame(frame, CROWD, verify).to_dicts()
    truth = {c["pair_id"]: correct_vote(c["prompt"], c["response_a"], c["response_b"]) for c in comparisons}
    assert set(truth.values()) == {"a", "b"}

    def agreement(aggregate: str) -> float:
        labelled = collection.label(routed, comparisons, votes, aggregate=aggregate)
        assert [r["pair_id"] for r in labelled] == list(truth) and {r["label_source"] for r in labelled} == {"human"}
        return sum(r["label"] == truth[r["pair_id"]] for r in labelled) / len(labelled)

    majority, dawid_skene = agreement("majority"), agreement("dawid-skene")
    print(f"agreement with the verifier: majority {majority:.3f}, dawid-skene {dawid_skene:.3f}")
    assert dawid_skene >= majority + 0.05  # separates clearly: ~0.9 (the careful one) against ~0.78
    assert dawid_skene >= 0.85


def test_dawid_skene_also_labels_audited_pairs_and_leaves_the_judge_alone():
    routed, comparisons = _human_routed(60, seed=1)
    routed[0] = {**routed[0], "route": "judge", "judge_label": "tie"}
    routed[1] = {**routed[1], "route": "both", "judge_label": "a"}
    frame = pl.DataFrame(comparisons).select("pair_id", "prompt", "response_a", "response_b")
    votes = [v for v in votes_frame(frame, CROWD, verify).to_dicts() if v["pair_id"] != routed[0]["pair_id"]]
    labelled = collection.label(routed, comparisons, votes, aggregate="dawid-skene")
    assert (labelled[0]["label"], labelled[0]["label_source"]) == ("tie", "judge")
    assert labelled[1]["label_source"] == "human" and labelled[1]["label"] in ("a", "b")


def test_an_unknown_aggregate_is_refused():
    routed, comparisons = _human_routed(2)
    with pytest.raises(ValueError, match="aggregate 'mean': choose one of majority, dawid-skene"):
        collection.label(routed, comparisons, [], aggregate="mean")


def test_the_flow_parameter_is_checked_and_described():
    from pydantic import ValidationError

    from prefdata.flows.params import Humans

    assert Humans().aggregate == "majority"
    assert Humans(aggregate="dawid-skene").aggregate == "dawid-skene"
    assert "Dawid-Skene" in Humans.model_fields["aggregate"].description
    with pytest.raises(ValidationError, match="aggregate"):
        Humans(aggregate="mean")


def test_collect_command_refuses_an_unknown_aggregate_in_one_line(tmp_path, capsys):
    from prefdata.commands.cli import main

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Say hi.\n")
    with pytest.raises(SystemExit) as exited:
        main(["collect", "--prompts", str(prompts), "--policy", str(tmp_path), "--judge", "rule:prefdata.world:verify",
              "--name", "x", "--store", str(tmp_path / "store"), "--aggregate", "mean"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--aggregate 'mean': choose majority or dawid-skene" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "store").exists()


def test_the_collect_flow_labels_with_dawid_skene(prefect_api, tmp_path):
    """The real flow (the world's policy samples, its verifier judges, simulated annotators vote) with
    humans.aggregate "dawid-skene": every human label is the Dawid-Skene label of the stored votes,
    and the choice is in the version's lineage."""
    from prefdata.checks.agreement import dawid_skene_labels
    from prefdata.flows.collect import collect
    from prefdata.flows.params import Engine, Humans, Policy, Prompts, Routing, SimulatedAnnotators
    from prefdata.data.store import Store
    from prefdata.world import build_world

    build_world()
    humans = Humans(queue_dir=str(tmp_path / "queues"), aggregate="dawid-skene",
                    simulated=SimulatedAnnotators(k=3, accuracy=0.7))
    result = collect(name="ds", prompts=Prompts(n=8), policy=Policy(candidates=3, temperature=1.5, max_new_tokens=8),
                     routing=Routing(audit_share=1.0), humans=humans, engine=Engine(cache_dir=str(tmp_path / "cache")),
                     store=str(tmp_path / "store"))
    st = Store(str(tmp_path / "store"))
    v = st.get(result["version"])
    comparisons, votes = st.load(v.ref, "comparisons"), st.load(v.ref, "votes")
    assert votes.height == 3 * result["queued"] > 0
    expected = dawid_skene_labels(votes.to_dicts())
    human = comparisons.filter(pl.col("label_source") == "human")
    assert human.height == len(expected)
    assert dict(zip(human["pair_id"], human["label"])) == expected
    assert v.manifest["lineage"]["components"]["humans"]["aggregate"] == "dawid-skene"
