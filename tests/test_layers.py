"""The layers of docs/architecture.md hold: every module imports alone, no two modules import each
other, and the library below the flows never imports Prefect or the flows."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"prefdata": "prefdata", "checks": "prefdata.checks", "trainers": "prefdata.trainers", "flows": "prefdata.flows"}


def project_modules() -> dict[str, Path]:
    """Every module of prefdata/, checks/, trainers/ and flows/ by its import name."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(REPO / folder).with_suffix("").parts if p != "__init__"]
            if parts[-1:] == ["__main__"] or "weights" in parts:  # __main__ runs the CLI; weights hold no code
                continue
            found[".".join([package, *parts])] = path
    return found


def imported_at_load(path: Path) -> set[str]:
    """The modules a file imports when it loads, `if TYPE_CHECKING:` blocks included (a type-only
    import is still a dependency), imports inside functions not (they run later, on use)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names.add(child.module)
                names.update(f"{child.module}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def imported_anywhere(path: Path) -> set[str]:
    """Every module a file may import, at load or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (a path that comes back to its start), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_two_modules_import_each_other_at_load():
    modules = project_modules()
    graph = {name: {m for m in imported_at_load(path) if m in modules and m != name} for name, path in modules.items()}
    assert cycle(graph) is None, "import cycle: " + " -> ".join(cycle(graph))


# Each module is imported in a child forked from an interpreter that has loaded the heavy
# third-party libraries but no project module: "alone", as `python -c "import M"` would, at a few
# milliseconds a module instead of a fresh interpreter's seconds.
IMPORT_EACH_ALONE = """
import importlib, json, os, sys, traceback
for heavy in ("numpy", "polars", "pyarrow", "pydantic", "yaml", "typer", "rich", "fsspec", "prefect", "torch",
              "transformers", "trl"):  # trl: the TRL-based trainer plugins import it at load, ~5 s each
    importlib.import_module(heavy)
loaded = [m for m in sys.modules if m == "prefdata" or m.startswith("prefdata.")]
assert not loaded, loaded
failed = {}
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            os._exit(0)
        except BaseException:
            os.write(write, traceback.format_exc()[-3000:].encode())
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        error = pipe.read().decode()
    if os.waitpid(pid, 0)[1] != 0:
        failed[name] = error or "the child died"
print(json.dumps(failed))
"""


# Modules that run in another interpreter, never imported in prefdata's own.
ELSEWHERE = {"prefdata.argilla.sql_search"}  # inside the Argilla server's environment (argilla/launch.py loads it there)


def test_every_module_imports_alone():
    names = sorted(set(project_modules()) - ELSEWHERE)
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH_ALONE, json.dumps(names)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n\n".join(f"{name}:\n{error}" for name, error in failed.items())


def test_the_library_below_the_flows_never_imports_prefect_or_the_flows():
    """Flows only wire: prefdata/ (but the commands on top, which run flows), checks/ and trainers/
    work without Prefect (docs/architecture.md)."""
    wired = {"prefdata.commands.cli", "prefdata.commands.collect", "prefdata.commands.demo"}  # the top layer: commands that run the flows
    offenders = {}
    for name, path in project_modules().items():
        if name.startswith("prefdata.flows") or name in wired:
            continue
        bad = sorted(m for m in imported_anywhere(path) if m.split(".")[0] == "prefect" or m.startswith("prefdata.flows"))
        if bad:
            offenders[name] = bad
    assert offenders == {}


def test_library_invariants_raise_real_errors_not_assert():
    """`python -O` strips assert statements: an invariant the library relies on must raise."""
    found = [f"{path.relative_to(REPO)}:{node.lineno}" for path in project_modules().values()
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Assert)]
    assert found == []


# docs/architecture.md's import rules: modules matching the key never import those named in the value
# (a name covers its submodules), at load or inside a function.
TOP = ("prefdata.commands.cli", "prefdata.commands.collect", "prefdata.commands.demo")
FORBIDDEN = {
    "prefdata.data.records": ("prefdata.",),  # the bottom: the record and its ids, nothing else
    "prefdata.base.errors": ("prefdata.",),
    "prefdata.models.loading": ("prefdata.",),  # shared tools: loading models, specs, the reward-model scorer, the target loader
    "prefdata.base.specs": ("prefdata.",),
    "prefdata.models.reward": ("prefdata.",),
    "prefdata.base.targets": ("prefdata.data.store", "prefdata.data.importer", "prefdata.checks", "prefdata.gate.runner", "prefdata.collect.sampling",
                         "prefdata.collect.judging", "prefdata.collect.collection", "prefdata.trainers", "prefdata.flows", *TOP),
    "prefdata.checks": ("prefdata.data.store", "prefdata.data.importer", "prefdata.gate.runner", "prefdata.gate.publishing",
                         "prefdata.collect.sampling", "prefdata.collect.judging", "prefdata.collect.routing", "prefdata.collect.collection",
                         "prefdata.trainers", "prefdata.flows", *TOP),
    "prefdata.trainers": ("prefdata.checks", "prefdata.data.importer", "prefdata.gate.runner", "prefdata.gate.publishing",
                          "prefdata.collect.sampling", "prefdata.collect.collection", "prefdata.flows", *TOP),
    "prefdata.collect.sampling": ("prefdata.collect.judging", "prefdata.collect.routing", "prefdata.collect.collection", "prefdata.data.store",
                          "prefdata.checks", "prefdata.flows", *TOP),
    "prefdata.collect.pairing": ("prefdata.collect.sampling", "prefdata.collect.judging", "prefdata.data.store", "prefdata.checks",
                         "prefdata.flows", *TOP),
    "prefdata.collect.judging": ("prefdata.collect.routing", "prefdata.collect.collection", "prefdata.data.store", "prefdata.checks",
                         "prefdata.flows", *TOP),
    "prefdata.gate.runner": ("prefdata.gate.publishing", "prefdata.trainers", "prefdata.flows", *TOP),
    "prefdata.gate.publishing": ("prefdata.trainers", "prefdata.flows", *TOP),
    "prefdata.flows": TOP,
}
# Exceptions to FORBIDDEN, each with its reason. trainers -> checks.template_fit: `prefdata train`
# refuses pairs the trainer would cut or mis-tokenise with the very check `prefdata check` runs
# (issue 14 item 1), not a second copy of it; no other check module. models and reward_scoring name
# errors in one line; the scorer loads its model through prefdata.models.loading like every other module.
ALLOWED = {"prefdata.trainers": ("prefdata.checks.template_fit",), "prefdata.models.loading": ("prefdata.base.errors",),
           "prefdata.base.specs": ("prefdata.base.errors",),
           "prefdata.models.reward": ("prefdata.models.loading", "prefdata.base.errors")}


def _covered(module: str, names: tuple[str, ...]) -> bool:
    """`module` is one of `names` or inside one ("prefdata." covers every project module)."""
    return any(module == n.rstrip(".") or module.startswith(n.rstrip(".") + ".") for n in names)


def test_lower_layers_never_import_upper_ones():
    broken = {}
    for name, path in project_modules().items():
        for who, banned in FORBIDDEN.items():
            if not _covered(name, (who,)):
                continue
            bad = sorted(m for m in imported_anywhere(path) if m != name and _covered(m, banned)
                         and m not in ALLOWED.get(who, ()))
            if bad:
                broken[name] = bad
    assert broken == {}
