"""Pull submitted responses from Argilla into prefdata's long votes table.

One row per submitted response: pair_id (the record id), annotator (the Argilla username), vote
(a/b/tie in terms of the pair's own response_a/response_b, mapped back through the order the
record showed them in), rationale, time (when the response was last changed), plus shown (the
letter the annotator clicked) and order (ab/ba), so position bias can be measured, and label: the
pushed row's own label in the same a/b/tie terms (null when it had none; "a" for a label audit of
a version's pairs), which `prefdata check NAME@VERSION --votes` holds the votes against. Drafts and
discarded responses are not votes and are left out.

Annotators can read only their own queue: pulling needs an owner key, or an admin of the workspace.
"""

from __future__ import annotations

import warnings
from datetime import datetime

import polars as pl

from prefdata.argilla.client import argilla_errors, connect, resolve
from prefdata.argilla.push import SHOWN
from prefdata.base.errors import UnusableInput

VOTES_SCHEMA = {
    "pair_id": pl.String, "annotator": pl.String, "vote": pl.String, "rationale": pl.String,
    "time": pl.Datetime("us", "UTC"), "shown": pl.String, "order": pl.String, "record_status": pl.String,
    "label": pl.String,
}


def _usernames(client, workspace_id) -> dict[str, str]:
    """user id -> username. Owners may list every user; a workspace admin only its members."""
    http = client.http_client
    response = http.get("/api/v1/users")
    if response.status_code == 403:
        response = http.get(f"/api/v1/workspaces/{workspace_id}/users")
    response.raise_for_status()
    names = {item["id"]: item["username"] for item in response.json()["items"]}
    me = client.me
    names[str(me.id)] = me.username
    return names


def _time(value: str) -> datetime:
    # the server sends naive UTC timestamps
    return datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)


def pull_votes(*, url: str | None, api_key: str | None, dataset: str, workspace: str = "prefdata") -> pl.DataFrame:
    """The submitted votes of a dataset pushed by `push_pairs`, as a long votes table."""
    url, api_key = resolve(url, api_key)
    client = connect(url, api_key, "pull")
    with argilla_errors(url, f"pull from {workspace}/{dataset}"):
        with warnings.catch_warnings():  # an absent dataset is reported below, in one line
            warnings.simplefilter("ignore")
            ds = client.datasets(name=dataset, workspace=workspace)
        if ds is None:
            raise UnusableInput(f"pull: no dataset {dataset!r} in workspace {workspace!r} at {url}; "
                                "check --dataset/--workspace (push creates it)")
        names = _usernames(client, ds.workspace.id)
        rows, offset = [], 0
        while True:
            response = client.http_client.get(f"/api/v1/datasets/{ds.id}/records",
                                              params={"include": "responses", "offset": offset, "limit": 1000})
            response.raise_for_status()
            items = response.json()["items"]
            for record in items:
                rows.extend(_votes(record, names))
            if len(items) < 1000:
                break
            offset += len(items)
    votes = pl.DataFrame(rows, schema={**VOTES_SCHEMA, "time": pl.Datetime("us")}, orient="row")
    return votes.with_columns(pl.col("time").dt.replace_time_zone("UTC")).sort("pair_id", "annotator")


def _votes(record: dict, names: dict[str, str]) -> list[tuple]:
    metadata = record.get("metadata") or {}
    pair_id = record.get("external_id") or metadata.get("pair_id")
    order = metadata.get("order")
    label = metadata.get("label") if metadata.get("label") in SHOWN["ab"] else None
    if order not in SHOWN:
        raise UnusableInput(f"pull: record {pair_id!r} has no recorded A/B order (metadata 'order'); "
                            "was the dataset pushed by prefdata?")
    out = []
    for response in record.get("responses") or []:
        if response["status"] != "submitted":
            continue
        values = response.get("values") or {}
        shown = (values.get("preference") or {}).get("value")
        if shown not in SHOWN[order]:
            continue  # a submitted response without a preference (the question is required: not expected)
        rationale = (values.get("rationale") or {}).get("value")
        out.append((pair_id, names.get(response["user_id"], response["user_id"]), SHOWN[order][shown],
                    rationale or None, _time(response["updated_at"]), shown, order, record.get("status"), label))
    return out


def agreement(votes: pl.DataFrame, threshold: float | None = None):
    """The checklist's agreement check (item 4) on pulled votes: Krippendorff's alpha and more."""
    from prefdata.checks.agreement import DEFAULT_THRESHOLD, check_agreement

    return check_agreement(votes.select("pair_id", "annotator", "vote"),
                           DEFAULT_THRESHOLD if threshold is None else threshold)
