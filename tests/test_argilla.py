"""prefdata.argilla against a real argilla-server 2.8.0 on 127.0.0.1 (started once for the session,
in its own virtual environment), over real HTTP, and in a real browser (Debian's chromium).

The server's environment is built on first use and cached in .prefdata/argilla/venv; a test skips
only where that build cannot happen (no package index), and never in CI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import polars as pl
import pytest
from conftest import local_argilla

from prefdata.errors import PrefdataError

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / ".prefdata" / "test-artifacts"
PANDALM_VOTE = {1: "a", 2: "b", 0: "tie"}
GPT_VERDICT = {"1": "a", "2": "b", "Tie": "tie"}  # anything else ("garbage") is no verdict
ANNOTATORS = ("annotator1", "annotator2", "annotator3")
# The annotation page's own request for an annotator's queue (captured from the 2.8.0 web UI).
PENDING_QUEUE = {"filters": {"and": [
    {"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": ["pending"]},
    {"type": "terms", "scope": {"entity": "record", "property": "status"}, "values": ["pending"]},
]}}


@pytest.fixture(scope="session")
def argilla(tmp_path_factory):
    """(LocalArgilla, ServerInfo) of a real server with a fresh database, on a free port."""
    from prefdata.argilla.server import free_port

    server = local_argilla(tmp_path_factory.mktemp("argilla"))
    info = server.start(port=free_port(), log=print)
    yield server, info
    server.stop()
    assert not server.tmp.exists(), "down must remove the server's temporary folder"


def _http(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-Argilla-Api-Key": key}, timeout=60)


def _dataset_id(owner: httpx.Client, name: str) -> str:
    return next(d["id"] for d in owner.get("/api/v1/me/datasets").json()["items"] if d["name"] == name)


def _all_records(owner: httpx.Client, dataset_id: str, include: str | None = None) -> list[dict]:
    items, offset = [], 0
    while True:
        params = {"offset": offset, "limit": 1000, **({"include": include} if include else {})}
        page = owner.get(f"/api/v1/datasets/{dataset_id}/records", params=params).json()["items"]
        items += page
        if len(page) < 1000:
            return items
        offset += len(page)


@pytest.fixture(scope="session")
def pandalm(shared_data):
    """30 PandaLM comparisons with distinct pair ids (the test set repeats some pairs), their three
    annotators' votes (long), and GPT-3.5's verdicts as the judge labels."""
    from prefdata.importer import import_file

    rows = json.loads((shared_data / "pandalm" / "testset-v1.json").read_text())[:40]
    judged = {r["idx"]: r["gpt_result"] for r in json.loads((shared_data / "pandalm" / "gpt-3.5-turbo-testset-v1.json").read_text())}
    result = import_file(shared_data / "pandalm" / "testset-v1.json", fmt="comparisons")
    pairs = (result.comparisons.filter(pl.col("id").cast(pl.Int64) < 40)
             .unique("pair_id", keep="first", maintain_order=True).head(30))
    assert pairs.height == 30
    pairs = pairs.with_columns(
        pl.col("id").cast(pl.Int64).replace_strict({i: GPT_VERDICT.get(v) for i, v in judged.items()},
                                                   default=None).alias("judge_label"),
        pl.lit("gpt-3.5-turbo").alias("judge_model"),
    )
    by_idx = {r["idx"]: r for r in rows}
    votes = pl.DataFrame([
        {"pair_id": p["pair_id"], "annotator": a, "vote": PANDALM_VOTE[by_idx[int(p["id"])][a]]}
        for p in pairs.iter_rows(named=True) for a in ANNOTATORS
    ])
    return pairs, votes


def _users(argilla_info, names, role="annotator") -> dict[str, str]:
    from prefdata.argilla import add_user

    return {n: add_user(url=argilla_info.url, api_key=argilla_info.api_key, username=n, password=f"pw-{n}-secret",
                        role=role) for n in names}


def _submit(client: httpx.Client, record: dict, vote: str, pair: dict, rationale: str) -> None:
    """What an annotator does: read the two texts shown, click the letter of the one they prefer."""
    if vote == "tie":
        shown = "tie"
    else:
        preferred = pair["response_a"] if vote == "a" else pair["response_b"]
        shown = "a" if record["fields"]["response_a"] == preferred else "b"
    response = client.post(f"/api/v1/records/{record['id']}/responses",
                           json={"values": {"preference": {"value": shown}, "rationale": {"value": rationale}},
                                 "status": "submitted"})
    assert response.status_code == 201, response.text


# -- round trip with real multi-annotator data ----------------------------------------------------------

def test_round_trip_pandalm_three_annotators(argilla, pandalm):
    from prefdata.argilla import agreement, pull_votes, push_pairs, shown_order
    from prefdata.checks.agreement import check_agreement

    server, info = argilla
    pairs, offline = pandalm
    result = push_pairs(pairs, url=info.url, api_key=info.api_key, dataset="pandalm30", overlap=3,
                        guidelines="## Annotation guidelines\n\nPick the better response.", progress=False)
    assert (result.pushed, result.records) == (30, 30)
    again = push_pairs(pairs, url=info.url, api_key=info.api_key, dataset="pandalm30", overlap=3, progress=False)
    assert (again.pushed, again.already_there, again.records) == (0, 30, 30)

    owner = _http(info.url, info.api_key)
    dataset_id = _dataset_id(owner, "pandalm30")
    settings = owner.get(f"/api/v1/datasets/{dataset_id}").json()
    assert settings["distribution"] == {"strategy": "overlap", "min_submitted": 3}
    assert "Pick the better response." in settings["guidelines"]
    # the judge's verdict is suggested in the letters the record shows
    judge = dict(zip(pairs["pair_id"], pairs["judge_label"]))
    flip = {"a": "b", "b": "a", "tie": "tie"}
    for record in _all_records(owner, dataset_id, include="suggestions"):
        order = record["metadata"]["order"]
        assert order == shown_order(record["external_id"], 0)
        verdict = judge[record["external_id"]]
        expected = [] if verdict is None else [verdict if order == "ab" else flip[verdict]]
        assert [s["value"] for s in record["suggestions"]] == expected

    keys = _users(info, ANNOTATORS)
    by_pair = {p["pair_id"]: p for p in pairs.iter_rows(named=True)}
    wanted = {(v["pair_id"], v["annotator"]): v["vote"] for v in offline.iter_rows(named=True)}
    for name, key in keys.items():
        client = _http(info.url, key)
        done = []
        while True:  # work through the queue the way the web UI asks for it
            queue = client.post(f"/api/v1/me/datasets/{dataset_id}/records/search", params={"limit": 10},
                                json=PENDING_QUEUE).json()
            if not queue["items"]:
                break
            record = queue["items"][0]["record"]
            pair_id = record["external_id"]
            _submit(client, record, wanted[(pair_id, name)], by_pair[pair_id], f"{name} on {pair_id}")
            done.append(pair_id)
        assert sorted(done) == sorted(by_pair), f"{name}'s queue must offer each of the 30 pairs exactly once"

    progress = owner.get(f"/api/v1/datasets/{dataset_id}/progress").json()
    assert (progress["total"], progress["completed"], progress["pending"]) == (30, 30, 0)

    votes = pull_votes(url=info.url, api_key=info.api_key, dataset="pandalm30")
    assert votes.columns[:5] == ["pair_id", "annotator", "vote", "rationale", "time"]
    assert votes.height == 90
    got = {(r["pair_id"], r["annotator"]): r["vote"] for r in votes.iter_rows(named=True)}
    assert got == wanted
    assert all(r["rationale"] == f"{r['annotator']} on {r['pair_id']}" for r in votes.iter_rows(named=True))
    assert set(votes["order"]) == {"ab", "ba"}, "the A/B order must be randomised across pairs"
    expected = check_agreement(offline)
    assert agreement(votes).metric == pytest.approx(expected.metric, abs=1e-12)
    assert agreement(votes).details["fleiss_kappa"] == pytest.approx(expected.details["fleiss_kappa"], abs=1e-12)


def test_push_validates_rows_before_touching_the_server(argilla):
    from prefdata.argilla import push_pairs

    _, info = argilla
    with pytest.raises(PrefdataError, match="lack column"):
        push_pairs(pl.DataFrame({"pair_id": ["x"], "prompt": ["p"]}), url=info.url, api_key=info.api_key,
                   dataset="bad", progress=False)
    with pytest.raises(PrefdataError, match="overlap 1, not 2"):
        rows = [{"pair_id": "p1", "prompt": "q", "response_a": "x", "response_b": ""}]
        assert push_pairs(rows, url=info.url, api_key=info.api_key, dataset="one", progress=False).pushed == 1
        push_pairs(rows, url=info.url, api_key=info.api_key, dataset="one", overlap=2, progress=False)


def test_annotators_cannot_pull(argilla):
    from prefdata.argilla import pull_votes, push_pairs

    _, info = argilla
    rows = [{"pair_id": "q1", "prompt": "q", "response_a": "x", "response_b": "y"}]
    push_pairs(rows, url=info.url, api_key=info.api_key, dataset="private", progress=False)
    key = _users(info, ["reader"])["reader"]
    with pytest.raises(PrefdataError, match="owner or admin"):
        pull_votes(url=info.url, api_key=key, dataset="private")


# -- one clear line for the errors users make -------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_status_names_the_server_and_where_its_key_is_not_the_key(argilla):
    server, info = argilla
    run = _cli("argilla", "status", "--dir", str(server.workdir))
    assert run.returncode == 0 and info.url in run.stdout and "owner.json" in run.stdout
    assert info.api_key not in run.stdout + run.stderr
    assert (server.workdir / "owner.json").stat().st_mode & 0o777 == 0o600
    assert _cli("argilla", "status", "--dir", str(server.workdir / "nothing-here")).returncode == 1


def test_wrong_key_and_unreachable_url_give_one_line(argilla, tmp_path):
    from prefdata.argilla.server import free_port

    _, info = argilla
    wrong = _cli("argilla", "pull", "--dataset", "x", "--out", str(tmp_path / "v.parquet"), "--url", info.url,
                 "--api-key", "not-the-key-123")
    dead = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "q.jsonl").write_text(json.dumps({"pair_id": "1", "prompt": "p", "response_a": "a", "response_b": "b"}))
    unreachable = _cli("argilla", "push", str(tmp_path / "q.jsonl"), "--dataset", "x", "--url", dead,
                       "--api-key", "whatever-key")
    for run, words in ((wrong, "refused the API key"), (unreachable, "cannot reach Argilla")):
        assert run.returncode == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("prefdata: error:") and words in lines[0], run.stderr
        assert "not-the-key-123" not in run.stderr + run.stdout


# -- the search engine's filters, through the server's own HTTP API ----------------------------------------

@pytest.fixture(scope="module")
def engine_data(argilla):
    """A dataset with every filterable part: terms/integer/float metadata, label suggestions with
    scores and agents, responses of two users in each status, and vectors."""
    import argilla as rg

    _, info = argilla
    client = rg.Argilla(api_url=info.url, api_key=info.api_key)
    settings = rg.Settings(
        fields=[rg.TextField(name="text")],
        questions=[rg.LabelQuestion(name="label", labels=["x", "y"]), rg.RatingQuestion(name="stars", values=[1, 2, 3], required=False)],
        metadata=[rg.TermsMetadataProperty(name="colour"), rg.IntegerMetadataProperty(name="size"),
                  rg.FloatMetadataProperty(name="weight")],
        vectors=[rg.VectorField(name="emb", dimensions=2)],
        distribution=rg.TaskDistribution(min_submitted=1),
    )
    dataset = rg.Dataset(name="engine", workspace="prefdata", settings=settings, client=client).create()
    records = []
    for i in range(12):
        records.append(rg.Record(
            id=f"r{i:02d}", fields={"text": f"item {i} " + ("apple pie" if i % 3 == 0 else "banana split")},
            metadata={"colour": ["red", "green", "blue"][i % 3], "size": i, "weight": i / 4},
            vectors={"emb": [1.0, i / 11]},
            suggestions=[rg.Suggestion("label", "x" if i < 6 else "y", score=i / 12, agent="judge-a" if i % 2 else "judge-b")],
        ))
    dataset.records.log(records)
    keys = _users(info, ["alice", "bob"])
    owner = _http(info.url, info.api_key)
    dataset_id = str(dataset.id)
    ids = {r["external_id"]: r["id"] for r in _all_records(owner, dataset_id)}
    plan = {"alice": {"r00": ("submitted", "x"), "r01": ("draft", "y"), "r02": ("discarded", None)},
            "bob": {"r00": ("submitted", "y"), "r03": ("submitted", "x")}}
    for user, answers in plan.items():
        client_ = _http(info.url, keys[user])
        for ext, (status, value) in answers.items():
            values = None if value is None else {"label": {"value": value}, "stars": {"value": 2 if user == "alice" else 3}}
            body = {"status": status, **({"values": values} if values else {})}
            response = client_.post(f"/api/v1/records/{ids[ext]}/responses", json=body)
            assert response.status_code == 201, response.text
    return {"dataset_id": dataset_id, "ids": ids, "keys": keys, "owner": owner, "url": info.url}


def _search(data, body, user=None, **params) -> tuple[list[str], int]:
    client = data["owner"] if user is None else _http(data["url"], data["keys"][user])
    path = f"/api/v1/{'' if user is None else 'me/'}datasets/{data['dataset_id']}/records/search"
    response = client.post(path, json=body, params={"limit": 50, **params})
    assert response.status_code == 200, response.text
    by_id = {v: k for k, v in data["ids"].items()}
    page = response.json()
    return [by_id[i["record"]["id"]] for i in page["items"]], page["total"]


def _terms(entity, values, **scope):
    return {"filters": {"and": [{"type": "terms", "scope": {"entity": entity, **scope}, "values": values}]}}


def _range(entity, ge=None, le=None, **scope):
    return {"filters": {"and": [{"type": "range", "scope": {"entity": entity, **scope}, "ge": ge, "le": le}]}}


ALL = {f"r{i:02d}" for i in range(12)}


@pytest.mark.parametrize("body, user, expected", [
    # per-user response status; "pending" means no response by that user (Elasticsearch engine semantics)
    (_terms("response", ["pending"], property="status"), "alice", ALL - {"r00", "r01", "r02"}),
    (_terms("response", ["pending"], property="status"), "bob", ALL - {"r00", "r03"}),
    (_terms("response", ["draft", "discarded"], property="status"), "alice", {"r01", "r02"}),
    (_terms("response", ["submitted", "pending"], property="status"), "bob", ALL),
    (_terms("response", ["submitted"], property="status"), "alice", {"r00"}),
    # without a user (the owner's dataset-wide search): pending = no response at all
    (_terms("response", ["pending"], property="status"), None, ALL - {"r00", "r01", "r02", "r03"}),
    (_terms("response", ["submitted"], property="status"), None, {"r00", "r03"}),
    # record status: one submitted response completes a record at min_submitted=1
    (_terms("record", ["completed"], property="status"), None, {"r00", "r03"}),
    (_terms("record", ["pending"], property="status"), None, ALL - {"r00", "r03"}),
    # response values per question
    (_terms("response", ["y"], question="label"), "alice", {"r01"}),
    (_terms("response", ["y"], question="label"), None, {"r00", "r01"}),
    (_range("response", ge=3, question="stars"), None, {"r00", "r03"}),
    # metadata: terms, integer and float ranges
    (_terms("metadata", ["red", "blue"], metadata_property="colour"), None, {f"r{i:02d}" for i in range(12) if i % 3 != 1}),
    (_range("metadata", ge=3, le=5, metadata_property="size"), None, {"r03", "r04", "r05"}),
    (_range("metadata", ge=2.5, metadata_property="weight"), None, {"r10", "r11"}),
    # suggestions: value, agent, score
    (_terms("suggestion", ["y"], question="label", property="value"), None, {f"r{i:02d}" for i in range(6, 12)}),
    (_terms("suggestion", ["judge-a"], question="label", property="agent"), None, {f"r{i:02d}" for i in range(1, 12, 2)}),
    (_range("suggestion", ge=0.75, question="label", property="score"), None, {"r09", "r10", "r11"}),
    # a text query: every word, case-insensitive
    ({"query": {"text": {"q": "Apple PIE"}}}, None, {"r00", "r03", "r06", "r09"}),
    ({"query": {"text": {"q": "banana", "field": "text"}}, **_terms("metadata", ["red"], metadata_property="colour")},
     None, set()),
])
def test_engine_filters(engine_data, body, user, expected):
    ids, total = _search(engine_data, body, user)
    assert set(ids) == expected and total == len(expected) and len(ids) == len(set(ids))


def test_engine_sorting_paging_and_per_user_order(engine_data):
    by_size = {"sort": [{"scope": {"entity": "metadata", "metadata_property": "size"}, "order": "desc"}]}
    ids, _ = _search(engine_data, by_size)
    assert ids == [f"r{i:02d}" for i in reversed(range(12))]
    by_score = {"sort": [{"scope": {"entity": "suggestion", "question": "label", "property": "score"}, "order": "asc"}]}
    assert _search(engine_data, by_score)[0] == [f"r{i:02d}" for i in range(12)]
    # an annotator's queue: the same order on every request, another order for another annotator,
    # and pages that add up to every record once
    alice = _search(engine_data, {}, "alice")[0]
    assert alice == _search(engine_data, {}, "alice")[0]
    assert alice != _search(engine_data, {}, "bob")[0]
    pages = [_search(engine_data, {}, "alice", offset=o, limit=5)[0] for o in (0, 5, 10)]
    assert sum(pages, []) == alice and sorted(alice) == sorted(ALL)


def test_engine_progress_metrics_and_similarity(engine_data):
    owner, dataset_id = engine_data["owner"], engine_data["dataset_id"]
    progress = owner.get(f"/api/v1/datasets/{dataset_id}/progress").json()
    assert (progress["total"], progress["completed"], progress["pending"]) == (12, 2, 10)
    alice = _http(engine_data["url"], engine_data["keys"]["alice"])
    metrics = alice.get(f"/api/v1/me/datasets/{dataset_id}/metrics").json()["responses"]
    assert metrics == {"total": 12, "submitted": 1, "draft": 1, "discarded": 1, "pending": 9}
    properties = {p["name"]: p["id"] for p in owner.get(f"/api/v1/me/datasets/{dataset_id}/metadata-properties").json()["items"]}
    colours = owner.get(f"/api/v1/metadata-properties/{properties['colour']}/metrics").json()
    assert colours["total"] == 12 and {v["term"]: v["count"] for v in colours["values"]} == {"red": 4, "green": 4, "blue": 4}
    sizes = owner.get(f"/api/v1/metadata-properties/{properties['size']}/metrics").json()
    assert (sizes["min"], sizes["max"]) == (0, 11)
    # nearest to [0, 1] by cosine: the record with the largest second component first
    similar, _ = _search(engine_data, {"query": {"vector": {"name": "emb", "value": [0.0, 1.0]}}}, limit=3)
    assert similar == ["r11", "r10", "r09"]
    record_id = engine_data["ids"]["r00"]
    near, _ = _search(engine_data, {"query": {"vector": {"name": "emb", "record_id": record_id}}}, limit=2)
    assert near == ["r01", "r02"], "the record itself is excluded; the closest directions follow"


# -- a person in a real browser ---------------------------------------------------------------------------

def test_browser_annotator_labels_and_submits(argilla):
    from playwright.sync_api import sync_playwright

    from prefdata.argilla import pull_votes, push_pairs

    _, info = argilla
    rows = [{"pair_id": f"web{i}", "prompt": f"Question number {i}: what is {i} + {i}?",
             "response_a": f"It is {2 * i}.", "response_b": f"It is {2 * i + 1}."} for i in range(3)]
    push_pairs(rows, url=info.url, api_key=info.api_key, dataset="browser", overlap=1, progress=False)
    _users(info, ["webannotator"])
    owner = _http(info.url, info.api_key)
    dataset_id = _dataset_id(owner, "browser")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{info.url}/sign-in")
        page.get_by_label("Username").fill("webannotator")
        page.get_by_label("Password").fill("pw-webannotator-secret")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "sign-in" not in url)
        with page.expect_response(lambda r: "/records/search" in r.url and r.request.method == "POST") as searched:
            page.goto(f"{info.url}/dataset/{dataset_id}/annotation-mode")
        shown = searched.value.json()["items"][0]["record"]
        prompt = shown["fields"]["prompt"]
        page.get_by_text(prompt).wait_for()
        page.get_by_text("Response B is better").click()
        page.get_by_role("textbox").click()  # the rationale box is a contenteditable, typed into like a person
        page.keyboard.type("B adds correctly")
        page.screenshot(path=str(ARTIFACTS / "argilla-labelled.png"))  # what the annotator saw and chose
        with page.expect_response(lambda r: "/responses" in r.url and r.request.method in ("POST", "PUT")) as saved:
            page.get_by_role("button", name="Submit").click()
        assert saved.value.status in (200, 201)
        page.screenshot(path=str(ARTIFACTS / "argilla-after-submit.png"))
        browser.close()
    votes = pull_votes(url=info.url, api_key=info.api_key, dataset="browser")
    row = next(r for r in rows if r["prompt"] == prompt)
    assert votes.select("pair_id", "annotator", "rationale").rows() == [(row["pair_id"], "webannotator", "B adds correctly")]
    # the person clicked the right-hand text shown as B: the vote names whichever response that was
    shown_b = shown["fields"]["response_b"]
    assert votes["vote"][0] == ("a" if shown_b == row["response_a"] else "b")
    assert votes["shown"][0] == "b"


# -- a crash in the middle of a push ---------------------------------------------------------------------

def test_push_resumes_after_the_server_is_killed_mid_push(argilla, monkeypatch):
    """SIGKILL the real server while a push is sending its batches; restart it; push again: every
    pair is there exactly once."""
    import argilla._api._records as records_api

    from prefdata.argilla import push_pairs
    from prefdata.argilla.server import LocalArgilla

    server, info = argilla
    rows = [{"pair_id": f"k{i:04d}", "prompt": f"prompt {i}", "response_a": f"left {i}", "response_b": f"right {i}",
             "category": "style"} for i in range(1500)]
    original = records_api.RecordsAPI.bulk_upsert
    calls = []

    killer = threading.Timer(0.05, server.kill)

    def upsert_then_crash(self, dataset_id, records):
        calls.append(len(records))
        if len(calls) == 3:  # kill the server while this batch is on its way (it may or may not land)
            killer.start()
        if len(calls) == 4:  # and surely before the next one
            killer.join()
        return original(self, dataset_id, records)

    monkeypatch.setattr(records_api.RecordsAPI, "bulk_upsert", upsert_then_crash)
    with pytest.raises(PrefdataError) as failed:
        push_pairs(rows, url=info.url, api_key=info.api_key, dataset="crash", progress=False)
    assert "\n" not in str(failed.value) and "push again" in str(failed.value)
    monkeypatch.setattr(records_api.RecordsAPI, "bulk_upsert", original)

    assert server.status() is None
    port = int(info.url.rsplit(":", 1)[1])
    restarted = LocalArgilla(server.workdir, venv=server.venv).start(port=port, log=print)
    assert restarted.url == info.url
    result = push_pairs(rows, url=info.url, api_key=info.api_key, dataset="crash", progress=False)
    assert result.already_there >= 500 and result.pushed == 1500 - result.already_there
    owner = _http(info.url, info.api_key)
    external = [r["external_id"] for r in _all_records(owner, _dataset_id(owner, "crash"))]
    assert len(external) == len(set(external)) == 1500
    assert set(external) == {r["pair_id"] for r in rows}
