"""YAML as every file the project reads takes it: safe, and a key given twice in one mapping refused.

PyYAML keeps the last of two equal keys without a word, so `length_ratio: {max_ratio: 2.0}` followed
by `length_ratio: {waive: ...}` silently waived the check. Here the second one is an error naming
the key and its line.
"""

from __future__ import annotations

from typing import Any

import yaml

from prefdata.base.errors import UnusableInput


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


class _TwiceGiven(Exception):
    pass


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:  # the mapping's own keys; a merge (<<: *anchor) may be overridden
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _TwiceGiven(f"the key {key!r} is given twice in one mapping (lines {seen[key] + 1} and "
                              f"{key_node.start_mark.line + 1}; YAML would keep the last one silently)")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(text: str, where: str) -> Any:
    """`text` as YAML (safe types only); UnusableInput, one line naming `where`, for invalid YAML or a
    key given twice in one mapping."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _TwiceGiven as exc:
        raise UnusableInput(f"{where}: {exc}: keep one") from None
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())
        raise UnusableInput(f"{where}: not valid YAML ({first})") from None
