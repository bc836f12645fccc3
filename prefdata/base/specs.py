"""One syntax for what decides a preference, the same wherever one is named: `collect --judge`,
`check --scorer`, the flows' parameters (`judge: "llm:..."`, `checks.scorer`) and config files.

    llm:MODEL@URL[:TEMPLATE-vN]   an LLM judge on an OpenAI-compatible server, both orders
    llm:PATH[:TEMPLATE-vN]        the same judge run in this process (a model folder or .gguf file)
    rm:PATH                       a reward model (sequence classification, one output)
    lm:PATH                       a causal LM's own log-probabilities (the policy)       scorers only
    rule:NAME                     a registered verifier (prompt, completion) -> bool | float; NAME
                                  or its own module:function (prefdata/base/registry.py)
    verdicts:FILE                 verdicts a judge already made                          scorers only
    world                         the demo world's verifier, rule:world

A template name is NAME-vN and starts with a letter, so `:TEMPLATE-vN` never reads as a port.
Older spellings are still read, each with a one-line notice naming the new one (`judge:MODEL@URL`,
check --scorer's spelling before the two commands shared this syntax). Parsing only: whether a path
holds a model or a verifier is registered is checked by the commands that load them.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Callable

from prefdata.base.errors import UnusableInput

WORLD = "world"
KINDS = ("llm", "rm", "lm", "rule", "verdicts")
RENAMED = {"judge": "llm"}  # old kind -> its name now
USAGE = {
    "llm": "llm:MODEL@http://HOST:PORT/v1 or llm:PATH, optionally :TEMPLATE-vN",
    "rm": "rm:PATH", "lm": "lm:PATH", "rule": "rule:NAME", "verdicts": "verdicts:FILE",
}
_TEMPLATE = r"(?::(?P<template>[A-Za-z][\w.-]*-v\d+))?"
_SERVED = re.compile(r"^(?P<model>.+)@(?P<url>https?://.+?)" + _TEMPLATE + "$")
_LOCAL = re.compile(r"^(?P<model>.+?)" + _TEMPLATE + "$")
_ANY_URL = re.compile(r"@[a-z][\w+.-]*://")


@dataclass(frozen=True)
class Spec:
    kind: str                    # one of KINDS
    target: str                  # a model name or path, module:function, or a file
    base_url: str | None = None  # llm: the server; None runs the model in this process
    template: str | None = None  # llm: NAME-vN when the spec names one


def _stderr_notice(message: str) -> None:
    sys.stderr.write(f"prefdata: note: {message}\n")


def parse_spec(spec: str, allowed: tuple[str, ...], option: str,
               notice: Callable[[str], None] | None = None) -> Spec:
    """`spec` as a Spec, one of the `allowed` kinds; UnusableInput (one line naming the allowed
    spellings) otherwise. `option` names where it came from (--judge, --scorer, judge...); `notice`
    says an old spelling's new name (default: one line on stderr)."""
    usage = "; ".join(USAGE[k] for k in allowed) + (f"; or {WORLD}" if "rule" in allowed else "")
    if spec == WORLD and "rule" in allowed:
        return Spec("rule", WORLD)
    kind, sep, target = spec.partition(":")
    if kind in RENAMED:
        (notice or _stderr_notice)(f"{option} {spec!r}: '{kind}:' is now '{RENAMED[kind]}:', as everywhere a judge is named "
               f"(the old spelling still works)")
        kind = RENAMED[kind]
    if not sep or not target or kind not in allowed:
        raise UnusableInput(f"{option} {spec!r}: use {usage}")
    if kind != "llm":
        return Spec(kind, target)
    if _ANY_URL.search(target):
        found = _SERVED.match(target)
        if not found:
            raise UnusableInput(f"{option} {spec!r}: a served judge is llm:MODEL@http://HOST:PORT/v1 "
                                "(optionally :TEMPLATE-vN)")
        return Spec("llm", found["model"], found["url"], found["template"])
    found = _LOCAL.match(target)
    return Spec("llm", found["model"], None, found["template"])
