"""Connecting to an Argilla server, and the one-line errors users see when that fails.

The API key comes from the caller or from $ARGILLA_API_KEY (the URL from $ARGILLA_API_URL); it is
never printed, logged, or written anywhere by this module.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from prefdata.base.errors import PrefdataError, UnusableInput

KEY_HINT = "pass --api-key or set ARGILLA_API_KEY (for the local server: `prefdata argilla status`)"


def resolve(url: str | None, api_key: str | None) -> tuple[str, str]:
    url = url or os.environ.get("ARGILLA_API_URL")
    api_key = api_key or os.environ.get("ARGILLA_API_KEY")
    if not url:
        raise UnusableInput("no Argilla URL: pass --url or set ARGILLA_API_URL (the local server's: `prefdata argilla status`)")
    if not api_key:
        raise UnusableInput(f"no Argilla API key: {KEY_HINT}")
    return url.rstrip("/"), api_key


@contextmanager
def argilla_errors(url: str, doing: str, url_option: str = "--url") -> Iterator[None]:
    """Turn the SDK's and httpx's exceptions into one line: what failed, where, what to do."""
    import httpx
    from argilla._exceptions import ArgillaAPIError, ArgillaCredentialsError, ForbiddenError, NotFoundError

    try:
        yield
    except ArgillaCredentialsError:
        raise PrefdataError(f"{doing}: Argilla at {url} refused the API key: {KEY_HINT}") from None
    except httpx.TransportError as exc:
        raise PrefdataError(f"{doing}: cannot reach Argilla at {url} ({type(exc).__name__}: {exc}); "
                            f"is the server running? (`prefdata argilla status`, or check {url_option})") from None
    except httpx.HTTPStatusError as exc:
        raise _status_error(doing, url, exc.response.status_code, exc.response.text) from None
    except ArgillaAPIError as exc:
        # The SDK raises some of these itself, with its default status 500 (a ForbiddenError when an
        # annotator creates a dataset): the class says what happened, not that number.
        status = 403 if isinstance(exc, ForbiddenError) else 404 if isinstance(exc, NotFoundError) else None
        raise _status_error(doing, url, status or getattr(exc, "status_code", None), str(exc)) from None


def _status_error(doing: str, url: str, status: int | None, text: str) -> PrefdataError:
    if status == 401:
        return PrefdataError(f"{doing}: Argilla at {url} refused the API key: {KEY_HINT}")
    if status == 403:
        return PrefdataError(f"{doing}: this API key's user may not do that on {url}; "
                             "pushing and pulling need an owner or admin key (annotators see only their own queue)")
    detail = " ".join(text.split())[:300]
    return PrefdataError(f"{doing}: Argilla at {url} answered {status}: {detail}")


ADMIN_ROLES = ("owner", "admin")


def connect(url: str, api_key: str, doing: str, roles: tuple[str, ...] = ADMIN_ROLES, quick: bool = False,
            url_option: str = "--url"):
    """An `argilla.Argilla` client whose key has been checked against the server, and whose user
    has one of `roles` (push, pull and add-user need an owner or admin: say so before the server
    refuses some request half-way with a less helpful answer). `quick`: one try of a few seconds (a
    check before other work), instead of the SDK's retries with backoff (seconds against a server that
    is not there)."""
    import argilla as rg

    with argilla_errors(url, doing, url_option):
        client = rg.Argilla(api_url=url, api_key=api_key, **({"timeout": 5, "retries": 0} if quick else {"timeout": 120}))
        me = client.me  # the SDK checks the key lazily on some paths: ask once, here
    role = getattr(me.role, "value", me.role)
    if role not in roles:
        raise PrefdataError(f"{doing}: this API key is {me.username!r}'s, who has the {role} role on {url}; "
                            f"that needs an {' or '.join(roles)} key (the local server's owner key: "
                            "`prefdata argilla status` says where it is)")
    return client


def add_user(*, url: str | None, api_key: str | None, username: str, password: str, role: str = "annotator",
             workspace: str = "prefdata") -> str:
    """Create a user (when absent) and make it a member of the workspace; returns the user's API key.
    Needs an owner key. The password is the user's login to the web UI."""
    return ensure_user(url=url, api_key=api_key, username=username, password=password, role=role,
                       workspace=workspace)[0]


def ensure_user(*, url: str | None, api_key: str | None, username: str, password: str, role: str = "annotator",
                workspace: str = "prefdata") -> tuple[str, bool, str]:
    """add_user's work: (the user's API key, whether it was created now, its role). A user who
    exists already keeps their password and role: `password` and `role` only apply to a new one."""
    import argilla as rg

    url, api_key = resolve(url, api_key)
    client = connect(url, api_key, "add user", roles=("owner",))
    http = client.http_client
    with argilla_errors(url, f"add user {username!r}"):
        ws = client.workspaces(workspace) or rg.Workspace(name=workspace, client=client).create()
        response = http.get("/api/v1/users")
        response.raise_for_status()
        user = next((u for u in response.json()["items"] if u["username"] == username), None)
        created = user is None
        if created:
            response = http.post("/api/v1/users", json={"first_name": username, "username": username,
                                                        "password": password, "role": role})
            response.raise_for_status()
            user = response.json()
        members = http.get(f"/api/v1/workspaces/{ws.id}/users")
        members.raise_for_status()
        if user["id"] not in {u["id"] for u in members.json()["items"]}:
            http.post(f"/api/v1/workspaces/{ws.id}/users", json={"user_id": user["id"]}).raise_for_status()
        return user["api_key"], created, user.get("role", role)
