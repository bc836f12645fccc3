"""Push pairs to Argilla for human review: one record per pair, its pair id as the record id.

Each record shows the prompt and the two responses as "Response A" and "Response B" in an order
drawn per pair (sha256 of seed and pair id), so position bias can be measured; the order shown
is kept in the record's metadata and `pull_votes` maps every vote back through it. Metadata not
meant to steer annotators (pair id, order, sampler) is hidden from them. Judge verdicts become
suggestions when asked for; leave them off (suggestions=False) where the humans are measuring the
judge (routing's audit share), or the judge anchors them.

Pushing is idempotent on pair_id: pairs already in the dataset are skipped, so pushing twice, or
again after a failure part-way, adds each missing record once and never a duplicate. Creating the
dataset takes several requests (the dataset, each field, question and metadata property, then
publishing it); a push cut off among them leaves an unpublished draft, which the next push
recognises as its own (a draft holding nothing but prefdata's settings) and makes again.

A conversation shows as one: when the rows that make a new dataset carry `prompt_messages` (the
JSON of the prompt's {role, content} turns, as `prefdata import` stores a multi-turn pair), its
`prompt` field is a chat field holding each record's messages, so the annotator reads the earlier
turns as a chat rather than a transcript in one text box; a row without messages shows there as one
user message. Rows without messages make today's text field. A dataset keeps the field it was made
with: a text-field dataset gets a conversation's text rendering (`prompt`), nothing lost.

A row's `label` (a/b/tie, the dataset's own verdict in the row's terms: "a" for a version's pairs
pushed as a label audit, where chosen is response_a) rides along in hidden metadata, so the pulled
votes can be held against it (checks.agreement.check_label_audit).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

from prefdata.argilla.client import argilla_errors, connect, resolve
from prefdata.base.errors import PrefdataError, UnusableInput

REQUIRED = ("pair_id", "prompt", "response_a", "response_b")
VOTE_LABELS = {"a": "Response A is better", "b": "Response B is better", "tie": "Tie: equally good or equally bad"}
SHOWN = {"ab": {"a": "a", "b": "b", "tie": "tie"}, "ba": {"a": "b", "b": "a", "tie": "tie"}}  # symmetric: also maps back
BATCH = 250  # records per bulk request (the server takes at most 500)
EMPTY = "(empty response)"  # Argilla refuses an empty required field; annotators must see the emptiness
# argilla-server's limits on one chat message (api/schemas/v1/chat.py, its defaults): checked here, so
# a push fails before any record is sent, in one line, instead of on a batch the server refuses.
CHAT_ROLE_MAX, CHAT_CONTENT_MAX = 20, 20000
EMPTY_MESSAGE = "(empty message)"  # the server refuses a message without content, as it does an empty field
PROMPT_TYPES = ("text", "chat")  # the prompt field prefdata makes: the text, or the conversation as a chat
DEFAULT_GUIDELINES = """Compare the two responses to the prompt and choose the better one.

- Prefer the response that is correct, helpful and harmless; then the clearer and more concise one.
- Judge the content, not the position: the order of A and B is random.
- Choose Tie only when neither is better (equally good or equally bad).
- Give a short rationale when the choice is not obvious.
"""


@dataclass(frozen=True)
class PushResult:
    dataset: str
    workspace: str
    dataset_id: str
    url: str
    rows: int  # rows given
    pushed: int  # records created by this call
    already_there: int  # pair ids the dataset already held (resumed or repeated push)
    duplicates: int  # rows repeating an earlier row's pair id in the input
    records: int  # records in the dataset afterwards

    def summary(self) -> str:
        return (f"{self.rows} rows = {self.pushed} pushed + {self.already_there} already in {self.workspace}/"
                f"{self.dataset} + {self.duplicates} repeated pair ids; the dataset holds {self.records} records")


def shown_order(pair_id: str, seed: int) -> str:
    """'ab' (response_a shown as A) or 'ba', drawn per pair from the seed: the same on every push."""
    return "ba" if hashlib.sha256(f"{seed}:{pair_id}".encode()).digest()[0] & 1 else "ab"


def guidelines_from_card(markdown: str) -> str | None:
    """The annotation guidelines for Argilla from a guideline document or dataset card (checklist
    item 12): its Annotation guidelines, Rubric and Edge cases sections, in that order."""
    from prefdata.data.card import GUIDELINE_SECTIONS, PLACEHOLDER, sections, strip_front_matter

    found = sections(strip_front_matter(markdown))
    parts = [f"## {title}\n\n{found[title]}" for title in GUIDELINE_SECTIONS
             if found.get(title) and found[title] != PLACEHOLDER]
    return "\n\n".join(parts) or None


def _rows(rows: Any) -> list[dict]:
    if hasattr(rows, "to_dicts"):  # a polars frame
        missing = [c for c in REQUIRED if c not in rows.columns]
        if missing:
            raise UnusableInput(f"push: the rows lack column(s) {', '.join(missing)}; "
                                f"Argilla records need {', '.join(REQUIRED)}")
        return rows.to_dicts()
    rows = list(rows)
    for i, row in enumerate(rows):
        missing = [c for c in REQUIRED if c not in row]
        if missing:
            raise UnusableInput(f"push: row {i} lacks {', '.join(missing)}; Argilla records need {', '.join(REQUIRED)}")
    return rows


def _check(row: dict, i: int) -> None:
    for name in REQUIRED:
        if not isinstance(row[name], str):
            raise UnusableInput(f"push: row {i} ({row.get('pair_id')!r}): {name} is {type(row[name]).__name__}, "
                                "not text")
    if not row["pair_id"] or not row["prompt"].strip():
        raise UnusableInput(f"push: row {i}: empty {'pair_id' if not row['pair_id'] else 'prompt'}; "
                            "import the data first (`prefdata import`) so unusable rows are quarantined")


def _messages(row: dict, i: int) -> list[dict[str, str]] | None:
    """The row's prompt_messages as a list of {role, content}, or None when it has none. Taken as the
    JSON text the store keeps, or as the list itself (a JSONL file written with the messages inline)."""
    value = row.get("prompt_messages")
    if value is None:
        return None
    where = f"push: row {i} ({row['pair_id']!r}): prompt_messages"
    fix = ("it must be a list of {role, content} messages (or its JSON), as `prefdata import` stores a "
           "conversation; drop the column to push the prompt as text")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise UnusableInput(f"{where} is not JSON ({error.msg} at character {error.pos}); {fix}") from None
    if not isinstance(value, list) or not value:
        raise UnusableInput(f"{where} is {'an empty list' if value == [] else f'a {type(value).__name__}'}; {fix}")
    for n, message in enumerate(value, 1):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str) and message["role"].strip()
                and isinstance(message.get("content"), str)):
            raise UnusableInput(f"{where}: message {n} is not a {{role, content}} pair of texts; {fix}")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def chat_value(row: dict) -> list[dict[str, str]]:
    """A record's value for a chat prompt field: the row's messages, or its prompt as one user
    message (a plain row in a conversation dataset). Checked against the server's limits."""
    messages = row.get("prompt_messages") or [{"role": "user", "content": row["prompt"]}]
    for n, message in enumerate(messages, 1):
        where = f"push: pair {row['pair_id']!r}: prompt message {n}"
        if len(message["role"]) > CHAT_ROLE_MAX:
            raise UnusableInput(f"{where} has role {message['role'][:40]!r}, longer than the {CHAT_ROLE_MAX} "
                                "characters an Argilla chat field takes; shorten the role in the data")
        if len(message["content"]) > CHAT_CONTENT_MAX:
            raise UnusableInput(f"{where} is {len(message['content'])} characters, more than the {CHAT_CONTENT_MAX} "
                                "an Argilla chat field takes per message; push it to a dataset made from rows "
                                "without prompt_messages (a text field), or filter out such long prompts")
    return [{"role": m["role"], "content": m["content"] or EMPTY_MESSAGE} for m in messages]


FIELDS = ("prompt", "response_a", "response_b")
QUESTIONS = ("preference", "rationale")
METADATA = ("pair_id", "order", "sampler", "label", "category")


def settings(guidelines: str | None, overlap: int, chat: bool = False):
    """The dataset prefdata makes; `chat`: the prompt field shows a conversation's messages as a chat."""
    import argilla as rg

    # use_markdown=False as for the text fields: the annotator sees each turn as it was written
    prompt = (rg.ChatField(name="prompt", title="Conversation", use_markdown=False) if chat
              else rg.TextField(name="prompt", title="Prompt"))
    return rg.Settings(
        guidelines=guidelines or DEFAULT_GUIDELINES,
        fields=[
            prompt,
            rg.TextField(name="response_a", title="Response A"),
            rg.TextField(name="response_b", title="Response B"),
        ],
        questions=[
            rg.LabelQuestion(name="preference", title="Which response is better?", labels=VOTE_LABELS),
            rg.TextQuestion(name="rationale", title="Why? (optional)", required=False),
        ],
        metadata=[
            rg.TermsMetadataProperty(name="pair_id", visible_for_annotators=False),
            rg.TermsMetadataProperty(name="order", visible_for_annotators=False),
            rg.TermsMetadataProperty(name="sampler", visible_for_annotators=False),
            rg.TermsMetadataProperty(name="label", visible_for_annotators=False),  # blind: never shown
            rg.TermsMetadataProperty(name="category"),
        ],
        distribution=rg.TaskDistribution(min_submitted=overlap),
        allow_extra_metadata=False,
    )


def _record(row: dict, seed: int, with_suggestion: bool, chat: bool):
    """The row as a record; `chat`: the dataset's prompt field is a chat field (else a text field,
    which gets the prompt's text: for a conversation, its rendering of every turn)."""
    import argilla as rg

    order = shown_order(row["pair_id"], seed)
    first, second = (row["response_a"], row["response_b"]) if order == "ab" else (row["response_b"], row["response_a"])
    metadata = {"pair_id": row["pair_id"], "order": order}
    sampler = row.get("sampler") or row.get("model") or row.get("cmp_key")
    if sampler:
        metadata["sampler"] = str(sampler)
    if row.get("category"):
        metadata["category"] = str(row["category"])
    if row.get("label") in SHOWN["ab"]:
        metadata["label"] = row["label"]
    suggestions = []
    if with_suggestion and row.get("judge_label") in SHOWN["ab"]:
        confidence = row.get("judge_confidence")
        suggestions.append(rg.Suggestion("preference", SHOWN[order][row["judge_label"]],
                                         score=None if confidence is None else float(confidence),
                                         agent=str(row.get("judge_model") or "judge"), type="model"))
    prompt = chat_value(row) if chat else row["prompt"]
    return rg.Record(id=row["pair_id"], fields={"prompt": prompt, "response_a": first or EMPTY,
                                                "response_b": second or EMPTY},
                     metadata=metadata, suggestions=suggestions)


def _field_types(dataset) -> dict[str, str]:
    return {f.name: f.type for f in dataset.settings.fields}


def _ours(types: dict[str, str]) -> bool:
    """Fields push could have made: the prompt as text or chat, the responses as text."""
    return (types.get("prompt", "text") in PROMPT_TYPES
            and all(types.get(name, "text") == "text" for name in ("response_a", "response_b")))


def _half_made_by_us(dataset) -> bool:
    """An unpublished draft with nothing but (some of) the settings push creates: a push that was
    cut off while creating it. A draft cannot hold records yet, so making it again loses nothing."""
    present = dataset.settings
    return (dataset.api_model().status == "draft"
            and {f.name for f in present.fields} <= set(FIELDS) and _ours(_field_types(dataset))
            and {q.name for q in present.questions} <= set(QUESTIONS)
            and {m.name for m in present.metadata} <= set(METADATA)
            and not list(present.vectors))


def _dataset(client, name: str, workspace: str, guidelines: str | None, overlap: int, chat: bool):
    """The dataset, created (with its workspace) when absent, or made again when an interrupted
    push left it half-made; an existing one must match. `chat`: a new one's prompt is a chat field."""
    import argilla as rg

    if client.workspaces(workspace) is None:
        rg.Workspace(name=workspace, client=client).create()
    with warnings.catch_warnings():  # the SDK warns when the dataset is absent: here that is expected
        warnings.simplefilter("ignore")
        dataset = client.datasets(name=name, workspace=workspace)
    if dataset is not None and _half_made_by_us(dataset):
        dataset.delete()
        dataset = None
    if dataset is None:
        return rg.Dataset(name=name, workspace=workspace, settings=settings(guidelines, overlap, chat),
                          client=client).create()
    names = {q.name for q in dataset.settings.questions}
    types = _field_types(dataset)
    if "preference" not in names or {"prompt", "response_a", "response_b"} - set(types):
        raise UnusableInput(f"push: dataset {workspace}/{name} exists but was not made by prefdata "
                            "(no prompt/response_a/response_b fields or preference question); choose another --dataset")
    if not _ours(types):
        shown = ", ".join(f"{n} is a {types[n]} field" for n in ("prompt", "response_a", "response_b"))
        raise UnusableInput(f"push: dataset {workspace}/{name} exists but was not made by prefdata ({shown}; "
                            "prefdata makes the prompt a text or chat field, the responses text fields); "
                            "choose another --dataset")
    if dataset.api_model().status != "ready":
        raise UnusableInput(f"push: dataset {workspace}/{name} is an unpublished draft that was not made by prefdata "
                            "(it has other settings); publish or delete it in Argilla, or choose another --dataset")
    existing = dataset.settings.distribution.min_submitted
    if existing != overlap:
        raise UnusableInput(f"push: dataset {workspace}/{name} exists with overlap {existing}, not {overlap}; "
                            f"push with --overlap {existing} or to another --dataset")
    return dataset


def existing_pair_ids(client, dataset_id) -> set[str]:
    """Record ids (external ids) already in the dataset, by the plain listing endpoint."""
    ids: set[str] = set()
    offset = 0
    while True:
        response = client.http_client.get(f"/api/v1/datasets/{dataset_id}/records",
                                          params={"offset": offset, "limit": 1000})
        response.raise_for_status()
        items = response.json()["items"]
        ids.update(item["external_id"] for item in items if item.get("external_id"))
        if len(items) < 1000:
            return ids
        offset += len(items)


def push_pairs(
    rows: Iterable[dict] | Any,
    *,
    url: str | None,
    api_key: str | None,
    dataset: str,
    workspace: str = "prefdata",
    overlap: int = 1,
    guidelines: str | None = None,
    suggestions: bool = True,
    seed: int = 0,
    progress: bool = True,
) -> PushResult:
    """Push pairs (dicts or a polars frame with pair_id, prompt, response_a, response_b; optional
    prompt_messages, category, sampler or model, judge_label/judge_confidence/judge_model) as records
    that `overlap` annotators each must submit. Idempotent on pair_id."""
    if overlap < 1:
        raise UnusableInput(f"push: overlap must be at least 1 annotator per pair, got {overlap}")
    url, api_key = resolve(url, api_key)
    rows = _rows(rows)
    for i, row in enumerate(rows):
        _check(row, i)
    # the messages parsed once (copies: the caller's rows are left as they were)
    rows = [{**row, "prompt_messages": _messages(row, i)} for i, row in enumerate(rows)]
    client = connect(url, api_key, "push")
    doing = f"push to {workspace}/{dataset}"
    with argilla_errors(url, doing):
        # a new dataset shows a chat when any row is a conversation; an existing one keeps its field
        ds = _dataset(client, dataset, workspace, guidelines, overlap,
                      chat=any(row["prompt_messages"] is not None for row in rows))
        if any(row.get("label") in SHOWN["ab"] for row in rows) and "label" not in {m.name for m in ds.settings.metadata}:
            raise UnusableInput(f"push: dataset {workspace}/{dataset} was made before prefdata kept each pair's label; "
                                "push this label audit to a new --dataset")
        there = existing_pair_ids(client, ds.id)
        seen: set[str] = set()
        todo, already, repeated = [], 0, 0
        for row in rows:
            if row["pair_id"] in seen:
                repeated += 1
            elif row["pair_id"] in there:
                already += 1
            else:
                todo.append(row)
            seen.add(row["pair_id"])
        chat = _field_types(ds)["prompt"] == "chat"
        if chat:  # every message within the server's limits before the first record is sent
            for row in todo:
                chat_value(row)
        sent = 0
        try:
            with argilla_errors(url, doing), _progress(progress, len(todo), f"pushing to {dataset}") as advance:
                for start in range(0, len(todo), BATCH):
                    records = [_record(r, seed, suggestions, chat) for r in todo[start:start + BATCH]]
                    for record in records:
                        record.dataset = ds  # suggestions need the dataset's question ids
                    client.api.records.bulk_upsert(dataset_id=ds.id, records=[r.api_model() for r in records])
                    sent += len(records)
                    advance(len(records))
        except PrefdataError as error:  # say how far it got, and that pushing again resumes from there
            raise PrefdataError(f"{error} [at least {sent} of {len(todo)} new records were stored before this; "
                                "push again to add the rest: pairs already there are skipped]") from None
        total = len(existing_pair_ids(client, ds.id))
    return PushResult(dataset=dataset, workspace=workspace, dataset_id=str(ds.id), url=url, rows=len(rows),
                      pushed=len(todo), already_there=already, duplicates=repeated, records=total)


class _progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, total: int, description: str):
        self.enabled, self.total, self.description = enabled and total > 0, total, description

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=False)
        self.bar.__enter__()
        task = self.bar.add_task(self.description, total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)
        return False
