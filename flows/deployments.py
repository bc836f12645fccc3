"""prefect.yaml, read once for `prefdata serve`: the same deployments, schedules and parameters that
`prefect deploy` registers with a work pool, served from one local process instead.

Every deployment is checked before anything is served: its entrypoint imports and is a flow, its
parameters validate against the flow's pydantic models, its cron schedules parse. A problem is one
line naming the file and the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefdata.base.errors import UnusableInput


@dataclass
class Served:
    flow: object          # a prefect Flow
    name: str             # the deployment's name; its full name is FLOW/NAME
    parameters: dict
    schedules: list       # prefect.schedules.Schedule
    description: str | None
    tags: list[str]

    @property
    def full_name(self) -> str:
        return f"{self.flow.name}/{self.name}"

    def to_deployment(self):
        return self.flow.to_deployment(self.name, schedules=self.schedules or None, parameters=self.parameters,
                                       description=self.description, tags=self.tags)


def parameter_problem(flow, parameters: dict) -> str | None:
    """The first thing wrong with `parameters` for `flow`, as `field.path: message`; None when they fit.
    (Prefect's own check logs a multi-line error and says less.)"""
    import inspect
    import typing

    import pydantic

    signature, hints = inspect.signature(flow.fn), typing.get_type_hints(flow.fn)
    unknown = sorted(set(parameters) - set(signature.parameters))
    if unknown:
        return f"no parameter {', '.join(unknown)} (it takes {', '.join(signature.parameters)})"
    missing = [n for n, p in signature.parameters.items() if p.default is p.empty and n not in parameters]
    if missing:
        return f"{', '.join(missing)} missing"
    for name, value in parameters.items():
        try:
            pydantic.TypeAdapter(hints[name]).validate_python(value)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in (name, *first["loc"]) if not str(part).startswith(("function-",)))
            return f"{where}: {first['msg']}"
    return None


def _one(spec: dict, where: str) -> Served:
    from prefect.flows import Flow, load_flow_from_entrypoint
    from prefect.schedules import Cron

    entrypoint = spec.get("entrypoint")
    if not entrypoint or not spec.get("name"):
        raise UnusableInput(f"{where}: a deployment needs a name and an entrypoint (module.path:flow)")
    try:
        flow = load_flow_from_entrypoint(entrypoint, use_placeholder_flow=False)
    except Exception as exc:  # noqa: BLE001 - any import failure is the same problem for the user
        raise UnusableInput(f"{where}: entrypoint {entrypoint!r} does not load ({type(exc).__name__}: {exc})") from None
    if not isinstance(flow, Flow):
        raise UnusableInput(f"{where}: entrypoint {entrypoint!r} is not a flow")
    parameters = spec.get("parameters") or {}
    problem = parameter_problem(flow, parameters)
    if problem:
        raise UnusableInput(f"{where}: parameters do not fit {flow.name}: {problem}")
    schedules = []
    for s in spec.get("schedules") or []:
        if set(s) - {"cron", "timezone", "active"} or "cron" not in s:
            raise UnusableInput(f"{where}: schedules here are cron schedules: cron, timezone, active (got {sorted(s)})")
        try:
            schedules.append(Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True)))
        except Exception as exc:  # noqa: BLE001
            raise UnusableInput(f"{where}: cron {s['cron']!r}: {str(exc).splitlines()[0]}") from None
    return Served(flow, spec["name"], parameters, schedules, spec.get("description"), list(spec.get("tags") or []))


def load(path: str | Path = "prefect.yaml", only: list[str] | None = None) -> list[Served]:
    """The deployments of a prefect.yaml, checked; `only`: their FLOW/NAME full names."""
    from prefdata.base.yamlkeys import load_yaml

    path = Path(path)
    try:
        doc = load_yaml(path.read_text(), str(path))
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read it ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    specs = (doc or {}).get("deployments") if isinstance(doc, dict) else None
    if not specs:
        raise UnusableInput(f"{path}: no deployments in it")
    served = [_one(spec, f"{path}: deployment {spec.get('name')!r}") for spec in specs]
    if only:
        known = {s.full_name for s in served}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise UnusableInput(f"{path}: no deployment {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        served = [s for s in served if s.full_name in only]
    return served
