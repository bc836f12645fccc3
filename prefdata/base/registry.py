"""What a spec, a config or a flow run's parameters may name: the one allow-list the operator controls.

A run parameter is data, never code. Anyone who can create a flow run (the Prefect UI or API, which
OSS Prefect does not authenticate, or `prefdata run --param`) and anyone who writes a config file
may name only what is registered here, never an arbitrary `module:function`:

- **Python callables and objects**, by kind (`KINDS`): verifiers (`rule:NAME` judges, scorers and
  rewards, the simulated annotators' truth), repair rules, evaluators, trainer plugins, and backends
  (the KIND of every `KIND:TARGET` judge, scorer and reward spec: `llm`, `rm`, `lm`, `rule`,
  `verdicts`, and whatever another package or the operator adds; prefdata.base.specs says what a
  backend object is). Each kind is one entry-point group. prefdata's own entries are its built-ins (pyproject.toml); another installed
  package adds names in the same groups; the operator adds names in a TOML file that the environment
  variable PREFDATA_REGISTRY points at (the worker's environment: a run cannot set it):

      [verifiers]
      math = "my_rules:verify_math"        # then: judge: "rule:math"

      [backends]
      myjudge = "my_judges:backend"        # then: --judge myjudge:TARGET, --scorer myjudge:TARGET

      [allow]                              # what a deployment's run may name (flows only)
      api_key_env = ["OPENAI_API_KEY"]     # environment variables a run may read a key from
      addresses = ["https://api.openai.com/v1", "tcp://10.1.2.3:8786"]  # besides loopback
      paths = ["/data/prefdata"]           # besides the working folder and PREFDATA_STORE

  A registered target may also be named by its `module:function` itself (`rule:prefdata.world:verify`
  is `rule:world`); anything else is refused in one line that lists the names there are.
- **What a deployment's run may reach** (`check_env_name`, `check_address`, `check_path`): the
  environment variables it may read a key from, the servers it may send data or a key to (loopback,
  or `[allow] addresses`), and the files it may read or write (the working folder, the store, or
  `[allow] paths`). A command a person runs at the terminal reaches what that person can.

Entries load lazily (lm-evaluation-harness's registry): naming a kind's members imports nothing.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from prefdata.base.errors import UnusableInput

FILE_ENV = "PREFDATA_REGISTRY"
OWN_DISTRIBUTION = "prefdata"  # whose entry points are the built-ins
ALLOW_KEYS = ("api_key_env", "addresses", "paths")  # the lists of the file's [allow] table


@dataclass(frozen=True)
class Kind:
    section: str       # the registry file's table, and the entry-point group's suffix
    what: str          # how messages name one
    callable: bool = True

    @property
    def group(self) -> str:
        return f"prefdata.{self.section}"


KINDS = {
    "verifier": Kind("verifiers", "verifier (prompt, completion) -> bool | float"),
    "repair": Kind("repairs", "repair rule (prompt, reply) -> reply"),
    "evaluator": Kind("evaluators", "evaluator (model folder) -> figures"),
    "trainer": Kind("trainers", "trainer plugin", callable=False),
    "backend": Kind("backends", "judge backend (the NAME of a NAME:TARGET judge, scorer or reward spec)",
                    callable=False),
    "check": Kind("checks", "check (a checks.registry.Check)", callable=False),
}


@dataclass(frozen=True)
class Entry:
    name: str
    target: str   # "module:attribute"
    source: str   # "prefdata" (built in), another distribution's name, or the registry file's path


def _kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise ValueError(f"unknown registry kind {kind!r}")  # a programming error, not a user's
    return KINDS[kind]


def _file() -> Path | None:
    path = os.environ.get(FILE_ENV)
    return Path(path).expanduser() if path else None


def _read_file() -> dict:
    """The operator's registry file as a mapping ({} without one); one line when it cannot be used."""
    import tomllib

    path = _file()
    if path is None:
        return {}
    if not path.is_file():
        raise UnusableInput(f"{FILE_ENV}={path}: no such file; point it at a TOML registry file or unset it")
    if path.stat().st_size > 1 << 20:
        raise UnusableInput(f"{FILE_ENV}={path}: over 1 MiB, not a registry file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"{FILE_ENV}={path}: not valid TOML ({exc}); fix the file") from None
    known = {k.section for k in KINDS.values()} | {"allow"}
    for section, value in data.items():
        if section not in known or not isinstance(value, dict):
            raise UnusableInput(f"{FILE_ENV}={path}: unknown table [{section}]; use {', '.join(sorted(known))}")
        if section != "allow" and not all(isinstance(v, str) and ":" in v for v in value.values()):
            raise UnusableInput(f"{FILE_ENV}={path}: every entry of [{section}] is NAME = \"module:function\"")
    for key, value in data.get("allow", {}).items():
        if key not in ALLOW_KEYS or not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise UnusableInput(f"{FILE_ENV}={path}: [allow] takes lists of strings named {', '.join(ALLOW_KEYS)}")
    return data


def entries(kind: str) -> dict[str, Entry]:
    """name -> Entry: prefdata's built-ins first; another package's and the registry file's may add names,
    never shadow one (the file saying so is refused, a package's duplicate is left out)."""
    from importlib.metadata import entry_points

    spec = _kind(kind)
    found: dict[str, Entry] = {}
    points = list(entry_points(group=spec.group))
    points.sort(key=lambda ep: (getattr(ep.dist, "name", "") or "") != OWN_DISTRIBUTION)  # built-ins first
    for ep in points:
        found.setdefault(ep.name, Entry(ep.name, ep.value, getattr(ep.dist, "name", None) or "?"))
    path = _file()
    for name, target in _read_file().get(spec.section, {}).items():
        if name in found:
            raise UnusableInput(f"{FILE_ENV}={path}: [{spec.section}] {name} is already registered by "
                                f"{found[name].source} ({found[name].target}); choose another name")
        found[name] = Entry(name, target, str(path))
    return found


def refusal(kind: str, spec: str, where: str, names, what: str | None = None,
            use: str | None = None) -> UnusableInput:
    """The one-line refusal of a name that is not registered: the closest of `names` (did you mean), what
    to use instead (`use`, else one of `names`), and how to register one. `what` names a member in the
    message (default: the kind's own words): a spec's kind says which role it was asked for."""
    import difflib

    names = list(names)
    near = difflib.get_close_matches(spec, names, n=1, cutoff=0.7)  # 0.6 offers 'rule' for 'oracle'
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    group = _kind(kind)
    target = "module:function" if group.callable else "module:object"
    return UnusableInput(
        f"{where} {spec!r} is not a registered {what or group.what}{hint}: use {use or 'one of ' + (', '.join(names) or 'none yet')}; "
        f"to add one, name its {target} under [{group.section}] in the file {FILE_ENV} points at, or as an "
        f"entry point in the group {group.group}")


def resolve(kind: str, spec: str, where: str) -> str:
    """A registered name, or a registered entry's own module:function, -> that "module:function";
    UnusableInput (one line: the names there are, how to register one) for anything else."""
    known = entries(kind)
    spec = str(spec).strip()
    if spec in known:
        return known[spec].target
    if spec in {e.target for e in known.values()}:
        return spec
    raise refusal(kind, spec, where, sorted(known))


def load(kind: str, spec: str, where: str):
    """The registered object a spec names, imported now (prefdata.base.targets, the one loader)."""
    from prefdata.base.targets import load_target

    return load_target(resolve(kind, spec, where), what=where, require_callable=_kind(kind).callable)


# ---- what a deployment's run may reach ---------------------------------------------------------------

def allowed(key: str) -> list[str]:
    return list(_read_file().get("allow", {}).get(key, []))


def check_env_name(name: str, where: str) -> None:
    """A run may read a key only from an environment variable the operator listed."""
    if name not in allowed("api_key_env"):
        raise UnusableInput(f"{where} {name!r}: a run may read an API key only from an environment variable listed "
                            f"in [allow] api_key_env of the file {FILE_ENV} points at (listed: "
                            f"{', '.join(allowed('api_key_env')) or 'none'})")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(url: str, where: str) -> None:
    """A run may send data (and a key) to a loopback server, or to one whose address starts with an
    `[allow] addresses` entry."""
    text = str(url).strip()
    parts = urlsplit(text)
    if parts.hostname and _loopback(parts.hostname):
        return
    if text.startswith("local:") or any(_same_prefix(text, a) for a in allowed("addresses")):
        return
    raise UnusableInput(f"{where} {text!r}: a run may reach only loopback servers or the addresses listed in "
                        f"[allow] addresses of the file {FILE_ENV} points at")


def _same_prefix(url: str, allowed_url: str) -> bool:
    """url is allowed_url or below it: "http://h:1/v1" allows "http://h:1/v1/x", not "http://h:1/v10"
    nor "http://h:10"."""
    base = allowed_url.rstrip("/")
    return url == base or url.startswith(base + "/")


def path_roots() -> list[Path]:
    roots = [Path.cwd(), *map(Path, allowed("paths"))]
    if os.environ.get("PREFDATA_STORE"):
        roots.append(Path(os.environ["PREFDATA_STORE"]))
    return [r.expanduser().resolve() for r in roots]


def check_path(path: str, where: str) -> None:
    """A run may read or write only inside the working folder, the store, or an `[allow] paths` root
    (links resolved: a link inside that points out is outside)."""
    resolved = Path(path).expanduser().resolve()
    roots = path_roots()
    if any(resolved == r or r in resolved.parents for r in roots):
        return
    raise UnusableInput(f"{where} {str(path)!r}: a run may read and write only inside the working folder, the store "
                        f"or a root listed in [allow] paths of the file {FILE_ENV} points at "
                        f"({', '.join(map(str, roots))})")
