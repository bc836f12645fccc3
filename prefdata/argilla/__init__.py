"""Human labels in Argilla: push pairs for review, pull the votes back, and run a local server.

    push_pairs(rows, url=..., api_key=..., dataset=...)   -> PushResult   (idempotent on pair_id)
    pull_votes(url=..., api_key=..., dataset=...)         -> polars frame (pair_id, annotator, vote, ...)
    agreement(votes)                                      -> the checklist's agreement CheckResult
    add_user(url=..., api_key=..., username=..., password=...) -> the new user's API key
    LocalArgilla().start() / .stop() / .status()          -> a real argilla-server on 127.0.0.1

Modules: client (connecting, and the one-line errors when that fails), push and pull (records out,
votes in), audit (a label audit of a stored version), crowd (simulated annotators labelling through
the HTTP API, each as its own user), server (a local argilla-server in its own environment), and,
run inside that server's environment: launch (starts it with the two below), annotator_routes (the
record routes annotators' SDK uses) and sql_search (a search engine answering reads by SQL, a chat
field's messages included).

Names load on first use (PEP 562), so `prefdata --help`, which imports the CLI module beside
this one, loads neither polars nor the argilla SDK.

May import: prefdata.base, prefdata.data, prefdata.checks (vote statistics).
"""

from importlib import import_module

_WHERE = {
    "push_pairs": "push", "PushResult": "push", "guidelines_from_card": "push", "shown_order": "push",
    "pull_votes": "pull", "agreement": "pull",
    "add_user": "client",
    "LocalArgilla": "server", "ServerInfo": "server",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'prefdata.argilla' has no attribute {name!r}; it has {', '.join(__all__)}")
    return getattr(import_module(f"prefdata.argilla.{_WHERE[name]}"), name)
