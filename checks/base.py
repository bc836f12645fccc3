"""The result every check returns. Checks are pure functions: frame(s) and thresholds in, CheckResult out."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml

Status = Literal["pass", "fail", "skip", "error"]
MAX_LISTED_OFFENDERS = 1000


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: Status
    metric: float | None = None
    threshold: float | None = None
    offending: tuple[str, ...] = ()
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def n_offending(self) -> int:
        return int(self.details.get("n_offending", len(self.offending)))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "metric": self.metric,
            "threshold": self.threshold,
            "n_offending": self.n_offending,
            "offending": list(self.offending[:MAX_LISTED_OFFENDERS]),
            "message": self.message,
            "details": self.details,
        }


def skip(check_id: str, reason: str, threshold: float | None = None) -> CheckResult:
    return CheckResult(check_id, "skip", threshold=threshold, message=reason)


CHECKLIST = "checklist.yaml"  # the default checklist, shipped beside the checks


@cache
def _shipped_checklist() -> dict[str, Any]:
    return yaml.safe_load(resources.files("prefdata.checks").joinpath(CHECKLIST).read_text())["checks"]


def default(check_id: str, parameter: str) -> Any:
    """A parameter's default as checks/checklist.yaml sets it (what `prefdata check --list-checks`
    prints): the one place a default the YAML names is set, so a check function's keyword default
    reads it from here instead of repeating the number."""
    return _shipped_checklist()[check_id][parameter]
