"""The commands' options, built from the one place each is defined, as TRL's parser builds its
command line from its config dataclasses: a field of a flow's parameter model (flows/params.py)
gives the option its default and its help text. A default shared with a module too heavy
for `--help` is read from prefdata.base.defaults. tests/test_options.py finds any default a command
writes out instead (and names the few that are the command's own, each with its reason).
"""

from __future__ import annotations

from typing import Any

import typer


def option(model: type, field: str, *flags: str, **settings: Any) -> Any:
    """`typer.Option` for a pydantic `model`'s `field`: the field's default, and its description as
    help. `flags`: the option's names where they are not --FIELD; `settings`: typer's other settings
    (a metavar). Its bounds stay the model's: a bad value fails where the command builds the model,
    in one line naming the field, not in click's usage block."""
    spec = model.model_fields[field]
    if spec.is_required():
        raise TypeError(f"{model.__name__}.{field} has no default for an option to take")
    return typer.Option(spec.get_default(call_default_factory=True), *flags, help=spec.description, **settings)
