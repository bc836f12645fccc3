"""Argilla's Python SDK for annotators, on prefdata's local argilla-server 2.8.0. Runs inside the
server's virtual environment (`launch.py` calls `install`), never in prefdata's.

The SDK (argilla 2.x) reads and writes records only through the dataset-wide endpoints

    GET  /api/v1/datasets/{id}/records           dataset.records(), iterating a dataset
    POST /api/v1/datasets/{id}/records/search    dataset.records(query=...)
    PUT  /api/v1/datasets/{id}/records/bulk      dataset.records.log(records)

and argilla-server's own policy (DatasetPolicy.list_records_with_all_responses,
search_records_with_all_responses, upsert_records) keeps them to owners and the workspace's
admins: they show every annotator's responses and the hidden metadata, and they edit records. An
annotator gets 403 there, and has the same reads and writes only as `/me/...` endpoints, which the
web UI uses and the SDK never calls.

So, here, these three endpoints answer an annotator with the annotator's own view, and everyone
else exactly as before:

- list and search are the annotator's search (`/me/datasets/{id}/records/search`): allowed to a
  member of the dataset's workspace, with only the annotator's own responses and only the
  metadata annotators may see, and a filter or sort on responses meaning the annotator's own;
- log writes the annotator's own responses to records already in the dataset (as the web UI's
  `/me/responses/bulk`); a new record, or a response on behalf of another user, is refused (403)
  before anything is written, and values the questions do not accept are one 422 listing them.
  What else the sent records hold (fields, metadata, suggestions) is the owner's and left as is.

An annotator can do nothing here that the `/me/` endpoints do not already allow.
"""

from typing import Optional
from uuid import UUID


def install(api_v1) -> None:
    """Put these routes in place of the server's own for the same endpoints (which they call for
    owners and admins), first in the list."""
    from fastapi.routing import APIRoute

    router = _router()
    endpoints = {(route.path, method) for route in router.routes for method in route.methods}

    def same_endpoint(route) -> bool:
        return isinstance(route, APIRoute) and any((route.path, method) in endpoints for method in route.methods)

    if sum(map(same_endpoint, api_v1.router.routes)) != len(endpoints):
        raise RuntimeError("argilla-server's record endpoints are not those annotator_routes.py replaces")
    api_v1.include_router(router)
    ours = api_v1.router.routes[-len(endpoints):]
    api_v1.router.routes[:] = ours + [r for r in api_v1.router.routes[:-len(endpoints)] if not same_endpoint(r)]


def _router():
    """The three routes. Imports here: this file is also a module of prefdata's package, whose
    environment has no argilla_server. (No `from __future__ import annotations` in this file:
    FastAPI reads these functions' annotations as objects.)"""
    from fastapi import APIRouter, Depends, Query, Security
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import selectinload

    from argilla_server.api.handlers.v1.datasets import records as server_records
    from argilla_server.api.handlers.v1.datasets import records_bulk as server_bulk
    from argilla_server.api.policies.v1 import DatasetPolicy, authorize
    from argilla_server.api.schemas.v1.records import (
        RecordIncludeParam, Records, SearchRecordsQuery, SearchRecordsResult,
    )
    from argilla_server.api.schemas.v1.records_bulk import RecordsBulk, RecordsBulkUpsert
    from argilla_server.api.schemas.v1.responses import ResponsesBulkCreate
    from argilla_server.contexts import datasets
    from argilla_server.database import AsyncSessionLocal, get_async_db
    from argilla_server.errors import ForbiddenOperationError
    from argilla_server.errors.future import UnprocessableEntityError
    from argilla_server.models import Dataset, Record, User
    from argilla_server.search_engine import SearchEngine, get_search_engine
    from argilla_server.security import auth
    from argilla_server.telemetry import TelemetryClient, get_telemetry_client
    from argilla_server.use_cases.responses.upsert_responses_in_bulk import UpsertResponsesInBulkUseCase

    router = APIRouter()
    limit_default = server_records.LIST_DATASET_RECORDS_LIMIT_DEFAULT
    limit_max = server_records.LIST_DATASET_RECORDS_LIMIT_LE

    @router.get("/datasets/{dataset_id}/records", response_model=Records, response_model_exclude_unset=True)
    async def list_dataset_records(
        *,
        db: AsyncSession = Depends(get_async_db),
        search_engine: SearchEngine = Depends(get_search_engine),
        telemetry_client: TelemetryClient = Depends(get_telemetry_client),
        dataset_id: UUID,
        include: Optional[RecordIncludeParam] = Depends(server_records.parse_record_include_param),
        offset: int = 0,
        limit: int = Query(default=limit_default, ge=1, le=limit_max),
        current_user: User = Security(auth.get_current_user),
    ):
        if not current_user.is_annotator:
            return await server_records.list_dataset_records(db=db, dataset_id=dataset_id, include=include,
                                                             offset=offset, limit=limit, current_user=current_user)
        found = await server_records.search_current_user_dataset_records(
            db=db, search_engine=search_engine, telemetry_client=telemetry_client, dataset_id=dataset_id,
            body=SearchRecordsQuery(), include=include, offset=offset, limit=limit, current_user=current_user)
        return Records(items=[item.record for item in found.items], total=found.total)

    @router.post("/datasets/{dataset_id}/records/search", response_model=SearchRecordsResult,
                 response_model_exclude_unset=True)
    async def search_dataset_records(
        *,
        db: AsyncSession = Depends(get_async_db),
        search_engine: SearchEngine = Depends(get_search_engine),
        telemetry_client: TelemetryClient = Depends(get_telemetry_client),
        dataset_id: UUID,
        body: SearchRecordsQuery,
        include: Optional[RecordIncludeParam] = Depends(server_records.parse_record_include_param),
        offset: int = Query(0, ge=0),
        limit: int = Query(default=limit_default, ge=1, le=limit_max),
        current_user: User = Security(auth.get_current_user),
    ):
        args = dict(db=db, search_engine=search_engine, dataset_id=dataset_id, body=body, include=include,
                    offset=offset, limit=limit, current_user=current_user)
        if not current_user.is_annotator:
            return await server_records.search_dataset_records(**args)
        return await server_records.search_current_user_dataset_records(telemetry_client=telemetry_client, **args)

    @router.put("/datasets/{dataset_id}/records/bulk", response_model=RecordsBulk)
    async def upsert_dataset_records_bulk(
        *,
        dataset_id: UUID,
        records_bulk_upsert: RecordsBulkUpsert,
        db: AsyncSession = Depends(get_async_db),
        search_engine: SearchEngine = Depends(get_search_engine),
        current_user: User = Security(auth.get_current_user),
    ):
        if not current_user.is_annotator:
            return await server_bulk.upsert_dataset_records_bulk(dataset_id=dataset_id,
                                                                 records_bulk_upsert=records_bulk_upsert, db=db,
                                                                 search_engine=search_engine, current_user=current_user)
        dataset = await Dataset.get_or_raise(db, dataset_id)
        await authorize(current_user, DatasetPolicy.search_records(dataset))  # a member of its workspace
        record_ids, responses = [], []
        for item in records_bulk_upsert.items:  # check every item before writing any
            record = None
            if item.id or item.external_id:
                key = {"id": item.id} if item.id else {"external_id": item.external_id}
                record = await Record.get_by(db, dataset_id=dataset.id, **key)
            if record is None:
                raise ForbiddenOperationError("an annotator cannot add records: log only records read from the dataset")
            for response in item.responses or []:
                if response.user_id != current_user.id:
                    raise ForbiddenOperationError("an annotator can submit only their own responses")
                responses.append({"record_id": record.id, **response.model_dump(exclude={"user_id"})})
            record_ids.append(record.id)
        if responses:
            items = ResponsesBulkCreate.model_validate({"items": responses}).items
            written = await UpsertResponsesInBulkUseCase(db, search_engine).execute(items, user=current_user)
            errors = [result.error.detail for result in written if result.error is not None]
            if errors:
                raise UnprocessableEntityError("; ".join(errors))
        # the records as the annotator sees them, read in a new session (this one holds them with every response)
        async with AsyncSessionLocal() as fresh:
            dataset = await Dataset.get_or_raise(fresh, dataset_id, options=[selectinload(Dataset.metadata_properties)])
            include = RecordIncludeParam(keys=["responses", "suggestions", "vectors"])
            records = await datasets.get_records_by_ids(fresh, record_ids, dataset_id=dataset.id, include=include,
                                                        user_id=current_user.id)
            for record in records:
                record.dataset = dataset
                record.metadata_ = await server_records._filter_record_metadata_for_user(record, current_user)
            return RecordsBulk(items=records)

    return router
