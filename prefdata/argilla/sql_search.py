"""A search engine for argilla-server 2.8.0 that answers every read by SQL on the server's own
SQLite database. Runs inside the server's virtual environment (loaded by `launch.py`), never in
prefdata's: it imports argilla_server.

Why it can work: in Argilla the database is the source of truth and Elasticsearch only a copy
kept for search. So the write methods (index, update, delete) have nothing to do, and the reads
(`search` with its filters and sorts, progress, metadata metrics, similarity) are computed from
the tables. Semantics follow argilla_server/search_engine/commons.py (the Elasticsearch engine)
filter by filter; where they differ it is said at the method. Written against argilla-server
2.8.0 exactly (`server-constraints.txt` pins it); tests/test_argilla_engine.py checks each filter
through the real HTTP API.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime
from typing import Any, Iterable, List, Optional, Union
from uuid import UUID

from sqlalchemy import and_, exists, func, not_, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from argilla_server.database import AsyncSessionLocal
from argilla_server.enums import MetadataPropertyType, ResponseStatusFilter, SimilarityOrder, SortOrder
from argilla_server.models import (
    Dataset, MetadataProperty, Question, Record, Response, Suggestion, User, Vector, VectorSettings,
)
from argilla_server.search_engine.base import (
    AndFilter, Filter, FloatMetadataMetrics, IntegerMetadataMetrics, MetadataFilterScope, MetadataMetrics, Order,
    RangeFilter, RecordFilterScope, ResponseFilterScope, SearchEngine, SearchResponseItem, SearchResponses,
    SuggestionFilterScope, TermsFilter, TermsMetrics, TextQuery,
)

ENGINE_NAME = "prefdata-sql"


def _json_scalar(column, path: str):
    """The value at `path` of a JSON column, as SQLite's json_extract gives it (text or number)."""
    return func.json_extract(column, path)


def _json_in(column, path: str, values: List[str]) -> ColumnElement:
    """Elasticsearch `terms` on a keyword that may hold one value or a list: any element matches."""
    value = _json_scalar(column, path)
    each = func.json_each(column, path).table_valued("value")
    in_list = exists(select(1).select_from(each).where(each.c.value.in_(values)))
    return or_(and_(func.json_type(column, path) != "array", value.in_(values)),
               and_(func.json_type(column, path) == "array", in_list))


def _range(value, ge: Any, le: Any) -> ColumnElement:
    conditions = [value.is_not(None)]
    if ge is not None:
        conditions.append(value >= ge)
    if le is not None:
        conditions.append(value <= le)
    return and_(*conditions)


def _as_datetime(value: Any) -> Any:
    """Range bounds on inserted_at/updated_at arrive as ISO strings."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None) if isinstance(value, str) else value


def _user_order(user_id: Any, record_id: UUID) -> str:
    """Elasticsearch shuffles each annotator's queue with random_score seeded by the user id: the
    same user always sees the same order, two users see different ones (so overlapping annotators
    do not all start on the same record). A hash of (user, record) gives the same property."""
    return hashlib.sha256(f"{user_id}:{record_id}".encode()).hexdigest()


@SearchEngine.register(engine_name=ENGINE_NAME)
class SQLSearchEngine(SearchEngine):
    @classmethod
    async def new_instance(cls) -> "SQLSearchEngine":
        return cls()

    async def close(self):
        pass

    async def ping(self) -> bool:
        return True

    async def info(self) -> dict:
        return {"distribution": ENGINE_NAME, "version": {"number": "2.8.0"},
                "note": "reads answered by SQL on the server database; no Elasticsearch"}

    # -- writes: the database already holds everything --------------------------------------------
    async def create_index(self, dataset: Dataset):
        pass

    async def delete_index(self, dataset: Dataset):
        pass

    async def configure_metadata_property(self, dataset: Dataset, metadata_property: MetadataProperty):
        pass

    async def configure_index_vectors(self, vector_settings: VectorSettings):
        pass

    async def index_records(self, dataset: Dataset, records: Iterable[Record]):
        pass

    async def partial_record_update(self, record: Record, **update):
        pass

    async def delete_records(self, dataset: Dataset, records: Iterable[Record]):
        pass

    async def update_record_response(self, response: Response):
        pass

    async def delete_record_response(self, response: Response):
        pass

    async def update_record_suggestion(self, suggestion: Suggestion):
        pass

    async def delete_record_suggestion(self, suggestion: Suggestion):
        pass

    # -- reads --------------------------------------------------------------------------------------
    async def get_dataset_progress(self, dataset: Dataset) -> dict:
        if dataset.is_draft:
            return {}
        query = select(Record.status, func.count()).where(Record.dataset_id == dataset.id).group_by(Record.status)
        async with AsyncSessionLocal() as db:
            counts = {str(status.value if hasattr(status, "value") else status): n
                      for status, n in (await db.execute(query)).all()}
        return {"total": sum(counts.values()), **counts}

    async def get_dataset_user_progress(self, dataset: Dataset, user: User) -> dict:
        """The user's own responses by status. (Elasticsearch's aggregation here counts every
        response on the records the user answered; the caller subtracts these counts from the
        total to get the user's pending records, which only the user's own responses give right.)"""
        if dataset.is_draft:
            return {}
        query = (select(Response.status, func.count()).join(Record, Record.id == Response.record_id)
                 .where(Record.dataset_id == dataset.id, Response.user_id == user.id).group_by(Response.status))
        async with AsyncSessionLocal() as db:
            counts = {str(status.value if hasattr(status, "value") else status): n
                      for status, n in (await db.execute(query)).all()}
        return {"total": sum(counts.values()), **counts}

    async def search(
        self,
        dataset: Dataset,
        query: Optional[Union[TextQuery, str]] = None,
        filter: Optional[Filter] = None,
        sort: Optional[List[Order]] = None,
        offset: int = 0,
        limit: int = 100,
        user_id: Optional[UUID] = None,
    ) -> SearchResponses:
        """Records matching the text query and filter. Order: `sort` if given (ties by insertion);
        else a per-user shuffle when the caller is an annotator's queue (`user_id`), else insertion
        order. A text query matches records whose field contains every word (case-insensitive);
        unlike Elasticsearch there is no stemming and no relevance ranking (score is 1.0)."""
        conditions = [Record.dataset_id == dataset.id]
        if query is not None:
            conditions.append(self._text_condition(dataset, query))
        if filter is not None:
            conditions.append(self._filter_condition(filter))
        statement = select(Record.id).where(*conditions)
        async with AsyncSessionLocal() as db:
            if sort:
                statement = statement.order_by(*self._order_by(sort), Record.inserted_at, Record.id)
                total = (await db.execute(select(func.count()).select_from(statement.subquery()))).scalar_one()
                ids = (await db.execute(statement.offset(offset).limit(limit))).scalars().all()
            elif user_id is not None:
                every = (await db.execute(statement)).scalars().all()
                total = len(every)
                ids = sorted(every, key=lambda record_id: _user_order(user_id, record_id))[offset:offset + limit]
            else:
                statement = statement.order_by(Record.inserted_at, Record.id)
                total = (await db.execute(select(func.count()).select_from(statement.subquery()))).scalar_one()
                ids = (await db.execute(statement.offset(offset).limit(limit))).scalars().all()
        return SearchResponses(items=[SearchResponseItem(record_id=i, score=1.0) for i in ids], total=total)

    async def compute_metrics_for(self, metadata_property: MetadataProperty) -> MetadataMetrics:
        path = f"$.{_quoted(metadata_property.name)}"
        in_dataset = Record.dataset_id == metadata_property.dataset_id
        async with AsyncSessionLocal() as db:
            if metadata_property.type == MetadataPropertyType.terms:
                # one count per value, a list counting each element (Elasticsearch keyword semantics)
                each = func.json_each(Record.metadata_, path).table_valued("value", "type")
                plain = (select(_json_scalar(Record.metadata_, path).label("term"))
                         .where(in_dataset, func.json_type(Record.metadata_, path).not_in(["array", "null"])))
                listed = (select(each.c.value.label("term")).select_from(Record).join(each, true())
                          .where(in_dataset, func.json_type(Record.metadata_, path) == "array"))
                union = plain.union_all(listed).subquery()
                rows = (await db.execute(select(union.c.term, func.count()).group_by(union.c.term)
                                         .order_by(func.count().desc(), union.c.term))).all()
                values = [TermsMetrics.TermCount(term=str(term), count=n) for term, n in rows]
                return TermsMetrics(total=sum(v.count for v in values), values=values)
            value = _json_scalar(Record.metadata_, path)
            low, high = (await db.execute(select(func.min(value), func.max(value)).where(in_dataset))).one()
        metrics = IntegerMetadataMetrics if metadata_property.type == MetadataPropertyType.integer else FloatMetadataMetrics
        return metrics(min=low, max=high)

    async def similarity_search(
        self,
        dataset: Dataset,
        vector_settings: VectorSettings,
        value: Optional[List[float]] = None,
        record: Optional[Record] = None,
        query: Optional[Union[TextQuery, str]] = None,
        filter: Optional[Filter] = None,
        max_results: int = 100,
        order: SimilarityOrder = SimilarityOrder.most_similar,
        threshold: Optional[float] = None,
    ) -> SearchResponses:
        """Exact cosine similarity over the filtered records' vectors, scored (1 + cos) / 2 as
        Elasticsearch's cosine similarity is; `least_similar` ranks the other end."""
        if bool(value) == bool(record):
            raise ValueError("Must provide either vector value or record to compute the similarity search")
        target = value or record.vector_value_by_vector_settings(vector_settings)
        if not target:
            raise ValueError("Cannot find a vector value to apply with provided info")
        conditions = [Record.dataset_id == dataset.id, Vector.vector_settings_id == vector_settings.id]
        if record is not None:
            conditions.append(Record.id != record.id)
        if query is not None:
            conditions.append(self._text_condition(dataset, query))
        if filter is not None:
            conditions.append(self._filter_condition(filter))
        statement = select(Record.id, Vector.value).join(Vector, Vector.record_id == Record.id).where(*conditions)
        async with AsyncSessionLocal() as db:
            rows = (await db.execute(statement)).all()
        sign = -1.0 if order == SimilarityOrder.least_similar else 1.0
        norm = math.sqrt(sum(x * x for x in target)) or 1.0
        scored = []
        for record_id, vector in rows:
            length = math.sqrt(sum(x * x for x in vector)) or 1.0
            cosine = sign * sum(a * b for a, b in zip(target, vector)) / (norm * length)
            scored.append(((1.0 + cosine) / 2.0, record_id))
        scored.sort(key=lambda item: -item[0])
        scored = scored[:max_results]
        if threshold is not None:
            scored = [item for item in scored if item[0] >= threshold]
        return SearchResponses(items=[SearchResponseItem(record_id=i, score=s) for s, i in scored], total=len(scored))

    # -- the SQL for each filter scope --------------------------------------------------------------
    @staticmethod
    def _text_condition(dataset: Dataset, query: Union[TextQuery, str]) -> ColumnElement:
        text = TextQuery(q=query) if isinstance(query, str) else query
        if text.field:  # a field the dataset lacks is searched as a text field: it matches nothing
            field = dataset.field_by_name(text.field)
            fields = [(text.field, field is not None and field.is_chat)]
        else:
            fields = [(f.name, f.is_chat) for f in dataset.fields if not f.is_image]
        words = [w for w in text.q.replace('"', " ").split() if w not in ("+", "|", "-")]
        if not words or not fields:
            return true()
        # every word in one of the fields (simple_query_string with default_operator AND)
        return and_(*[or_(*[_field_has(name, chat, w) for name, chat in fields]) for w in words])

    def _filter_condition(self, filter: Filter) -> ColumnElement:
        if isinstance(filter, AndFilter):
            return and_(true(), *[self._filter_condition(f) for f in filter.filters])
        scope = filter.scope
        if isinstance(scope, ResponseFilterScope):
            return self._response_condition(filter, scope)
        if isinstance(scope, RecordFilterScope):
            column = getattr(Record, scope.property)
            if isinstance(filter, TermsFilter):
                return column.in_(filter.values)
            return _range(column, _as_datetime(filter.ge), _as_datetime(filter.le))
        if isinstance(scope, MetadataFilterScope):
            path = f"$.{_quoted(scope.metadata_property)}"
            if isinstance(filter, TermsFilter):
                return _json_in(Record.metadata_, path, filter.values)
            return _range(_json_scalar(Record.metadata_, path), filter.ge, filter.le)
        if isinstance(scope, SuggestionFilterScope):
            return exists(select(1).select_from(Suggestion).join(Question, Question.id == Suggestion.question_id)
                          .where(Suggestion.record_id == Record.id, Question.name == scope.question,
                                 self._suggestion_condition(filter, scope.property)))
        raise ValueError(f"Cannot process request for search scope {scope}")

    @staticmethod
    def _suggestion_condition(filter: Filter, prop: Optional[str]) -> ColumnElement:
        prop = prop or "value"
        if prop == "value":
            if isinstance(filter, TermsFilter):
                return _json_in(Suggestion.value, "$", filter.values)
            return _range(_json_scalar(Suggestion.value, "$"), filter.ge, filter.le)
        column = {"score": Suggestion.score, "agent": Suggestion.agent, "type": Suggestion.type}[prop]
        if prop == "score":
            column = _json_scalar(Suggestion.score, "$")
        if isinstance(filter, TermsFilter):
            return column.in_(filter.values)
        return _range(column, filter.ge, filter.le)

    @staticmethod
    def _response_condition(filter: Filter, scope: ResponseFilterScope) -> ColumnElement:
        own = [Response.record_id == Record.id]
        if scope.user is not None:
            own.append(Response.user_id == scope.user.id)
        if scope.question:
            path = f"$.{_quoted(scope.question)}.value"
            if isinstance(filter, TermsFilter):
                test = _json_in(Response.values, path, filter.values)
            else:
                test = _range(_json_scalar(Response.values, path), filter.ge, filter.le)
            return exists(select(1).select_from(Response).where(*own, test))
        if scope.property != "status" or not isinstance(filter, TermsFilter):
            raise ValueError(f"Cannot process filter scope {scope}")
        # "pending" is not a stored status: it means no response (by this user, or by anyone)
        wanted = [str(v) for v in filter.values if v != ResponseStatusFilter.pending]
        parts = []
        if ResponseStatusFilter.pending in filter.values:
            parts.append(not_(exists(select(1).select_from(Response).where(*own))))
        if wanted:
            parts.append(exists(select(1).select_from(Response).where(*own, Response.status.in_(wanted))))
        return or_(*parts)

    @staticmethod
    def _order_by(sort: List[Order]) -> list:
        clauses = []
        for order in sort:
            scope = order.scope
            if isinstance(scope, RecordFilterScope):
                value = getattr(Record, scope.property)
            elif isinstance(scope, MetadataFilterScope):
                value = _json_scalar(Record.metadata_, f"$.{_quoted(scope.metadata_property)}")
            elif isinstance(scope, SuggestionFilterScope):
                column = Suggestion.value if (scope.property or "value") == "value" else getattr(Suggestion, scope.property)
                if scope.property == "score":
                    column = _json_scalar(Suggestion.score, "$")
                value = (select(column).join(Question, Question.id == Suggestion.question_id)
                         .where(Suggestion.record_id == Record.id, Question.name == scope.question)
                         .limit(1).scalar_subquery())
            elif isinstance(scope, ResponseFilterScope):
                # Elasticsearch sorts by the mean of the (user's) response values, missing last
                column = (_json_scalar(Response.values, f"$.{_quoted(scope.question)}.value") if scope.question
                          else Response.status)
                where = [Response.record_id == Record.id]
                if scope.user is not None:
                    where.append(Response.user_id == scope.user.id)
                aggregate = func.avg(column) if scope.question else func.min(column)
                value = select(aggregate).where(*where).scalar_subquery()
            else:
                raise ValueError(f"Cannot process request for search scope {scope}")
            clauses.append(value.desc().nulls_last() if order.order == SortOrder.desc else value.asc().nulls_last())
        return clauses


def _field_has(name: str, chat: bool, word: str) -> ColumnElement:
    """A record field containing `word` (case-insensitive). A chat field holds a list of {role,
    content} messages: its text is the messages' content, not their JSON (whose keys would match
    "role" or "content" in every record, and whose escapes hide non-ASCII letters). Elasticsearch
    maps a message's content as text and its role as a keyword, which matches the whole role only:
    the same here."""
    path = f"$.{_quoted(name)}"
    if chat:
        message = func.json_each(Record.fields, path).table_valued("value")
        content = func.lower(func.coalesce(_json_scalar(message.c.value, "$.content"), ""))
        return exists(select(1).select_from(message).where(
            or_(content.contains(word.lower(), autoescape=True), _json_scalar(message.c.value, "$.role") == word)))
    return func.lower(func.coalesce(_json_scalar(Record.fields, path), "")).contains(word.lower(), autoescape=True)


def _quoted(name: str) -> str:
    """A JSON path member, quoted so names with dots or dashes address one key."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
