"""The Prefect flows, run for real: Prefect's engine against its test harness (one server for the
session), the demo world's tiny SFT model, a real HTTP judge (scripted, so its verdicts and faults
are known), a real Dask LocalCluster with worker processes, a killed subprocess for the crash.

Sizes are tiny (a dozen prompts, 4 candidates of at most 8 tokens); every run gets its own store
and its own result cache, so no test reads another's cached work by accident.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# Before Prefect loads: no telemetry (an ephemeral run otherwise logs "database is locked" from its
# heartbeat), passive OpenMP waits on a shared machine (see prefdata/world/build.py).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from conftest import local_argilla  # noqa: E402

from prefdata.base.errors import UnusableInput  # noqa: E402
from prefdata.flows.params import (  # noqa: E402
    Checks, Engine, Humans, Judge, Policy, Prompts, SimulatedAnnotators, Training, TrainTrigger,
)
from prefdata.data.store import Store  # noqa: E402
from prefdata.world import verify  # noqa: E402
from scripted_server import Reply, ScriptedServer, presented  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Temperature 1.5 so a 1M-parameter model that is sure of its (often wrong) answer still gives
# distinct candidates to pair.
POLICY = Policy(candidates=4, temperature=1.5, max_new_tokens=8, chunk_size=6)
GUIDELINES = """## Annotation guidelines
Prefer the answer that is arithmetically right.
## Rubric
Right beats wrong; two right or two wrong answers are a tie.
## Edge cases
Leading zeros do not matter: 0405 and 405 are the same number.
"""


@pytest.fixture(scope="session")
def world():
    from prefdata.world import build_world

    return build_world()  # cached under .prefdata/world; waits on the lock while another process builds


def world_judge(body: dict, index: int) -> Reply:
    """A pairwise judge that is always right about the world's arithmetic (ties when it cannot tell)."""
    question, a, b = presented(body)
    a_ok, b_ok = verify(question, a), verify(question, b)
    return Reply(content="[[tie]]" if a_ok == b_ok else ("[[A]]" if a_ok else "[[B]]"))


# The harness's server runs no service that revokes expired leases: a slot a killed run or a lost
# response left held stays held for the session. A judging task here waits this long for one, not forever.
SLOT_WAIT_S = 120


def llm_judge(url: str, **kw) -> Judge:
    return Judge(kind="llm", base_url=url, model="scripted-judge", timeout_s=30, max_retries=0, retry_delays_s=[],
                 **kw)


def bounded(judge: Judge) -> Judge:
    """The judge (and those after it) with a bounded wait for a slot."""
    return judge.model_copy(update={"slot_timeout_s": judge.slot_timeout_s or SLOT_WAIT_S,
                                    "then": bounded(judge.then) if judge.then else None})


def run_collect(tmp: Path, **kw) -> dict:
    from prefdata.flows.collect import collect

    kw["judge"] = bounded(kw.get("judge", Judge()))
    kw.setdefault("engine", Engine(cache_dir=str(tmp / "cache")))
    kw.setdefault("humans", Humans(queue_dir=str(tmp / "queues")))
    return collect(**{"prompts": Prompts(n=12), "policy": POLICY, "store": str(tmp / "store"), **kw})


# -- collect -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collected(prefect_api, world, tmp_path_factory):
    """One collect run: the world's verifier judges, three simulated annotators answer the queue."""
    tmp = tmp_path_factory.mktemp("collect")
    (tmp / "guidelines.md").write_text(GUIDELINES)
    result = run_collect(tmp, humans=Humans(queue_dir=str(tmp / "queues"), simulated=SimulatedAnnotators(k=3)),
                         guidelines=str(tmp / "guidelines.md"))
    return tmp, result


def test_collect_stores_a_draft_labelled_by_judge_and_humans(collected, world):
    tmp, result = collected
    st = Store(str(tmp / "store"))
    v = st.get(result["version"])
    pairs, comparisons, votes = st.load(v.ref), st.load(v.ref, "comparisons"), st.load(v.ref, "votes")
    assert v.status == "draft" and result["prompts"] == 12 and result["candidates"] == 48
    assert comparisons.height == result["comparisons"] == v.manifest["counts"]["read"] > 0
    decided = comparisons.filter(comparisons["label"].is_in(["a", "b"]))
    assert pairs.height == decided.height == v.manifest["counts"]["pairs"] > 0

    # The verifier judges: every pair it labelled alone has a right chosen and a wrong rejected answer.
    by_judge = pairs.filter(pairs["label_source"] == "judge")
    assert by_judge.height > 0
    assert all(verify(p, c) and not verify(p, r) for p, c, r in by_judge.select("prompt", "chosen", "rejected").rows())
    # Undecided pairs (both answers right, or both wrong) went to the three annotators, and their
    # majority is the label.
    queued = [json.loads(line) for line in Path(result["queue"]).read_text().splitlines()]
    assert len(queued) == result["queued"] > 0 and votes.height == 3 * len(queued)
    assert {q["route_reason"] for q in queued} <= {"judge_both_pass", "judge_both_fail", "audit"}
    from prefdata.data.formats import majority

    human = {r["pair_id"]: r for r in comparisons.filter(comparisons["route"] != "judge").iter_rows(named=True)}
    for pair_id, group in votes.group_by("pair_id"):
        assert human[pair_id[0]]["label"] == majority(group["vote"].to_list())
        assert human[pair_id[0]]["label_source"] == "human"

    lineage = v.manifest["lineage"]
    assert lineage["flow_run"]["flow"] == "collect" and lineage["flow_run"]["id"]
    assert {s["model"] for s in lineage["components"]["sampler"]} == {str(world.sft)}  # one policy
    assert "Prefer the answer that is arithmetically right." in st.read_text(v.ref, "README.md")


TOY_WAIVERS = textwrap.dedent("""\
    checks:
      min_size: {waive: "a 12-prompt test set"}
      category_coverage: {waive: "arithmetic only"}
      agreement: {waive: "queued pairs are mostly ties: alpha is undefined-ish on one class"}
      near_duplicates: {waive: "arithmetic answers differ by one digit"}
""")


def test_validate_publishes_artifacts_and_publish_gates_then_triggers_training(collected, prefect_api, tmp_path):
    import shutil

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from prefdata.flows.gate import publish, validate
    from prefdata.flows.train import train

    tmp, result = collected
    # Its own copy of the collected store: publishing changes the version's status, and the other
    # tests read the collected draft in whatever order they run.
    store = str(tmp_path / "store")
    shutil.copytree(tmp / "store", store)
    # The default checklist refuses a toy set (12 prompts, no safety/style categories...): the validate
    # flow ends Failed, naming the failing checks, with its report as artifacts all the same.
    state = validate(result["version"], Checks(report_dir=str(tmp_path / "report")), store, return_state=True)
    assert state.is_failed() and "the checklist failed (" in state.message and "min_size" in state.message
    assert "checklist: default" in state.message
    with get_client(sync_client=True) as client:
        table = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["checklist-world-arithmetic"])))
        summary = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=["checklist-world-arithmetic-summary"])))
    rows = json.loads(table[0].data) if isinstance(table[0].data, str) else table[0].data
    assert {r["id"]: r["status"] for r in rows}["min_size"] == "fail"
    assert f"file://{tmp_path / 'report'}" in summary[0].data and (tmp_path / "report" / "report.md").is_file()
    assert Store(store).get(result["version"]).status == "draft"  # validate never changes a status

    # Published under the default checklist: rejected.
    state = publish(result["version"], Checks(report_dir=str(tmp_path / "report")), store=store, return_state=True)
    assert state.is_failed() and "not published" in state.message and "min_size" in state.message
    assert Store(store).get(result["version"]).status == "rejected"

    # With the toy's waivers it passes, becomes validated, and schedules the training deployment.
    waivers = tmp_path / "toy-checklist.yaml"
    waivers.write_text(TOY_WAIVERS)
    train.to_deployment("train").apply()
    out = publish(result["version"], Checks(config=str(waivers), report_dir=str(tmp_path / "report")),
                  train=TrainTrigger(deployment="train/train", method="dpo", base_model="world"), store=store)
    assert Store(store).get(result["version"]).status == "validated" and out["train_flow_run"]
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(out["train_flow_run"])
    assert run.state.is_scheduled()
    assert run.parameters["dataset"] == result["version"] and run.parameters["training"]["method"] == "dpo"
    # Publishing a validated version again is a no-op, and starts nothing.
    assert publish(result["version"], store=store)["train_flow_run"] is None
    # Validating it again, with no checklist named, holds it to the one it was validated with (signed in
    # its report), not the default that would fail it.
    again = validate(result["version"], Checks(report_dir=str(tmp_path / "again")), store)
    assert again["passed"] and again["report"]["config_source"] == f"as validated ({waivers})"


def test_train_refuses_a_version_that_is_not_validated(prefect_api, tmp_path):
    from prefdata.base.errors import GateFailed
    from prefdata.flows.train import train
    from prefdata.data.importer import import_file, import_to_store

    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"prompt": "1+1=", "chosen": "2", "rejected": "3"}) + "\n")
    result = import_file(src)
    st = Store(str(tmp_path / "store"))
    v = import_to_store(result, "tiny", st)
    with pytest.raises(GateFailed, match="is draft: only a validated version trains"):
        train(v.ref, Training(), str(tmp_path / "store"))


def test_train_flow_runs_a_trainer_on_a_validated_version(collected, prefect_api, tmp_path):
    import shutil

    from prefdata.flows.train import train
    from prefdata.gate.publishing import publish_version

    tmp, result = collected
    # Its own copy of the collected store, published here with the toy's waivers: this test needs
    # no other test to have run first, and leaves the shared one as it found it.
    store = str(tmp_path / "store")
    shutil.copytree(tmp / "store", store)
    (tmp_path / "waivers.yaml").write_text(TOY_WAIVERS)
    publish_version(Store(store), result["version"], config=tmp_path / "waivers.yaml", report_dir=tmp_path / "report")
    out = train(result["version"], Training(method="dpo", base_model="world", output_dir=str(tmp_path / "model"),
                                            config={"max_steps": 2}), store)
    assert Path(out["model_dir"]).is_dir() and Path(out["card"]).is_file() and out["metrics"]
    # the run's curves in the Prefect UI: its steps as a table artifact, the image named in the summary
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    name = result["version"].split("@")[0]
    # newest first: a training the publish test triggers on the same dataset writes the same keys
    with get_client(sync_client=True) as client:
        steps, summary = (client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                                                sort=ArtifactSort.CREATED_DESC)
                          for key in (f"train-{name}-steps", f"train-{name}"))
    rows = json.loads(steps[0].data) if isinstance(steps[0].data, str) else steps[0].data
    assert len(rows) == 2 and all("loss" in row for row in rows)
    assert "curves.png" in summary[0].data and "tensorboard --logdir" in summary[0].data


# -- resume after a crash, and the judge's concurrency limit ------------------------------------

RUN_IN_SUBPROCESS = """
import json, sys
from prefdata.flows.collect import collect
from prefdata.flows.params import Engine, Humans, Judge, Policy, Prompts
kw = json.loads(sys.argv[1])
collect(prompts=Prompts(**kw["prompts"]), policy=Policy(**kw["policy"]), judge=Judge(**kw["judge"]),
        humans=Humans(**kw["humans"]), engine=Engine(**kw["engine"]), store=kw["store"])
"""


def test_a_killed_run_resumes_without_sampling_or_judging_again(prefect_api, world, tmp_path, sample_calls):
    done = 8  # requests answered before the judge hangs: two chunks of two pairs, both orders
    hang = lambda body, index: Reply(delay=600) if index >= done else world_judge(body, index)  # noqa: E731
    with ScriptedServer(hang) as server:
        kw = {"prompts": {"n": 12}, "policy": POLICY.model_dump(), "humans": {"queue_dir": str(tmp_path / "q")},
              # a limit of its own: the slot the kill leaks must not stall other tests' collect runs,
              # which share this Prefect server
              "judge": llm_judge(server.base_url, chunk_size=2, requests_in_flight=1, limit=1,
                                 limit_name="killed-run").model_dump(),
              "engine": {"cache_dir": str(tmp_path / "cache")}, "store": str(tmp_path / "store")}
        env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(REPO)}
        log = (tmp_path / "killed-run.log").open("w")  # a file, not a pipe: a full pipe would stall the run
        proc = subprocess.Popen([sys.executable, "-c", RUN_IN_SUBPROCESS, json.dumps(kw)], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            # Dead in the middle of judging: the judge hangs on request 9, and 2 sampling + 2 judging
            # results are on disk.
            deadline = time.monotonic() + 240
            while not (len(server.requests) > done and len(list((tmp_path / "cache").glob("*"))) >= 4):
                assert proc.poll() is None, f"the run ended before the kill: {(tmp_path / 'killed-run.log').read_text()[-2000:]}"
                assert time.monotonic() < deadline, "the run never reached the judge's hang"
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            log.close()
        assert Store(str(tmp_path / "store")).versions() == []  # it died before writing anything

    calls = sample_calls  # counts this process's sampling only: the killed run was a subprocess
    with ScriptedServer(world_judge) as server:
        # limit 2: the killed run's slot stays held (the harness's server revokes no lease)
        judge = llm_judge(server.base_url, chunk_size=2, requests_in_flight=1, limit=2, limit_name="killed-run")
        resumed = run_collect(tmp_path, judge=judge, humans=Humans(queue_dir=str(tmp_path / "q")),
                              engine=Engine(cache_dir=str(tmp_path / "cache")))
        rerun_requests = len(server.requests)
    assert calls["sample"] == 0  # every prompt was sampled before the crash: nothing sampled again
    # Only the pairs the crash left unjudged are asked again. Before hanging, the judge answered `done`
    # requests (4 pairs, both orders) and the kill came once 2 judging chunks were on disk: 3 or 4 pairs,
    # depending on which chunks the concurrency limit let run first (the last chunk may hold one pair).
    asked_again, odd = divmod(rerun_requests, 2)
    assert odd == 0 and resumed["comparisons"] - 4 <= asked_again <= resumed["comparisons"] - 2

    # And it is the dataset an uninterrupted run gives (a fresh cache: everything sampled and judged).
    with ScriptedServer(world_judge) as server:
        fresh = run_collect(tmp_path / "fresh", judge=llm_judge(server.base_url, chunk_size=2, limit=2))
    assert calls["sample"] == 2 and fresh["version"].split("@")[1] == resumed["version"].split("@")[1]


def test_judging_goes_through_the_global_concurrency_limit(prefect_api, world, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency

    from prefdata.flows.collect import collect

    slow = lambda body, index: Reply(content=world_judge(body, index).content, delay=0.05)  # noqa: E731
    with ScriptedServer(slow) as server:
        # limit 1 with one request per task: never two judge requests at once, though the thread pool
        # submits every chunk together.
        run_collect(tmp_path, judge=llm_judge(server.base_url, chunk_size=1, requests_in_flight=1, limit=1,
                                              limit_name="judge-test"))
        assert len(server.requests) >= 4 and server.max_in_flight == 1
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name("judge-test").limit == 1

    # With the only slot held elsewhere, a judging task waits for it and times out: no request is sent.
    with ScriptedServer(slow) as server, concurrency("judge-test", occupy=1, timeout_seconds=SLOT_WAIT_S):
        state = collect(prompts=Prompts(n=12), policy=POLICY, store=str(tmp_path / "store2"),
                        judge=llm_judge(server.base_url, limit=1, limit_name="judge-test", slot_timeout_s=1),
                        engine=Engine(cache_dir=str(tmp_path / "cache2")),
                        humans=Humans(queue_dir=str(tmp_path / "q")), return_state=True)
        assert state.is_failed() and server.requests == []


def first_in_order_wins(body: dict, index: int) -> Reply:
    """A judge that prefers the answer that sorts first as text (the world's answers are four digits of
    one width): known verdicts, consistent in both orders, unlike the verifier's."""
    _, a, b = presented(body)
    return Reply(content="[[tie]]" if a == b else ("[[A]]" if a < b else "[[B]]"))


def test_a_judge_cascade_sends_only_the_undecided_pairs_on(prefect_api, world, tmp_path):
    with ScriptedServer(first_in_order_wins) as server:
        judge = Judge(kind="rule", verifier="prefdata.world:verify", then=llm_judge(server.base_url))
        result = run_collect(tmp_path, judge=judge)
        asked = [presented(r.body) for r in server.requests]
    first, then = result["judges"]
    assert first["pairs"] == result["comparisons"] and then["pairs"] == first["pairs"] - first["decided"] > 0
    # The LLM saw only pairs where both answers are right or both wrong: the verifier's undecided ones
    # (each pair twice, both orders).
    assert len(asked) == 2 * then["pairs"] and all(verify(q, a) == verify(q, b) for q, a, b in asked)
    store = Store(str(tmp_path / "store"))
    rows = store.load(result["version"], "comparisons").to_dicts()
    by_verifier = [r for r in rows if r["judge_model"] == "rule:prefdata.world:verify"]
    by_llm = [r for r in rows if r["judge_model"] == "scripted-judge"]
    assert len(by_llm) == then["decided"] > 0 and len(by_verifier) == len(rows) - len(by_llm)
    assert all(verify(r["prompt"], r["response_a"]) != verify(r["prompt"], r["response_b"])
               for r in by_verifier if r["judge_label"] is not None)
    # what neither judge decided keeps the verifier's reason on its way to humans
    assert {r["judge_reason"] for r in by_verifier if r["judge_label"] is None} <= {"both_pass", "both_fail"}
    decided = [r for r in by_llm if r["judge_label"] in ("a", "b")]
    assert decided and all((r["response_a"] < r["response_b"]) == (r["judge_label"] == "a") for r in decided)
    assert result["judge"]["n"] == result["comparisons"] and result["judge"]["decided"] == first["decided"] + then["decided"]
    lineage = store.get(result["version"]).manifest["lineage"]["components"]["judge"]
    assert lineage["kind"] == "rule" and lineage["then"] == {"kind": "llm", "model": "scripted-judge",
                                                                   "template": "pairwise-v1", "max_tokens": 512}


def right_answer(prompt: str, completion: str) -> str | None:
    """A repair rule for the world's arithmetic (Policy.repair "test_flows:right_answer"): the right
    answer where the reply is wrong, as instructions.repair edits a reply to follow its constraint."""
    from prefdata.world.tasks import ARITH_RE

    if verify(prompt, completion):
        return None
    a, op, b = ARITH_RE.match(prompt).group(1, 2, 3)
    return f"{int(a) + int(b) if op == '+' else int(a) - int(b):04d}"


def test_a_repair_adds_a_fixed_candidate_that_the_verifier_prefers(prefect_api, world, tmp_path, register):
    register(repairs={"right_answer": "test_flows:right_answer"})  # the operator's allow-list
    policy = POLICY.model_copy(update={"repair": "test_flows:right_answer"})
    result = run_collect(tmp_path, judge=Judge(kind="rule", verifier="prefdata.world:verify"), policy=policy)
    rows = Store(str(tmp_path / "store")).load(result["version"], "comparisons").to_dicts()
    # the repaired candidate comes last, so it is always side B
    repaired = [r for r in rows if json.loads(r["sampling_b"])["sampler"] == "repair"]
    assert repaired and not any(json.loads(r["sampling_a"])["sampler"] == "repair" for r in rows)
    assert all("+repair@" in r["model_b"] and "+repair" not in r["model_a"] for r in repaired)  # two policies
    assert all(verify(r["prompt"], r["response_b"]) for r in repaired)
    for r in repaired:  # against a wrong reply the verifier decides for it; against a right one it is a tie
        assert r["judge_label"] == (None if verify(r["prompt"], r["response_a"]) else "b"), r
    # one repaired candidate per prompt at most, and only where some reply was wrong
    assert len({r["prompt"] for r in repaired}) == len({(r["prompt"], r["response_b"]) for r in repaired})
    assert {json.loads(r["sampling_b"])["repair"] for r in repaired} == {"test_flows:right_answer"}


def test_release_models_lets_go_of_the_sampler(prefect_api, world, tmp_path):
    """The chat demo frees the sampling model before it trains (its peak memory is the trainer's)."""
    from prefdata.flows.collect import _local_sampler, release_models

    run_collect(tmp_path)
    assert _local_sampler.cache_info().currsize >= 1
    release_models()
    assert _local_sampler.cache_info().currsize == 0


# -- Argilla -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def argilla_server(tmp_path_factory):
    """A real argilla-server on 127.0.0.1 (prefdata.argilla's manager; its venv is shared and cached)."""
    from prefdata.argilla.server import free_port

    server = local_argilla(tmp_path_factory.mktemp("argilla"))
    yield server.start(port=free_port(), log=print)
    server.stop()


def test_collect_sends_the_human_share_through_argilla(prefect_api, world, argilla_server, tmp_path, monkeypatch):
    """Two annotators answer in Argilla, through its HTTP API, as the web UI does; collect waits for
    both votes on every queued pair and stores them."""
    import threading

    import httpx

    from prefdata.argilla import add_user
    from prefdata.flows.params import Argilla
    from prefdata.world import SimulatedAnnotator

    info = argilla_server
    monkeypatch.setenv("ARGILLA_API_KEY", info.api_key)
    keys = {name: add_user(url=info.url, api_key=info.api_key, username=name, password=f"pw-{name}-secret")
            for name in ("ann1", "ann2")}
    expected: dict[tuple[str, str], str] = {}
    stop = threading.Event()

    def annotate():
        owner = httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": info.api_key}, timeout=30)
        while not stop.wait(0.5):
            found = [d for d in owner.get("/api/v1/me/datasets").json()["items"] if d["name"] == "flows-test"]
            records = owner.get(f"/api/v1/datasets/{found[0]['id']}/records",
                                params={"limit": 1000}).json()["items"] if found else []
            for record in records:
                pair_id, order, fields = record["metadata"]["pair_id"], record["metadata"]["order"], record["fields"]
                for name, key in keys.items():
                    if (pair_id, name) in expected:
                        continue
                    shown = SimulatedAnnotator(name, accuracy=0.9).vote(
                        pair_id, fields["prompt"], fields["response_a"], fields["response_b"])
                    response = httpx.post(f"{info.url}/api/v1/records/{record['id']}/responses", timeout=30,
                                          headers={"X-Argilla-Api-Key": key},
                                          json={"values": {"preference": {"value": shown}}, "status": "submitted"})
                    assert response.status_code == 201, response.text
                    expected[(pair_id, name)] = {"ab": shown, "ba": {"a": "b", "b": "a", "tie": "tie"}[shown]}[order]

    annotators = threading.Thread(target=annotate, daemon=True)
    annotators.start()
    try:
        spec = Argilla(url=info.url, dataset="flows-test", overlap=2, wait_s=120, poll_s=1)
        result = run_collect(tmp_path, humans=Humans(queue_dir=str(tmp_path / "q"), argilla=spec))
    finally:
        stop.set()
        annotators.join(timeout=30)
    votes = Store(str(tmp_path / "store")).load(result["version"], "votes")
    assert result["queued"] > 0 and votes.height == 2 * result["queued"]
    assert {(p, a): v for p, a, v in votes.select("pair_id", "annotator", "vote").rows()} == expected


# -- scale-out -----------------------------------------------------------------------------------


def test_dask_workers_give_the_same_dataset_as_one_process(prefect_api, world, tmp_path):
    from distributed import Client, LocalCluster, get_task_stream

    sequential = run_collect(tmp_path / "threads")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, get_task_stream(client=client) as stream:
        engine = Engine(runner="dask", address=cluster.scheduler_address, cache_dir=str(tmp_path / "dask-cache"))
        distributed = run_collect(tmp_path / "dask", engine=engine)
    workers = {t["worker"] for t in stream.data}
    assert len(workers) == 2, f"tasks ran on {workers}"  # both worker processes sampled or judged
    assert distributed["version"].split("@")[1] == sequential["version"].split("@")[1]
    assert distributed["comparisons"] == sequential["comparisons"] > 0


# -- deployments, schedules, serve ---------------------------------------------------------------


def test_prefect_yaml_deployments_load_validate_and_schedule():
    from prefdata.flows.deployments import load

    served = {s.full_name: s for s in load(REPO / "prefect.yaml")}
    assert set(served) == {"collect/nightly", "publish/nightly", "validate/on-demand", "train/train"}
    assert [s.cron for s in served["collect/nightly"].schedules] == ["0 2 * * *"]
    assert served["publish/nightly"].parameters["train"]["deployment"] in served  # the trigger names a real deployment


@pytest.mark.parametrize("change, message", [
    (lambda d: d["deployments"][0]["parameters"]["policy"].update(candidats=4), "parameters do not fit collect"),
    (lambda d: d["deployments"][0]["schedules"][0].update(cron="61 * * * *"), "cron '61 * * * *'"),
    (lambda d: d["deployments"][0].update(entrypoint="prefdata.flows.collect:nothing"), "does not load"),
])
def test_a_bad_deployment_is_one_clear_line(tmp_path, change, message):
    import yaml

    from prefdata.flows.deployments import load

    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    change(doc)
    bad = tmp_path / "prefect.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(UnusableInput, match=re.escape(message)) as error:
        load(bad)
    assert "\n" not in str(error.value)
    proc = subprocess.run([sys.executable, "-m", "prefdata", "serve", "--file", str(bad), "--dry-run"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr


def test_prefdata_serve_registers_the_scheduled_deployments(prefect_api, tmp_path):
    from prefect.client.orchestration import get_client

    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    proc = subprocess.Popen([sys.executable, "-m", "prefdata", "serve", "--only", "collect/nightly",
                             "--only", "train/train"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline, found = time.monotonic() + 120, None
        with get_client(sync_client=True) as client:
            while found is None:
                assert proc.poll() is None and time.monotonic() < deadline, "serve exited or never registered"
                try:
                    found = client.read_deployment_by_name("collect/nightly")
                except Exception:  # noqa: BLE001 - not there yet
                    time.sleep(0.5)
            schedules = client.read_deployment_schedules(found.id)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert [s.schedule.cron for s in schedules] == ["0 2 * * *"]
    assert found.parameters["judge"]["kind"] == "rule"


def test_prefdata_help_stays_light():
    code = "import sys, prefdata.commands.cli; print(sorted(m for m in ('prefect', 'torch', 'distributed') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- parameters ----------------------------------------------------------------------------------


def test_a_judge_parameter_takes_the_command_lines_spec():
    """judge: "..." in a flow's parameters or a deployment's config reads like `collect --judge`."""
    from prefdata.base.errors import UnusableInput

    assert Judge.model_validate("world") == Judge(kind="rule", verifier="prefdata.world:verify")
    assert Judge.model_validate("llm:big@http://127.0.0.1:8001/v1:world-judge-v2") == Judge(
        kind="llm", model="big", base_url="http://127.0.0.1:8001/v1", template="world-judge-v2")
    assert Judge.model_validate("llm:/models/judge") == Judge(kind="llm", model="/models/judge")
    assert Judge.model_validate("rm:/models/rm") == Judge(kind="rm", model="/models/rm")
    with pytest.raises(UnusableInput, match="judge 'lm:/x': use llm:"):
        Judge.model_validate("lm:/x")


def test_parameters_refuse_what_cannot_work():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="judge kind .llm. needs model"):
        Judge(kind="llm")
    with pytest.raises(ValidationError, match="judge.kind 'lm': a scorer backend, not a judge"):
        Judge(kind="lm", model="/models/policy")
    with pytest.raises(ValidationError, match="judge.kind 'oracle' is not a registered judge backend: use one of "
                                              "llm, rm, rule; to add one"):
        Judge(kind="oracle", model="x")
    with pytest.raises(ValidationError, match="address"):
        Engine(address="tcp://127.0.0.1:8786")
    with pytest.raises(ValidationError, match="extra"):
        Policy(candidats=4)


def test_collect_names_a_missing_prompt_file_and_a_missing_engine(prefect_api, world, tmp_path):
    with pytest.raises(UnusableInput, match="no-such.txt is not a file"):
        run_collect(tmp_path, prompts=Prompts(source=str(tmp_path / "no-such.txt")))
    try:
        import prefect_ray  # noqa: F401
    except ImportError:
        with pytest.raises(UnusableInput, match="needs prefect-ray: pip install prefect-ray"):
            run_collect(tmp_path, engine=Engine(runner="ray"))


def test_the_train_and_publish_flows_refuse_a_hand_edited_status(prefect_api, tmp_path):
    """`sed -i 's/"status": "draft"/"status": "validated"/' manifest.json` must not pass the gate."""
    from prefdata.base.errors import GateFailed
    from prefdata.flows.gate import publish
    from prefdata.flows.train import train
    from prefdata.data.importer import import_file, import_to_store

    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"prompt": "1+1=", "chosen": "2", "rejected": "3"}) + "\n")
    result = import_file(src)
    store = str(tmp_path / "store")
    v = import_to_store(result, "forged", Store(store))
    manifest = Path(Store(store).path(v.ref)) / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"status": "draft"', '"status": "validated"', 1))
    assert Store(store).get(v.ref).status == "validated"  # what the manifest claims
    with pytest.raises(GateFailed, match="has no signature"):
        train(v.ref, Training(), store)
    with pytest.raises(GateFailed, match="has no signature"):
        publish(v.ref, store=store)


def test_every_flow_parameter_has_a_description():
    """The Prefect UI builds its run form from these models: a field without a description is a
    setting nobody can read about."""
    import inspect

    from pydantic import BaseModel

    from prefdata.flows import params

    models = [m for _, m in inspect.getmembers(params, inspect.isclass)
              if issubclass(m, BaseModel) and m.__module__ == params.__name__ and not m.__name__.startswith("_")]
    assert len(models) >= 10
    missing = [f"{m.__name__}.{name}" for m in models for name, field in m.model_fields.items()
               if not (field.description or "").strip()]
    assert missing == []
