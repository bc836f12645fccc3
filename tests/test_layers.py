"""The layers of docs/architecture.md hold. Its table is the rule: every module of the repository is
listed in the row of its layer, and every import a module makes, at load or inside a function,
relative or absolute, goes to its own layer or to one the row says it may import. No two modules
import each other; Prefect stays in the flows and the commands."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"prefdata": "prefdata", "checks": "prefdata.checks", "trainers": "prefdata.trainers", "flows": "prefdata.flows"}
ROOT = "prefdata"  # prefdata/__init__.py: the version, nothing else; any layer may read it


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


def imports_of(name: str, source: str, modules: set[str]) -> set[str]:
    """The project modules a module's source imports, at load or inside a function: `import a.b`,
    `from a import b` (b itself when it is a module), relative imports resolved against `name`.
    A name that is not a module counts as the nearest module above it (`from a.b import f` -> a.b).
    Other libraries are left out."""
    package = name if f"{name}.__init__" in modules or any(m.startswith(name + ".") for m in modules) else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
    return found


def imported_libraries_at_load(path: Path) -> set[str]:
    """Top-level names of the libraries a file imports when it loads, `if TYPE_CHECKING:` blocks
    included, imports inside functions not (they run on use)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names.add(child.module.split(".")[0])
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def imported_libraries_anywhere(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def layer_table() -> list[dict]:
    """docs/architecture.md's table: per layer, its folder, its modules and what it may import,
    each cell's `backticked` names."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The layers", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 4 or cells[0] in ("layer", "---"):
            continue
        names = [re.findall(r"`([^`]+)`", c) for c in cells]
        rows.append({"layer": names[0][0], "folder": names[1][0].rstrip("/"), "modules": set(names[2]),
                     "may_import": set(names[3])})
    return rows


def package_of(row: dict) -> str:
    folder = row["folder"]
    for source, package in PACKAGES.items():
        if folder == source:
            return package
    return folder.replace("/", ".")


def layers_by_module(rows: list[dict], modules: dict[str, Path]) -> dict[str, str]:
    """module -> its layer, by the folder it lives in."""
    packages = {package_of(row): row["layer"] for row in rows}
    found = {}
    for name in modules:
        owners = [p for p in packages if name == p or name.startswith(p + ".")]
        if owners:
            found[name] = packages[max(owners, key=len)]
    return found


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


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    names = set(modules) | {f"{n}.__init__" for n, p in modules.items() if p.name == "__init__.py"}
    graph = {}
    for name, path in modules.items():
        found = imports_of(name, path.read_text(encoding="utf-8"), names)
        # importing a.b.c loads the packages a and a.b first: their __init__ is no edge of its own
        graph[name] = {m for m in found if not name.startswith(m + ".")}
    return graph


# -- the tools above, on code written to trip them ----------------------------------------------

def test_every_kind_of_import_is_counted():
    modules = {"prefdata", "prefdata.data", "prefdata.data.store", "prefdata.data.records", "prefdata.gate",
               "prefdata.gate.runner", "prefdata.gate.report", "prefdata.base", "prefdata.base.errors"}
    source = (
        "from prefdata.data import store\n"          # a module named by from-import
        "from . import report\n"                      # relative, a sibling
        "from ..base.errors import UnusableInput\n"  # relative, a name inside a module
        "def f():\n"
        "    import prefdata.data.records as r\n"   # inside a function
        "import numpy\n"                              # another library: not ours
    )
    assert imports_of("prefdata.gate.runner", source, modules) == {
        "prefdata.data.store", "prefdata.gate.report", "prefdata.base.errors", "prefdata.data.records"}
    assert imports_of("prefdata.gate.runner", "from prefdata import __version__\n", modules) == {"prefdata"}


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


# -- the rules ------------------------------------------------------------------------------------

def test_the_table_lists_every_module_in_its_folder():
    """docs/architecture.md matches the code: each row's modules are exactly those in its folder."""
    rows = layer_table()
    modules = project_modules()
    assert {r["layer"] for r in rows} >= {"base", "models", "data", "checks", "collect", "gate", "trainers", "flows",
                                          "commands"}
    for row in rows:
        package = package_of(row)
        on_disk = {n[len(package) + 1:] for n in modules if n.startswith(package + ".")}
        # a sub-package of another layer (prefdata.data inside prefdata) is that layer's, not this one's
        on_disk = {m for m in on_disk if not any(package_of(other).startswith(f"{package}.{m.split('.')[0]}")
                                                  for other in rows if other is not row)}
        assert row["modules"] == on_disk, f"{row['layer']}: table {sorted(row['modules'])}, folder {sorted(on_disk)}"
    owned = layers_by_module(rows, modules)
    assert set(modules) - set(owned) - {ROOT} == set(), "modules in no layer"


def test_every_import_goes_to_a_layer_its_row_allows():
    rows = {r["layer"]: r for r in layer_table()}
    modules = project_modules()
    layer_of = layers_by_module(list(rows.values()), modules)
    packages = {layer: package_of(row) for layer, row in rows.items()}
    broken = {}
    for name, targets in import_graph().items():
        if name == ROOT:
            continue
        mine = layer_of[name]
        allowed = rows[mine]["may_import"]
        if "everything" in allowed:
            continue
        for target in targets:
            theirs = layer_of.get(target)
            if target == ROOT or theirs == mine or theirs in allowed:
                continue
            relative = target[len(packages[theirs]) + 1:] if theirs else target
            if f"{theirs}.{relative}" in allowed:  # one module of a layer, named in the row
                continue
            broken.setdefault(name, []).append(target)
    assert broken == {}


def test_no_two_modules_import_each_other_even_inside_a_function():
    graph = import_graph()
    assert cycle(graph) is None, "import cycle: " + " -> ".join(cycle(graph))


def test_the_root_module_holds_only_the_version():
    assert import_graph()[ROOT] == set()


def test_collection_steps_never_touch_the_store():
    """Sampling, pairing and judging take and return records; only collection writes a draft."""
    graph = import_graph()
    for step in ("sampling", "pairing", "judging", "routing"):
        assert "prefdata.data.store" not in graph[f"prefdata.collect.{step}"], step


def test_prefect_stays_in_the_flows_and_the_commands():
    """Flows only wire: the library below them works without Prefect."""
    rows = layer_table()
    layer_of = layers_by_module(rows, project_modules())
    offenders = sorted(name for name, path in project_modules().items()
                       if layer_of.get(name) not in ("flows", "commands") and "prefect" in imported_libraries_anywhere(path))
    assert offenders == []


# The modules that import a heavy library when they load: the trainer methods (the registry loads a
# method's module only when it runs) and the flows (Prefect). `prefdata --help` loads none of them
# (tests/test_cli.py).
HEAVY = {"torch", "trl", "transformers", "peft", "accelerate", "datasets", "great_expectations", "prefect", "vllm",
         "argilla", "dask", "distributed"}
HEAVY_AT_LOAD = {"prefdata.trainers.dpo", "prefdata.trainers.grpo", "prefdata.trainers.rm", "prefdata.trainers.sft",
                 "prefdata.trainers.ppo_math", "prefdata.flows.collect", "prefdata.flows.gate",
                 "prefdata.flows.progress", "prefdata.flows.train"}


def test_heavy_libraries_load_only_where_the_table_says():
    found = {name for name, path in project_modules().items() if imported_libraries_at_load(path) & HEAVY}
    assert found <= HEAVY_AT_LOAD, sorted(found - HEAVY_AT_LOAD)


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


def test_library_invariants_raise_real_errors_not_assert():
    """`python -O` strips assert statements: an invariant the library relies on must raise."""
    found = [f"{path.relative_to(REPO)}:{node.lineno}" for path in project_modules().values()
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Assert)]
    assert found == []


def test_no_layer_reaches_into_another_layers_private_names():
    """`from x import _private` across layers ties one layer to another's insides: a name used
    across layers is public (inside a layer, modules share helpers)."""
    rows = layer_table()
    modules = project_modules()
    layer_of = layers_by_module(rows, modules)
    names = set(modules) | {f"{n}.__init__" for n, p in modules.items() if p.name == "__init__.py"}
    found = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if not alias.name.startswith("_") or alias.name.startswith("__"):
                    continue
                origin = imports_of(name, ast.unparse(ast.ImportFrom(node.module, [alias], node.level)), names)
                if any(layer_of.get(o) != layer_of.get(name) for o in origin):
                    found.append(f"{name}: {alias.name} from {sorted(origin)}")
    assert found == []


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def test_no_layer_names_in_its_code_a_module_it_may_not_import():
    """A string that names a project module (`"prefdata.world:verify"`, a hint's example) ties a layer to
    that module as an import would: a spec shorthand in base once named the world's verifier, which
    belongs to the registry's entry points (pyproject.toml, `prefdata.verifiers`). Docstrings may
    name anything."""
    rows = {r["layer"]: r for r in layer_table()}
    modules = project_modules()
    layer_of = layers_by_module(list(rows.values()), modules)
    packages = {layer: package_of(row) for layer, row in rows.items()}
    named = re.compile(r"\bprefdata(?:\.\w+)+")
    found = []
    for name, path in modules.items():
        mine = layer_of.get(name)
        allowed = rows[mine]["may_import"] if mine else {"everything"}
        if "everything" in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
                continue
            for text in named.findall(node.value):
                target = text
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                theirs = layer_of.get(target)
                if target == ROOT or theirs in (mine, None) or theirs in allowed:
                    continue
                if f"{theirs}.{target[len(packages[theirs]) + 1:]}" in allowed:
                    continue
                found.append(f"{name}:{node.lineno}: {text!r} ({theirs})")
    assert found == []


# `.generate(` calls outside the model layer that are not transformers' generate, each with its reason.
OTHER_ENGINES = {
    # vLLM's in-process engine (`vllm.LLM.generate`): its own batching, sampling and stop handling,
    # which prefdata.models.generation does not drive
    ("prefdata.collect.sampling", "self._llm"),
}


def test_models_load_and_chats_render_only_in_the_model_layer():
    """Every model path is loaded by prefdata.models.loading (a .gguf file becomes its converted folder
    there), every chat is rendered by prefdata.models.chat and every causal LM decodes through
    prefdata.models.generation: no `from_pretrained`, `apply_chat_template`, transformers `pipeline` or
    `.generate(` call anywhere else (but the engines in OTHER_ENGINES)."""
    found = []
    for name, path in project_modules().items():
        if name.startswith("prefdata.models."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr in ("from_pretrained", "apply_chat_template")
                    or (node.func.attr == "pipeline" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "transformers")
                    or (node.func.attr == "generate" and (name, ast.unparse(node.func.value)) not in OTHER_ENGINES)):
                found.append(f"{name}:{node.lineno}: {node.func.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers") and any(
                    alias.name == "pipeline" for alias in node.names):
                found.append(f"{name}:{node.lineno}: import pipeline")
    assert found == []
