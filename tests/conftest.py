"""Shared fixtures. Real public data lives in ../shared/data beside the repo; it is never copied in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PREFDATA_SHARED_DATA", REPO.parent / "shared" / "data"))


_CONFIG: list = []  # pytest's config, for the fixtures that must print past output capture


def pytest_configure(config) -> None:
    _CONFIG[:] = [config]


SHARED_DATA_ABSENT = "real data folder {} is absent (set PREFDATA_SHARED_DATA to its path)"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public datasets; tests that need it skip with a clear reason without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(SHARED_DATA_ABSENT.format(SHARED_DATA))
    return SHARED_DATA


# The files that take minutes, longest first. `make test` splits the suite over worker processes by
# file (pytest-xdist --dist loadfile), handing files out in collection order: one of these handed out
# last would run alone at the end. They go first; the shuffled order (pytest-random-order) holds
# for every other file and inside each file.
LONG_FILES = ("test_allowlist.py", "test_argilla.py", "test_trainers.py", "test_production.py", "test_flows.py",
              "test_demo.py", "test_checklist.py", "test_signals.py")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: other orders kept


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """After the short summary, just above pytest's closing counts: one line naming the tests that did
    not run for want of the real data, so that a run on a clone without ../shared/data never looks
    like the whole suite."""
    yield
    marker = SHARED_DATA_ABSENT.format(SHARED_DATA)
    missed = [r for r in terminalreporter.stats.get("skipped", []) if marker in str(r.longrepr)]
    if missed:
        terminalreporter.write_line(
            f"{len(missed)} tests need the real public data in {SHARED_DATA} and did not run: put the project's "
            "shared/ folder beside this clone, or set PREFDATA_SHARED_DATA to its data/ folder", yellow=True)


@pytest.fixture(scope="session")
def prefect_api():
    """One Prefect test server (a temporary SQLite database) for the whole session, shared by every
    module that runs flows: two harnesses nested (a module's inside another's session) left a judge
    task waiting on a concurrency slot in a shuffled order. Startup gets two minutes, not Prefect's
    30 s: on a loaded 2-core CI machine the server took longer than that to answer."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


@pytest.fixture()
def store_root(tmp_path, monkeypatch) -> Path:
    """A fresh, empty dataset store for one test."""
    root = tmp_path / "store"
    monkeypatch.setenv("PREFDATA_STORE", str(root))
    return root


# -- tiny models and a real `transformers serve` (sampling, judging, routing tests) ---------------
# Random-init models built here, never downloaded: they produce gibberish, which is exactly what
# the protocol tests need (an LLM judge that cannot follow the format must yield undecided verdicts).

import sys  # noqa: E402

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture()
def sample_calls(monkeypatch) -> dict[str, int]:
    """Counts TransformersSampler.sample calls (the real method still runs): a cached rerun makes 0."""
    from prefdata.collect.sampling import TransformersSampler

    calls = {"sample": 0}
    real_sample = TransformersSampler.sample

    def counted(self, *args, **kwargs):
        calls["sample"] += 1
        return real_sample(self, *args, **kwargs)

    monkeypatch.setattr(TransformersSampler, "sample", counted)
    return calls


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """A ~0.3M-parameter char-level LlamaForCausalLM with its tokenizer (and a chat template), saved
    with save_pretrained."""
    from bench.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "model")


@pytest.fixture(scope="session")
def tiny_reward_model(tmp_path_factory) -> Path:
    """A random LlamaForSequenceClassification with one output (a reward model's shape)."""
    from bench.tiny_models import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("tiny-rm") / "model")


@pytest.fixture(scope="session")
def transformers_serve(tmp_path_factory):
    """A real `transformers serve` on 127.0.0.1 (free port, CPU, offline), for the whole session,
    stopped by its own pid at the end. Models load on demand: pass a local path as `model`."""
    from prefdata.collect.local_serve import TransformersServe

    # One torch thread in the server: on a shared machine torch's default (one per core) spin-waits
    # against other processes and every request gets several times slower.
    server = TransformersServe(tmp_path_factory.mktemp("serve") / "serve.log", extra_env={"OMP_NUM_THREADS": "1"})
    from prefdata.base.errors import PrefdataError

    try:
        server.start()
    except PrefdataError as error:
        pytest.fail(str(error))
    yield server
    server.stop()


# -- a real local Argilla (tests/test_argilla.py, test_flows.py, test_demo.py) ---------------------


def local_argilla(workdir: Path):
    """A LocalArgilla in `workdir` whose server environment is built (once per checkout, cached under
    .prefdata/argilla/venv). Not started: each module starts its own, since some kill theirs. Skips
    with the reason only where the environment cannot be built, and never in CI."""
    from prefdata.argilla.server import LocalArgilla
    from prefdata.base.errors import PrefdataError

    server = LocalArgilla(workdir, venv=REPO / ".prefdata" / "argilla" / "venv")
    try:
        # on the terminal, not in the captured output: the first run builds it for a minute or more
        with _CONFIG[0].pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            server.ensure_venv(log=lambda message: print(f"\n{message}", flush=True))
    except PrefdataError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must build argilla-server: {exc}")
        pytest.skip(f"argilla-server cannot be built here ({exc})")
    return server


@pytest.fixture
def register(tmp_path, monkeypatch):
    """register(verifiers={"name": "module:function"}, allow={"paths": [...]}, ...): an operator's
    registry file (prefdata/base/registry.py) for this test, named by PREFDATA_REGISTRY in this process
    and in every subprocess it starts. Returns the file's path."""
    def write(**tables: dict) -> Path:
        def value(v):
            return "[" + ", ".join(f'"{x}"' for x in v) + "]" if isinstance(v, list) else f'"{v}"'
        path = tmp_path / "registry.toml"
        path.write_text("".join(f"[{table}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in entries.items())
                                for table, entries in tables.items()))
        monkeypatch.setenv("PREFDATA_REGISTRY", str(path))
        return path
    return write
