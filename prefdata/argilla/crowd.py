"""Simulated annotators who label an Argilla dataset through its HTTP API, each as its own user.

The demo's stand-in for people: each annotator is an Argilla user (created with an owner key) who
reads the records it can see and submits a preference for each, chosen by a
prefdata.world.SimulatedAnnotator looking at the record's fields as shown (A/B in the recorded,
randomised order), exactly what a person in the web UI submits. Runs in a background thread while
the collect flow waits for the votes.

    with SimulatedCrowd(url, owner_key, "demo-review", annotator_pool(3, 0.92)) as crowd:
        ...  # push, then pull: the crowd answers meanwhile
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from prefdata.argilla.client import add_user
from prefdata.data.records import render_turns


class SimulatedCrowd:
    def __init__(self, url: str, owner_key: str, dataset: str, annotators: Sequence, workspace: str = "prefdata",
                 poll_s: float = 0.5, verifier: Callable | None = None):
        import secrets

        self.url, self.owner_key, self.dataset, self.poll_s = url.rstrip("/"), owner_key, dataset, poll_s
        # what tells the annotators the truth: (prompt, response) -> bool | score; None: their own default
        self.verifier_kwargs = {"verifier": verifier} if verifier is not None else {}
        self.annotators = list(annotators)
        # One Argilla user per simulated annotator; add_user returns the existing user's key on a rerun.
        self.keys = {a.name: add_user(url=url, api_key=owner_key, username=a.name, password=secrets.token_urlsafe(16),
                                      workspace=workspace) for a in self.annotators}
        self.submitted = 0
        self._done: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simulated-crowd", daemon=True)
        self.error: BaseException | None = None

    def _dataset_id(self, http) -> str | None:
        found = [d for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == self.dataset]
        return found[0]["id"] if found else None

    @staticmethod
    def _records(http, dataset_id: str, page: int = 500):
        offset = 0
        while True:
            items = http.get(f"/api/v1/datasets/{dataset_id}/records", params={"limit": page, "offset": offset}).json()["items"]
            yield from items
            if len(items) < page:
                return
            offset += page

    def answer_once(self) -> int:
        """Submit every missing vote once; returns how many were submitted."""
        import httpx

        n = 0
        with httpx.Client(base_url=self.url, headers={"X-Argilla-Api-Key": self.owner_key}, timeout=60) as owner:
            dataset_id = self._dataset_id(owner)
            if dataset_id is None:
                return 0
            for record in self._records(owner, dataset_id):
                fields = record["fields"]
                pair_id = record["metadata"]["pair_id"]
                prompt = fields["prompt"]
                if isinstance(prompt, list):  # a chat field: the annotator reads the text the pair's prompt holds
                    prompt = render_turns(prompt)
                for annotator in self.annotators:
                    if (record["id"], annotator.name) in self._done:
                        continue
                    vote = annotator.vote(pair_id, prompt, fields["response_a"], fields["response_b"],
                                          **self.verifier_kwargs)
                    response = httpx.post(f"{self.url}/api/v1/records/{record['id']}/responses", timeout=60,
                                          headers={"X-Argilla-Api-Key": self.keys[annotator.name]},
                                          json={"values": {"preference": {"value": vote}}, "status": "submitted"})
                    # 201: submitted; 409: this user already answered (a rerun): either way it is done.
                    if response.status_code not in (201, 409):
                        response.raise_for_status()
                    self._done.add((record["id"], annotator.name))
                    n += response.status_code == 201
        self.submitted += n
        return n

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.poll_s):
                self.answer_once()
        except BaseException as exc:  # noqa: BLE001 - reported by stop(), not lost in a daemon thread
            self.error = exc

    def __enter__(self) -> "SimulatedCrowd":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None and exc[0] is None:
            raise self.error
