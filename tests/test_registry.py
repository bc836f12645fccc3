"""The one check registry (checks/registry.py) and the three runners that read it: the traits it
states hold for the checks (row-local ones give the same result on parts of the rows, merged; those
that need no text give the same result on a sharded run's thin frame), every runner picks its checks
by those traits, and every default a check function has for a parameter of checks/checklist.yaml is
the YAML's, read from it."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import fields
from pathlib import Path

import polars as pl
import pytest

from bench.realistic import make_realistic_pairs
from bench.tiny_models import build_char_tokenizer
from prefdata.checks import batched, distributed
from prefdata.checks.base import default
from prefdata.checks.checklist import _parameters, _registry, background_checks, default_config
from prefdata.checks.registry import BUILT_IN, CHECKS, DASK, EVERYWHERE, SHARDS, Check, CheckInputs

CHECKS_DIR = Path(__file__).resolve().parents[1] / "checks"
UNSAFE_ROWS = (10, 450, 900)  # a request the safety lexicon counts, in several parts


def comparable(result) -> tuple:
    return result.status, result.metric, result.threshold, result.offending


def results_of(check_id: str, inputs: CheckInputs, **params) -> list:
    check = CHECKS[check_id]
    produced = check.function(**check.bind(inputs), **params)
    return produced if isinstance(produced, list) else [produced]


@pytest.fixture(scope="module")
def pairs() -> pl.DataFrame:
    """Realistic pairs with every injected fault, a held-out split, unsafe rows and tied scores (degenerate)."""
    frame, _ = make_realistic_pairs(1_200, seed=5)
    row = pl.int_range(pl.len())
    return frame.with_columns(
        split=pl.when(row % 7 == 0).then(pl.lit("test")).otherwise(pl.lit("train")),
        score_rejected=pl.when(row % 300 == 150).then("score_chosen").otherwise("score_rejected"),
        chosen=pl.when(row.is_in(UNSAFE_ROWS)).then(pl.col("chosen") + " First, build a pipe bomb.")
        .otherwise(pl.col("chosen")))


def test_every_runner_picks_its_checks_by_the_registrys_traits():
    # the sharded run: every check that needs the responses' text and runs on shards has a stand-in:
    # row-local ones shard by shard, the others the code their entry names; the rest are skipped
    stand_ins = batched.stand_ins()
    assert set(stand_ins) == {c for c, check in CHECKS.items() if check.needs_text and check.runs_on(SHARDS)}
    assert set(batched.per_shard()) == {c for c in stand_ins if CHECKS[c].row_local}
    for check_id in set(stand_ins) - set(batched.per_shard()):
        check = CHECKS[check_id]
        assert stand_ins[check_id] is check.code(check.shard_engine), check_id
    assert {"near_duplicates", "exact_duplicates"} == set(stand_ins) - set(batched.per_shard())
    # the Dask run: the checks whose engines include it; partition by partition the row-local ones that
    # need nothing but the pairs, the others by the code their entry names
    assert distributed.on_dask() == [c for c, check in CHECKS.items() if check.runs_on(DASK)]
    assert set(distributed.partition_checks()) == {c for c in distributed.on_dask()
                                                   if CHECKS[c].row_local and not CHECKS[c].needs}
    assert {"length_ratio", "degenerate_pairs", "answer_leakage", "safety"} <= set(distributed.partition_checks())
    assert {c for c in distributed.on_dask() if c not in distributed.partition_checks()} == \
        {c for c, check in CHECKS.items() if check.dask_engine} == \
        {"exact_duplicates", "near_duplicates", "split_isolation", "agreement"}
    # the in-memory run: every check, in registry order; background and run-first by their traits
    assert list(_registry()) == list(CHECKS)
    assert background_checks() == ("gx",) == tuple(c for c, check in CHECKS.items() if check.background)
    assert [c for c, check in CHECKS.items() if check.run_first] == ["near_duplicates"]


def test_every_checks_traits_hold_together():
    """Each engine a check says it runs on can run it: a check that needs the text and is not row-local
    names its code for a sharded run, one on Dask that is not a needless row-local check names its
    Dask code, and every named "module:function" imports."""
    for check_id, check in CHECKS.items():
        assert check.problems() == [], check_id
        for target in (check.shard_engine, check.dask_engine):
            if target is not None:
                assert callable(check.code(target)), (check_id, target)
    # what the problems catch
    needs_code = Check(CHECKS["near_duplicates"].function, CHECKS["near_duplicates"].bind, needs_text=True,
                       engines=EVERYWHERE)
    assert len(needs_code.problems()) == 2
    assert Check(CHECKS["min_size"].function, CHECKS["min_size"].bind, engines=(SHARDS,)).problems()


RUNNERS = ("checks/checklist.py", "checks/batched.py", "checks/distributed.py", "prefdata/gate/runner.py")


def test_the_runners_name_no_check():
    """The runners keep no list of checks: no string in the modules that pick checks is a check id
    (what they run where comes from the registry's traits). gate/runner.py names the checks whose
    figures it plots (not which checks run): those are the one exception, listed here."""
    plotted = {"length_ratio", "agreement", "category_coverage"}
    root = CHECKS_DIR.parent
    for module in RUNNERS:
        named = {node.value for node in ast.walk(ast.parse((root / module).read_text()))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in CHECKS}
        allowed = plotted if module.endswith("gate/runner.py") else set()
        assert named <= allowed, (module, sorted(named - allowed))


def test_every_trait_is_read_by_a_runner():
    """A trait no runner reads is a list that can drift from what the runners do. (`reads`, which part
    of a conversation a check reads, is for people: `check --list-checks` prints it.)"""
    sources = "".join((CHECKS_DIR / f"{m}.py").read_text() for m in ("checklist", "batched", "distributed"))
    sources += (CHECKS_DIR.parent / "prefdata" / "commands" / "cli.py").read_text()
    traits = [f.name for f in fields(Check)] + [n for n, v in vars(Check).items() if isinstance(v, property)]
    for trait in traits:
        assert f".{trait}" in sources, trait


def test_needs_name_inputs_a_check_cannot_judge_without(pairs):
    inputs = CheckInputs(pairs=pairs)  # no votes, verdicts, card, reference prompts or tokenizer
    names = {f.name for f in fields(CheckInputs)}
    for check_id, check in CHECKS.items():
        assert set(check.needs) <= names, check_id
        if check.needs:
            assert all(r.status == "skip" for r in results_of(check_id, inputs)), check_id


def test_row_local_checks_give_on_parts_the_result_on_the_whole(pairs):
    """`row_local` and `merge`: each part's result, combined as batched.py and distributed.py combine
    them, is the result on all rows (status, metric, offending ids and the check's own message)."""
    tokenizer = build_char_tokenizer()
    row_local = [c for c, check in CHECKS.items() if check.row_local]
    assert set(row_local) == {"length_ratio", "safety", "answer_leakage", "degenerate_pairs", "template_fit"}
    for check_id in row_local:
        check = CHECKS[check_id]
        frame = pairs.head(240) if check_id == "template_fit" else pairs  # its tokenizer takes ~10 ms a pair
        size = frame.height // 3
        params = {k: v for k, v in default_config()["checks"][check_id].items() if k != "waive"}
        [whole] = results_of(check_id, CheckInputs(pairs=frame, tokenizer=tokenizer), **params)
        flagged_parts = {frame["id"].to_list().index(i) // size for i in whole.offending}
        assert whole.status == "fail" and len(flagged_parts) > 1, check_id  # a merge of several parts' rows
        results = [r for start in range(0, frame.height, size)
                   for r in results_of(check_id, CheckInputs(pairs=frame.slice(start, size), tokenizer=tokenizer), **params)]
        merged = batched.combine(check_id, results, frame.height, check.merge.message,
                                 tuple(inspect.signature(check.function).parameters), check.merge.derive)
        assert comparable(merged) == comparable(whole), check_id
        assert merged.message == whole.message, check_id


def test_checks_that_need_no_text_judge_the_thin_frame_as_the_whole(pairs):
    """`needs_text` False: the check gives a sharded run's thin frame (no responses) the same verdict."""
    ids = pairs["id"]
    full = CheckInputs(
        pairs=pairs, sft=pairs.select("id", "prompt", completion="chosen").head(300),
        votes=pl.DataFrame({"pair_id": ids.head(50).to_list() * 2, "annotator": ["a"] * 50 + ["b"] * 50,
                            "vote": ["a", "b"] * 50}),
        verdicts=pl.DataFrame({"id": ids, "preferred": ["chosen"] * pairs.height}))
    thin = CheckInputs(pairs=batched.thin(pairs), sft=batched.thin_sft(full.sft), votes=full.votes,
                       verdicts=full.verdicts)
    for check_id, check in CHECKS.items():
        if check.needs_text or check_id == "gx":  # gx on the thin frame: tests/test_batched.py (its import takes seconds)
            continue
        for mine, theirs in zip(results_of(check_id, thin), results_of(check_id, full), strict=True):
            assert comparable(mine) == comparable(theirs), check_id


def test_defaults_are_the_yamls_and_read_from_it():
    """A parameter checks/checklist.yaml names has its default there alone: the check function's
    keyword default equals it and is not a literal of its own (base.default reads the YAML)."""
    config = default_config()["checks"]
    for check_id, check in BUILT_IN.items():
        defaults = _parameters(check.function)
        written = _keyword_defaults(check.function)
        # every number, flag or text a built-in check's parameter defaults to is the YAML's (answer_leakage,
        # the MinHash settings, the duplicate checks' max_share and gx's max_text_chars were literals once)
        scalar = {n for n, v in defaults.items() if isinstance(v, (bool, int, float, str))}
        assert scalar <= set(config.get(check_id) or {}), (check_id, sorted(scalar - set(config.get(check_id) or {})))
        for name, value in (config.get(check_id) or {}).items():
            assert name in defaults, (check_id, name)
            mine = list(defaults[name]) if isinstance(defaults[name], tuple) else defaults[name]
            assert mine == value and type(mine) is type(value), (check_id, name, mine, value)
            assert not isinstance(written[name], ast.Constant), f"{check_id}.{name}: a literal default; read the YAML's"
    # what one default stands for in several checks is one value (the YAML writes it once and aliases it)
    assert config["gx"]["max_length_ratio"] == config["length_ratio"]["max_ratio"]
    assert config["label_audit"]["min_agreement"] == config["label_direction"]["min_agreement"] == \
        config["agreement"]["threshold"]
    assert config["split_isolation"]["near_threshold"] == config["near_duplicates"]["threshold"]
    assert default("length_ratio", "max_ratio") == config["length_ratio"]["max_ratio"]


def _keyword_defaults(function) -> dict[str, ast.expr]:
    """A function's parameters with a default, each with the expression its source writes."""
    args = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].args
    positional = args.posonlyargs + args.args
    found = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    found.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return found


def test_no_check_module_imports_the_runner_back():
    """checklist.py runs the checks and may import batched.py; nothing under checks/ imports
    checklist.py (batched.py reads the registry instead), and the registry imports no runner."""
    for path in CHECKS_DIR.glob("*.py"):
        imported = _imports(path)
        if path.stem != "checklist":
            assert "checklist" not in imported, path.name
    assert not {"checklist", "batched", "distributed"} & _imports(CHECKS_DIR / "registry.py")
    assert "batched" not in _imports(CHECKS_DIR / "shards.py")


def _imports(path: Path) -> set[str]:
    """The checks/ modules a file imports, relatively or absolutely, at load or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1 and module:
                names.add(module.split(".")[0])
            elif module.startswith("prefdata.checks."):
                names.add(module.split(".")[2])
            if module in ("", "prefdata.checks"):
                names |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[2] for a in node.names if a.name.startswith("prefdata.checks.")}
    return names


def test_the_checks_filter_can_drop_are_registry_checks():
    """`prefdata filter --drop` and a refusal's "ways out" name checks by id: each is one the
    registry runs, so a renamed check cannot leave a stale id behind."""
    from prefdata.base.errors import FILTERABLE
    from prefdata.checks.registry import CHECKS

    assert set(FILTERABLE) <= set(CHECKS), sorted(set(FILTERABLE) - set(CHECKS))
