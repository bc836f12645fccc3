"""The collect flow: prompts -> candidates -> pairs -> judge -> route -> humans -> votes -> a draft
version in the store. It only wires: sampling, pairing, judging, routing and the store are
prefdata's; the tables are assembled by prefdata/collect/collection.py (pure functions).

    prompts ─> sample-and-judge (subflow; its task runner is `engine`: threads or Dask)
                 sample chunk ×N   cached on their inputs, results persisted   (model calls)
                 build pairs
                 judge chunk  ×M   cached likewise; each holds a slot of the judge concurrency limit
            ─> route ─> human queue file ─> simulated annotators | Argilla push + pull ─> label ─> draft

A run that dies halfway resumes: the rerun finds every finished chunk in the cache and samples and
judges only the rest. Cache keys hold what decides a result (prompts, model and its revision,
sampling params and seed, the chat rendering asked for; pairs and the judge's identity) and the
task's source, never timeouts or concurrency. Every chunk samples with a seed derived from its own
prompts, so the same prompts give the same dataset on any runner and any number of workers.

Prompts reach the policy through the one chat rendering (prefdata.models.chat: Policy.chat and
system_prompt); the draft's lineage records it as `lineage["rendering"]`, which the trainers read,
and its card says it in one line. A prompts table may give {role, content} messages.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.concurrency.sync import concurrency

from prefdata.base.errors import UnusableInput
from prefdata.collect import collection
from prefdata.flows.params import Engine, Humans, Judge, Policy, Prompts, Routing, check_reach, shipped
from prefdata.base.progress import Stage, chunk_name

CACHED = (INPUTS - "runtime") + TASK_SOURCE  # `runtime` holds knobs that do not change results
NETWORK_RETRY_DELAYS = [2.0, 10.0, 30.0]    # seconds: Argilla and sampling servers


# -- sampling and judging --------------------------------------------------------------------------

_sampling_lock = threading.Lock()  # one in-process sampler at a time: torch seeds one global RNG


@functools.lru_cache(maxsize=2)
def _local_sampler(model: str, revision: str | None, chat: str = "auto", system: str | None = None):
    from prefdata.collect.sampling import TransformersSampler

    # one generate per chunk: results depend on the batch
    return TransformersSampler(model, batch_size=1 << 16, chat=chat, system=system)


def sample(prompts: list, model: str, revision: str | None, n: int, params: dict, runtime: dict,
           rendering: dict | None = None) -> dict:
    """{"candidates": n candidates for each prompt, "rendering": the sampler's Rendering.record(),
    "api": the server's API (None in process)}. `rendering`: the policy's {"chat", "system"}."""
    from prefdata.collect.sampling import OpenAICompatibleSampler, SamplingParams

    sampling = SamplingParams(**params)
    chat, system = (rendering or {}).get("chat", "auto"), (rendering or {}).get("system")
    if runtime.get("base_url"):
        sampler = OpenAICompatibleSampler(runtime["base_url"], model, api_key_env=runtime.get("api_key_env"),
                                          concurrency=runtime["requests_in_flight"], revision=revision,
                                          chat=chat, system=system)
        return {"candidates": sampler.sample(prompts, n, sampling), "rendering": sampler.rendering.record(),
                "api": sampler.api}
    with _sampling_lock:
        sampler = _local_sampler(model, revision, chat, system)
        return {"candidates": sampler.sample(prompts, n, sampling), "rendering": sampler.rendering.record(),
                "api": None}


# Task bodies only call module functions: Dask ships a task's function by value, and a module-level
# lock inside it would not pickle.
@task(name="sample", cache_policy=CACHED, persist_result=True)
def sample_chunk(prompts: list, model: str, revision: str | None, n: int, params: dict, runtime: dict,
                 rendering: dict) -> dict:
    """n candidates for each prompt of one chunk (lists of prefdata.collect.sampling.Candidate) with the
    rendering they were sampled with (see `sample`). A prompt is text or {role, content} messages.
    runtime["base_url"]: a server to sample from (not in the cache key: the same model anywhere);
    `rendering` ({"chat", "system"}) is in it: another rendering samples other candidates."""
    return sample(prompts, model, revision, n, params, runtime, rendering)


class JudgeUnavailable(RuntimeError):
    """Some pairs of a chunk got no verdict because the judge could not be reached; the task is retried
    and never cached with the gap."""


_LOADED: dict[str, object] = {}  # judges holding a model in this process (an in-process LLM, a reward model)
_LOADED_LOCK = threading.Lock()
KEEP_LOADED = 2  # a cascade's two judges; a third replaces the one used longest ago
# The Judge fields (runtime) a backend's judge may take as options (prefdata.base.specs)
JUDGE_OPTIONS = ("requests_in_flight", "timeout_s", "max_retries", "api_key_env")


def _loaded_judge(identity: dict, make):
    """One loaded judge per identity for every judging task of this process (loading per chunk would cost
    more than judging it); at most KEEP_LOADED of them, the one used longest ago let go first."""
    key = json.dumps(identity, sort_keys=True)
    with _LOADED_LOCK:
        if key in _LOADED:
            _LOADED[key] = _LOADED.pop(key)  # used now: the newest
        else:
            while len(_LOADED) >= KEEP_LOADED:
                _LOADED.pop(next(iter(_LOADED)))
            _LOADED[key] = make()
        return _LOADED[key]


def release_models() -> None:
    """Drop the models this process keeps for sampling and judging in process (kept between chunks and
    runs, since loading one per chunk would cost more than its work): a command that trains next gets
    their memory back (the chat demo: about 0.6 GB, SmolLM2 in fp32 and its caches). The heap's
    freed pages go back to the system too: glibc keeps them for reuse otherwise, and a process that
    samples then trains would hold both peaks' memory."""
    import ctypes
    import gc

    _local_sampler.cache_clear()
    with _LOADED_LOCK:
        _LOADED.clear()
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


def make_judge(identity: dict, runtime: dict):
    """The judge a Judge's identity() names, built by its registered backend (prefdata.base.specs): the
    same for prefdata's own kinds and any other package's or the operator's. `runtime`: where it is served
    and the knobs that do not change its verdicts."""
    from prefdata.base.specs import backend
    from prefdata.flows.params import Judge

    spec = Judge.spec_of(identity, runtime.get("base_url"))
    found = backend(spec.kind, "judge.kind")
    options = {k: runtime[k] for k in JUDGE_OPTIONS if k in runtime}
    if "max_tokens" in identity:
        options["max_tokens"] = identity["max_tokens"]
    keeps = getattr(found, "keeps_model", None)
    if keeps is not None and keeps(spec):
        return _loaded_judge(identity, lambda: found.judge(spec, options))
    return found.judge(spec, options)


@task(name="judge", cache_policy=CACHED, persist_result=True)
def judge_chunk(items: list[dict], identity: dict, runtime: dict) -> list:
    """Verdicts (prefdata.collect.judging.Verdict) for one chunk of pairs, in order."""
    from prefdata.collect.judging import PairToJudge

    pairs = [PairToJudge(i["prompt"], i["response_a"], i["response_b"], i["pair_id"], i.get("category"))
             for i in items]
    judge = make_judge(identity, runtime)
    # strict: a missing limit is an error, never an unbounded judge (collect creates it first).
    with concurrency(runtime["limit_name"], occupy=1, timeout_seconds=runtime["slot_timeout_s"], strict=True):
        verdicts = judge.judge(pairs)
    # a served judge's errors are transient (retry the task rather than cache the gap); an in-process
    # judge's are not, and its undecided pairs go to humans like any other
    failed = [v for v in verdicts if v.reason == "error" and identity["kind"] == "llm" and runtime["base_url"]]
    if failed:  # transient after the judge's own retries: retry the task rather than cache the gap
        raise JudgeUnavailable(f"{len(failed)} of {len(verdicts)} pairs got no verdict from {runtime['base_url']}: "
                               f"{failed[0].error}")
    return verdicts


def task_runner(engine: Engine):
    from prefect.task_runners import ThreadPoolTaskRunner

    if engine.runner == "threads":
        return ThreadPoolTaskRunner()
    if engine.runner == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError:
            from prefdata.base.errors import UnusableInput

            raise UnusableInput("engine runner 'ray' needs prefect-ray: pip install prefect-ray") from None
        return RayTaskRunner(address=engine.address) if engine.address else RayTaskRunner()
    from prefect_dask import DaskTaskRunner

    if engine.address:
        return DaskTaskRunner(address=engine.address)
    # One thread per worker process: torch parallelises inside a task, and threads would share its RNG.
    return DaskTaskRunner(cluster_class="distributed.LocalCluster",
                          cluster_kwargs={"n_workers": engine.dask_workers, "threads_per_worker": 1,
                                          "processes": True, "dashboard_address": None})


def resolve_model(model: str) -> tuple[str, str | None]:
    """(path or name, revision): "world" is the demo world's SFT model, built or reused."""
    from prefdata.collect.sampling import model_revision

    if model == "world":
        from prefdata.world import build_world

        model = str(build_world().sft)
    return model, model_revision(model)


@flow(name="sample-and-judge")
def sample_and_judge(prompts: list[str | list[dict[str, str]]], policy: Policy, judge: Judge, engine: Engine) -> dict:
    """The fan-out: sampling chunks, then judging chunks, on the runner `engine` names."""
    from prefdata.base.registry import load
    from prefdata.collect.pairing import with_repair
    from prefdata.collect.sampling import SamplingParams, build_pairs

    logger = get_run_logger()
    options: dict = {"refresh_cache": engine.refresh_cache}
    if engine.cache_dir:
        options["result_storage"] = Path(engine.cache_dir).resolve()
    model, revision = resolve_model(policy.model) if not policy.base_url else (policy.model, None)
    sampler = sample_chunk.with_options(**options, **({"retries": len(NETWORK_RETRY_DELAYS),
                                                       "retry_delay_seconds": NETWORK_RETRY_DELAYS}
                                                      if policy.base_url else {}))
    runtime = {"base_url": policy.base_url, "requests_in_flight": policy.requests_in_flight,
               "api_key_env": policy.api_key_env}
    rendering = {"chat": policy.chat, "system": policy.system_prompt}
    futures = []
    chunks = collection.chunks(prompts, policy.chunk_size)
    for i, chunk in enumerate(chunks, 1):  # runs named "sample i/N": the UI and `prefdata collect` read N there
        params = SamplingParams(policy.temperature, policy.top_p, policy.top_k, policy.max_new_tokens,
                                collection.chunk_seed(policy.seed, map(collection.prompt_key, chunk))).as_dict()
        futures.append(sampler.with_options(task_run_name=chunk_name("sample", i, len(chunks)))
                       .submit(chunk, model, revision, policy.candidates, params, runtime, rendering))
    sampled = [f.result() for f in futures]
    groups = [group for out in sampled for group in out["candidates"]]
    used = {json.dumps({k: out[k] for k in ("rendering", "api")}, sort_keys=True) for out in sampled}
    if len(used) > 1:  # cached chunks of a policy whose tokenizer changed beneath an unchanged revision
        raise UnusableInput(f"the chunks were sampled with different renderings ({'; '.join(sorted(used))}): sample "
                            "again with engine.refresh_cache (--cache-dir: a fresh folder)")
    if policy.repair:
        repair = load("repair", policy.repair, "policy.repair")
        groups = [with_repair(group, repair, policy.repair) for group in groups]
    comparisons = [row for group in groups for row in build_pairs(group[0].prompt, group, policy.pairs, seed=policy.seed)]
    logger.info("%d prompts -> %d candidates -> %d comparisons", len(groups), sum(map(len, groups)), len(comparisons))

    items = [{k: c[k] for k in ("prompt", "response_a", "response_b", "pair_id")} for c in comparisons]
    verdicts: dict[str, object] = {}
    stages = []
    for step, stage in enumerate(judge.cascade()):  # each judge sees what the ones before it left undecided
        left = [i for i in items if i["pair_id"] not in verdicts or verdicts[i["pair_id"]].undecided]
        given = judge_pairs(left, stage, options, "judge" if step == 0 else "then-judge")
        # a later judge's verdict replaces an undecided one only when it decides: a pair no judge decides
        # reaches the humans with the first judge's reason (e.g. both_fail), not the last one's failure
        verdicts.update((v.pair_id, v) for v in given if step == 0 or not v.undecided)
        stages.append({"judge": stage.identity(), "pairs": len(left), "decided": sum(not v.undecided for v in given),
                       "unparseable": sum(v.reason == "unparseable" for v in given)})
    first = sampled[0] if sampled else {"rendering": None, "api": None}
    return {"candidates": groups, "comparisons": comparisons, "verdicts": [verdicts[i["pair_id"]] for i in items],
            "judges": stages, "rendering": first["rendering"], "api": first["api"]}


def judge_pairs(items: list[dict], judge: Judge, options: dict, task_name: str) -> list:
    """One judge's verdicts on `items`, in chunks (the cascade's later judges run as "then-judge")."""
    judger = judge_chunk.with_options(**options, retries=len(judge.retry_delays_s),
                                      retry_delay_seconds=judge.retry_delays_s)
    runtime = {k: getattr(judge, k) for k in ("base_url", "requests_in_flight", "timeout_s", "max_retries",
                                              "api_key_env", "limit_name", "slot_timeout_s")}
    chunks = collection.chunks(items, judge.chunk_size)
    futures = [judger.with_options(task_run_name=chunk_name(task_name, i, len(chunks)))
               .submit(chunk, judge.identity(), runtime) for i, chunk in enumerate(chunks, 1)]
    return [v for f in futures for v in f.result()]


# -- the human share -------------------------------------------------------------------------------


@task(name="set-judge-limit")
def set_judge_limit(name: str, limit: int) -> int:
    """Set the judges' global concurrency limit; on a temporary server, also free the slots it counts
    as held, and return how many. A temporary server keeps its leases in memory and runs no service
    that revokes expired ones, but its slot counts live in the database in PREFECT_HOME: every run
    killed while judging (SIGKILL, the out-of-memory killer) left a slot held for good, and once `limit`
    of them had, every later run waited forever for a slot. A slot counted when a temporary server
    starts is one an ended run held, unless another command on the same PREFECT_HOME is judging at
    that moment: commands that must share the limit need a Prefect server (PREFECT_API_URL), which
    revokes a dead run's lease itself (after 300 s), and whose counts are left alone here."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    from prefdata.flows.server import on_temporary_server

    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, limit)
        if not on_temporary_server():
            return 0
        held = client.read_global_concurrency_limit_by_name(name).active_slots
        if held:
            client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))
        return held


@task(name="simulate-votes")
def simulate_votes(queue: list[dict], spec) -> list[dict]:
    import polars as pl

    from prefdata.world import annotator_pool, votes_frame

    if not queue:
        return []
    frame = pl.DataFrame({k: [r[k] for r in queue] for k in ("pair_id", "prompt", "response_a", "response_b")})
    pool = annotator_pool(spec.k, spec.accuracy, spec.tie_rate, spec.seed)
    return votes_frame(frame, pool, collection.import_target(spec.verifier)).to_dicts()


def _argilla_key(spec) -> str | None:
    import os

    if spec.api_key_secret:
        from prefect.blocks.system import Secret

        return Secret.load(spec.api_key_secret).get()  # never logged; Prefect masks Secret values
    return os.environ.get("ARGILLA_API_KEY")


@task(name="argilla-push", retries=len(NETWORK_RETRY_DELAYS), retry_delay_seconds=NETWORK_RETRY_DELAYS)
def argilla_push(queue: list[dict], spec, guidelines: str | None) -> None:
    from prefdata.argilla import push_pairs

    push_pairs(queue, url=spec.url, api_key=_argilla_key(spec), dataset=spec.dataset, workspace=spec.workspace,
               overlap=spec.overlap, guidelines=guidelines, suggestions=spec.suggestions, progress=False)


@task(name="argilla-pull", retries=len(NETWORK_RETRY_DELAYS), retry_delay_seconds=NETWORK_RETRY_DELAYS)
def argilla_pull(spec) -> list[dict]:
    from prefdata.argilla import pull_votes

    frame = pull_votes(url=spec.url, api_key=_argilla_key(spec), dataset=spec.dataset, workspace=spec.workspace)
    return frame.select("pair_id", "annotator", "vote").to_dicts()


def argilla_votes(queue: list[dict], spec, guidelines: str | None) -> list[dict]:
    """Push the queue, then pull; wait up to spec.wait_s for every pushed pair to reach `overlap` votes."""
    import time

    argilla_push(queue, spec, guidelines)
    wanted, deadline = {r["pair_id"] for r in queue}, time.monotonic() + spec.wait_s
    while True:
        votes = [v for v in argilla_pull(spec) if v["pair_id"] in wanted]
        per_pair = {p: sum(v["pair_id"] == p for v in votes) for p in wanted}
        if all(n >= spec.overlap for n in per_pair.values()) or time.monotonic() + spec.poll_s > deadline:
            return votes
        time.sleep(spec.poll_s)


# -- the flow --------------------------------------------------------------------------------------

# The flow's stages as `prefdata collect` shows them while it runs (flows/progress.py), by task name.
STAGES = [Stage("load prompts", ("load-prompts",)), Stage("sample", ("sample",), "chunks"),
          Stage("judge", ("judge",), "chunks"), Stage("then judge", ("then-judge",), "chunks"),
          Stage("humans", ("simulate-votes", "argilla-push", "argilla-pull")), Stage("write draft", ("write-draft",))]


def shown_stages(argilla: bool, cascade: bool) -> list[Stage]:
    """The stages a run has: Argilla's push and pull only with Argilla, a second judge only in a cascade."""
    return [s for s in STAGES if (s.label != "humans" or argilla) and (s.label != "then judge" or cascade)]


@task(name="load-prompts")
def load_prompts(spec: Prompts) -> list[str | list[dict[str, str]]]:
    """The run's prompts: text, or {role, content} messages where a table's prompt (or messages)
    column holds them (collection.message_prompts; prefdata.gate.runner.read_prompts reads text only)."""
    if spec.source == "world":
        from prefdata.world import WorldConfig, sampling_prompts

        return sampling_prompts(WorldConfig(), spec.n)
    if not Path(spec.source).is_file():
        raise UnusableInput(f"prompts: {spec.source} is not a file (and not 'world')")
    from prefdata.gate.runner import read_prompts

    given = None if Path(spec.source).suffix.lower() == ".txt" else collection.message_prompts(spec.source)
    if given is None:
        given = read_prompts(spec.source).to_list()
    unique: dict[str, object] = {}
    for prompt in given:  # the same prompt twice is one prompt (the first kept, in file order)
        unique.setdefault(collection.prompt_key(prompt), prompt)
    prompts = list(unique.values())
    return prompts[:spec.n] if spec.n else prompts


@task(name="write-draft")
def write_draft(name: str, labelled: list[dict], votes: list[dict], counters: dict, lineage: dict,
                guidelines: str | None, store: str | None, onto: str | None = None) -> str:
    from prefdata.data.onto import Onto
    from prefdata.data.store import Store
    from prefdata.models.chat import Rendering

    tables, counts = collection.draft(labelled, votes)
    rendering = Rendering.from_record(lineage.get("rendering"))
    notes = [f"Prompts rendered for sampling: {rendering.describe()}."] if rendering else []
    st = Store(store)
    if onto is None:
        return st.create(name, tables, counts={**counts, **counters}, lineage=lineage, guidelines=guidelines,
                         notes=notes).ref
    grown = Onto.open(st, onto)
    return st.create_sharded(name, [grown.tables(tables)],
                             lambda: ({}, None, {**counts, **counters}, grown.lineage(lineage)),
                             guidelines=guidelines, notes=notes, onto=grown.parent).ref


@flow(name="collect", description="Sample, pair, judge, route, gather votes; store a draft dataset version.")
def collect(name: str = "world-arithmetic", prompts: Prompts = Prompts(), policy: Policy = Policy(),
            judge: Judge = Judge(), routing: Routing = Routing(), humans: Humans = Humans(),
            engine: Engine = Engine(), guidelines: str | None = None, store: str | None = None,
            parent: str | None = None, onto: str | None = None) -> dict:
    """Sample, pair, judge and route; gather the humans' votes; store a draft version.

    Args:
        name: The dataset's name: the draft is NAME@VERSION.
        prompts: Where the prompts come from.
        policy: The model that samples the candidates.
        judge: What decides each pair (a verifier, an LLM judge, a reward model), and the judges after it.
        routing: Which pairs go to humans.
        humans: Who answers the human share: simulated annotators, or Argilla.
        engine: Where sampling and judging run, and their resume cache.
        guidelines: The annotation guidelines (Markdown) for the card and Argilla; `world` for the demo
            world's own.
        store: The store root or fsspec URL, as every command's --store; None: $PREFDATA_STORE, else
            .prefdata/store in the run's working folder.
        parent: The version this one follows (e.g. the previous round's), for the lineage.
        onto: Grow a version: the draft holds this version's rows (NAME@VERSION, or `previous` for the
            newest validated version of `name`, if any) before the night's, its files shared, and names
            it as its parent (as `prefdata import --onto`).
    """
    from prefect.runtime import deployment, flow_run

    from prefdata.gate.runner import read_text
    from prefdata.collect.judging import JudgeReport, PairToJudge
    from prefdata.collect.routing import RoutingPolicy, route, route_counts, write_queue
    from prefdata.collect.sampling import sampler_lineage
    from prefdata.data.store import check_name

    logger = get_run_logger()
    if deployment.id:  # a run anyone with the API could create: only what the operator allowed
        check_reach(prompts=prompts, policy=policy, judge=judge, humans=humans, engine=engine,
                    guidelines=guidelines, store=store)
    check_name(name)
    if onto is not None:  # the version to grow, found before a night of sampling (None: nothing validated yet)
        from prefdata.data.onto import resolve
        from prefdata.data.store import Store

        onto = resolve(Store(store), name, onto)
    guideline_text = read_text(Path(shipped(guidelines, "guidelines")), "guidelines") if guidelines else None
    prompt_list = load_prompts(prompts)
    for stage in judge.cascade():
        if freed := set_judge_limit(stage.limit_name, stage.limit):
            logger.warning(f"judge limit {stage.limit_name!r}: freed {freed} slot(s) that runs killed while judging "
                           "had left held")
    out = sample_and_judge.with_options(task_runner=task_runner(engine))(prompt_list, policy, judge, engine)
    comparisons, verdicts = out["comparisons"], out["verdicts"]

    policy_ = RoutingPolicy(routing.min_confidence, tuple(routing.human_categories), routing.audit_share, routing.seed)
    items = [PairToJudge(c["prompt"], c["response_a"], c["response_b"], c["pair_id"],
                         prompt_messages=c.get("prompt_messages")) for c in comparisons]
    routed = route(items, verdicts, policy_)
    queue = [r for r in routed if r["route"] in ("human", "both")]
    queue_file = Path(humans.queue_dir) / f"{name}.jsonl"
    write_queue(queue_file, routed)
    if humans.argilla is not None and queue:
        votes = argilla_votes(queue, humans.argilla, guideline_text)
    elif humans.simulated is not None:
        votes = simulate_votes(queue, humans.simulated)
    else:
        votes = []
    logger.info("%d pairs to humans (queue %s), %d votes", len(queue), queue_file, len(votes))

    labelled = collection.label(routed, comparisons, votes, aggregate=humans.aggregate)
    report = JudgeReport.from_verdicts(verdicts)
    groups = out["candidates"]
    counters = {
        "prompts": len(groups), "candidates": sum(map(len, groups)), "comparisons": len(comparisons),
        "prompts_without_pair": len(groups) - len({c["prompt_id"] for c in comparisons}),
        "judge": {k: getattr(report, k) for k in ("n", "decided", "undecided", "consistent", "inconsistent",
                                                  "unparseable", "errors", "first_position_rate")},
        "routes": route_counts(routed), "queued": len(queue), "votes": len(votes),
        "judges": out["judges"],  # the cascade: pairs each judge saw and decided
    }
    lineage = {
        "parent": parent,  # the version this one follows (e.g. the previous round, whose model sampled it)
        "sources": [{"path": prompts.source, "role": "prompts", "n": len(prompt_list),
                     "sha256": hashlib.sha256("\n".join(map(collection.prompt_key, prompt_list)).encode()).hexdigest()}],
        "flow_run": {"flow": "collect", "id": str(flow_run.id), "name": flow_run.name},
        # how prompts became the policy's input (prefdata.models.chat): the trainers render with it
        "rendering": out["rendering"],
        "components": {"sampler": sampler_lineage([c for g in groups for c in g]), "judge": judge.lineage(),
                       "routing": routing.model_dump(), "humans": humans.model_dump(exclude={"queue_dir"})},
    }
    if out["api"]:  # a served policy: the API its prompts went through
        lineage["components"]["sampling_api"] = out["api"]
    ref = write_draft(name, labelled, votes, counters, lineage, guideline_text, store, onto)
    logger.info("draft %s: %d comparisons, %d pairs", ref, len(labelled), sum(r["label"] in ("a", "b") for r in labelled))
    return {"version": ref, "queue": str(queue_file), **counters}
