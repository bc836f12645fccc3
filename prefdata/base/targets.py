"""The one loader for every "module:function" target (a rule verifier, an evaluator, a trainer plugin).

Called only by prefdata.base.registry, after it has checked that the target is registered: a spec, a
config or a run parameter never reaches this loader with a module path of its own choosing.

The module is imported only when the spec is loaded, so naming a heavy backend costs nothing until
it is used (lm-evaluation-harness's lazy targets). Every way it can fail is one line, UnusableInput
(exit 2), that names the spec and lists what was looked for: the module (and the file it came from),
the attribute in it, and whether that is callable.
"""

from __future__ import annotations

import importlib
from typing import Any

from prefdata.base.errors import UnusableInput


def _fail(what: str, spec: str, problem: str, looked: list[str]) -> UnusableInput:
    return UnusableInput(f"{what} {spec!r} cannot be loaded: {problem}; looked for {', then '.join(looked)}; "
                         f"fix the registry entry that names it (prefdata/base/registry.py), which gives module:function")


def load_target(spec: str, what: str = "target", require_callable: bool = True) -> Any:
    """'package.module:attribute' -> the attribute (a callable unless `require_callable` is False)."""
    module_name, sep, name = str(spec).partition(":")
    module_name, name = module_name.strip(), name.strip()
    if not sep or not module_name or not name:
        raise _fail(what, spec, "it is not module:function", [f"a module name before ':' and a function after it"])
    looked = [f"module {module_name!r}"]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # not found, or found but its own imports fail
        raise _fail(what, spec, f"cannot import it ({type(exc).__name__}: {exc})", looked) from None
    looked[0] += f" ({getattr(module, '__file__', None) or 'built in'})"
    looked.append(f"{name!r} in it")
    if not hasattr(module, name):
        raise _fail(what, spec, f"module {module_name!r} has no attribute {name!r}", looked)
    target = getattr(module, name)
    if require_callable and not callable(target):
        looked.append("a callable")
        raise _fail(what, spec, f"{name!r} is a {type(target).__name__}, not a function", looked)
    return target
