"""One syntax for what decides a preference, the same wherever one is named: `collect --judge`,
`check --scorer`, the trainers' `rewards:`, the flows' parameters (`judge: "llm:..."`,
`checks.scorer`) and config files. A spec is KIND:TARGET, and KIND names a registered backend
(prefdata.base.registry, kind "backend"). prefdata's own (prefdata/gate/backends.py):

    spec                          what decides                                        roles
    llm:MODEL@URL[:TEMPLATE-vN]   an LLM judge on an OpenAI-compatible server,        judge, scorer
                                  both orders
    llm:PATH[:TEMPLATE-vN]        the same judge run in this process (a model folder or .gguf file)
    rm:PATH                       a reward model (sequence classification, one        judge, scorer, reward
                                  output)
    lm:PATH                       a causal LM's own log-probabilities (the policy)    scorer
    rule:NAME                     a registered verifier (prompt, completion) ->       judge, scorer, reward
                                  bool | float; NAME or its own module:function
    verdicts:FILE                 verdicts a judge already made                       scorer
    world                         the demo world's verifier, rule:world

The roles are the places a spec is named: "judge" (`collect --judge` and `--then-judge`, the collect
flow's `judge`), "scorer" (`check --scorer`, `publish --scorer`, the gate flow's `checks.scorer`),
"reward" (`rewards:` of grpo and ppo). Another package adds a backend as an entry point in the group
`prefdata.backends`, the operator under `[backends]` in the file PREFDATA_REGISTRY points at; either
is then usable in every place of its roles, with no other file changed.

A backend is an object: an instance of `Backend` below, or any object with the same attributes.

    roles                        the roles it offers (some of ROLES)
    usage                        how a spec of it is written, for messages ("rm:PATH")
    parse(spec, option)          more syntax inside the target (llm's @URL and :TEMPLATE-vN); default none
    check(spec, role, option)    what can be told before any work (a missing folder, an unregistered
                                 verifier): UnusableInput, one line naming `option`; returns the spec as
                                 the run uses it (a path made absolute, a verifier's name its module:function)
    judge(spec, options)         role judge: an object with `judge(items: list[PairToJudge]) -> list[Verdict]`
                                 (prefdata.collect.judging), one Verdict per item, never raising for a pair;
                                 `options` may hold max_tokens, requests_in_flight, timeout_s, max_retries
                                 and api_key_env (the flow's Judge fields)
    scorer(spec, pairs, comparisons, sample_size)
                                 role scorer: a polars frame `id, preferred` (chosen | rejected | tie; null:
                                 undecided) for checks.direction. Optional: without it, check --scorer judges
                                 a sample of the pairs with judge(spec, {}), chosen shown as A
    reward(spec)                 role reward: a function (prompts, completions) -> one float per completion;
                                 its __name__ names it in the trainers' logs
    keeps_model(spec)            whether its judge holds a model in this process, kept between chunks
    hackable                     role reward: whether a policy could game it (a learned reward can, a rule
                                 cannot); the trainers' KL-collapse guard reads it
    reads_pairs                  role scorer: whether it reads the pairs' text (a verdicts file does not): a
                                 version checked shard by shard takes only a scorer that does not

Every score a backend turns into a verdict goes through the one rule of prefdata.base.verdicts.

A template name is NAME-vN and starts with a letter, so `:TEMPLATE-vN` never reads as a port. Older
spellings are still read, each with a one-line notice naming the new one (`judge:MODEL@URL`, check
--scorer's spelling before the two commands shared this syntax). Parsing reads the syntax only and
imports no model library (it loads the named backend's object; prefdata's import nothing heavy at
load): whether a path holds a model or a verifier is registered is the backend's `check`, which the
commands run before they load anything.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from prefdata.base.errors import UnusableInput

WORLD = "world"  # the shorthand of rule:world
KINDS = ("llm", "rm", "lm", "rule", "verdicts")  # prefdata's own backends (pyproject.toml), in the order messages list them
RENAMED = {"judge": "llm"}  # old kind -> its name now
ROLES = {
    "judge": "collect --judge and --then-judge, the collect flow's judge",
    "scorer": "check --scorer and publish --scorer, the gate flow's checks.scorer",
    "reward": "the rewards of grpo and ppo",
}


@dataclass(frozen=True)
class Spec:
    kind: str                    # a registered backend's name
    target: str                  # a model name or path, module:function, or a file
    base_url: str | None = None  # llm: the server; None runs the model in this process
    template: str | None = None  # llm: NAME-vN when the spec names one
    text: str = field(default="", compare=False, repr=False)  # the spec as written, for messages

    @property
    def written(self) -> str:
        return self.text or f"{self.kind}:{self.target}"


class Backend:
    """The defaults of a backend (see the module's doc); a subclass sets `roles` and `usage` and gives the
    factories of its roles."""

    roles: tuple[str, ...] = ()
    usage: str = ""
    hackable: bool = True
    reads_pairs: bool = True

    def parse(self, spec: Spec, option: str) -> Spec:
        return spec

    def check(self, spec: Spec, role: str, option: str) -> Spec:
        return spec

    def keeps_model(self, spec: Spec) -> bool:
        return False


def _stderr_notice(message: str) -> None:
    sys.stderr.write(f"prefdata: note: {message}\n")


def silent(message: str) -> None:
    """A notice nobody needs twice (a spec checked already, parsed again)."""


def _order(name: str) -> tuple[int, str]:
    return (KINDS.index(name) if name in KINDS else len(KINDS), name)


def backend(kind: str, where: str = "backend") -> Any:
    """The registered backend named `kind`, its module imported now; one line when it is not registered,
    cannot be loaded or is no backend (no roles or no usage)."""
    from prefdata.base.registry import load

    found = load("backend", kind, where)
    roles = getattr(found, "roles", None)
    if (isinstance(roles, str) or not isinstance(roles, (tuple, list, set, frozenset)) or not roles
            or not set(roles) <= set(ROLES) or not isinstance(getattr(found, "usage", None), str)):
        raise UnusableInput(f"{where} {kind!r}: the registered backend is a {type(found).__name__} without roles "
                            f"(some of {', '.join(ROLES)}) and a usage string; see prefdata/base/specs.py for what a "
                            "backend is")
    return found


def offering(role: str | None) -> dict[str, Any]:
    """name -> backend, for every registered backend that offers `role` (None: any), prefdata's own first
    in the order of KINDS. One that cannot be loaded is left out here (naming it says why)."""
    from prefdata.base.registry import entries

    found = {}
    for name in sorted(entries("backend"), key=_order):
        try:
            loaded = backend(name)
        except UnusableInput:
            continue
        if role is None or role in loaded.roles:
            found[name] = loaded
    return found


def usage(role: str | None, backends: dict[str, Any] | None = None) -> str:
    """How the specs of `role` are written, from the registry: "llm:...; rm:PATH; rule:NAME; or world"."""
    backends = offering(role) if backends is None else backends
    text = "; ".join(b.usage for b in backends.values()) or "no registered backend offers this"
    return text + (f"; or {WORLD}" if "rule" in backends else "")


def _offers(kind: str, role: str | None) -> bool:
    from prefdata.base.registry import entries

    if kind not in entries("backend"):
        return False
    try:
        return role is None or role in backend(kind).roles
    except UnusableInput:
        return False


def parse_spec(spec: str, role: str | None, option: str, notice: Callable[[str], None] | None = None) -> Spec:
    """`spec` as a Spec whose kind is a registered backend offering `role` (None: any role); UnusableInput
    otherwise, one line naming `option` (--judge, --scorer, rewards:, judge...) and how the specs of the
    role are written, from the registry. `notice` says an old spelling's new name (default: one line on
    stderr)."""
    if role is not None and role not in ROLES:
        raise ValueError(f"unknown role {role!r}")  # a programming error, not a user's
    text = str(spec)
    if text == WORLD and _offers("rule", role):
        return Spec("rule", WORLD, text=text)
    kind, sep, target = text.partition(":")
    if kind in RENAMED:
        (notice or _stderr_notice)(f"{option} {text!r}: '{kind}:' is now '{RENAMED[kind]}:', as everywhere a judge is "
                                   f"named (the old spelling still works)")
        kind = RENAMED[kind]
    if not sep or not target:
        raise UnusableInput(f"{option} {text!r}: use {usage(role)}")
    from prefdata.base.registry import entries, refusal

    if kind not in entries("backend"):
        backends = offering(role)
        raise refusal("backend", kind, f"{option} {text!r}:", list(backends),
                      what=f"{role or 'judge, scorer or reward'} backend", use=usage(role, backends))
    found = backend(kind, f"{option} {text!r}:")
    if role is not None and role not in found.roles:
        raise UnusableInput(f"{option} {text!r}: use {usage(role)} ('{kind}:' is a {' and '.join(found.roles)} "
                            f"backend, not a {role})")
    parse = getattr(found, "parse", None)
    parsed = Spec(kind, target, text=text)
    return parse(parsed, option) if parse is not None else parsed


def check_spec(spec: str, role: str, option: str, notice: Callable[[str], None] | None = None) -> Spec:
    """parse_spec, then the backend's pre-flight check (a missing folder, an unregistered verifier: one
    line naming `option`, exit 2): the spec as the run uses it."""
    parsed = parse_spec(spec, role, option, notice)
    check = getattr(backend(parsed.kind, option), "check", None)
    return check(parsed, role, option) if check is not None else parsed
