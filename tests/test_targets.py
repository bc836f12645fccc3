"""One loader for every "module:function" spec, and one error line that says what it looked for."""

from __future__ import annotations

import sys

import pytest

from prefdata.base.errors import UnusableInput
from prefdata.base.targets import load_target


def test_loads_the_named_function():
    from prefdata.world import verify

    assert load_target("prefdata.world:verify") is verify
    assert load_target(" prefdata.world : verify ") is verify


@pytest.mark.parametrize("spec, needles", [
    ("no_such_module_xyz:f", ["'no_such_module_xyz:f' cannot be loaded", "cannot import it",
                              "No module named 'no_such_module_xyz'", "looked for module 'no_such_module_xyz'"]),
    ("prefdata.world:no_such", ["module 'prefdata.world' has no attribute 'no_such'", "world", "'no_such' in it"]),
    ("prefdata.base.targets:__doc__", ["'__doc__' is a str, not a function", "then a callable"]),
    ("prefdata.world", ["it is not module:function"]),
    (":verify", ["it is not module:function"]),
    ("prefdata.world:", ["it is not module:function"]),
])
def test_each_failure_is_one_line_naming_the_spec_and_what_was_looked_for(spec, needles):
    with pytest.raises(UnusableInput) as caught:
        load_target(spec, what="verifier")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"verifier {spec!r}") and "fix the registry entry that names it" in message
    for needle in needles:
        assert needle in message


def test_the_module_path_is_named_when_the_attribute_is_missing():
    import prefdata.world

    with pytest.raises(UnusableInput, match="no attribute") as caught:
        load_target("prefdata.world:no_such")
    assert prefdata.world.__file__ in str(caught.value)


def test_a_non_callable_is_returned_when_asked():
    assert load_target("prefdata.base.targets:__doc__", require_callable=False) == sys.modules["prefdata.base.targets"].__doc__


def test_collection_and_the_collect_command_use_it():
    from prefdata.commands.collect import judge_params
    from prefdata.collect.collection import import_target

    assert import_target("prefdata.world:verify") is load_target("prefdata.world:verify")
    with pytest.raises(UnusableInput, match="--judge rule 'prefdata.world:no_such' is not a registered verifier"):
        judge_params("rule:prefdata.world:no_such")  # a module path that is no registered entry: never imported
