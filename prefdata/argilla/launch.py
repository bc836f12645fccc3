"""Start argilla-server with prefdata's SQL search engine and the record routes that let annotators
use the Argilla SDK (annotator_routes.py). Run by `prefdata.argilla.server` with the server's own
virtual environment's python (argilla-server cannot share prefdata's environment), as

    python launch.py HOST PORT

with the ARGILLA_* variables already set (home path, database, search engine name). Not imported
by prefdata itself.

`python -m argilla_server start` cannot load a search-engine plugin, so this script registers the
engine first, then puts annotator_routes.py's routes in place of the server's own, and serves the
server's FastAPI app with uvicorn.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This folder holds prefdata modules named server.py, client.py...: keep it off the import path so
# nothing in the server's environment imports them by accident.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def _use_fake_redis() -> None:
    """argilla-server pings Redis at start and queues background jobs there (hub import/export,
    webhooks, re-computing record status after a distribution change). The annotation flow needs
    none of them, so unless the user points ARGILLA_REDIS_URL at a real Redis, an in-process
    fakeredis answers, and there is no daemon to start and stop."""
    if os.environ.get("ARGILLA_REDIS_URL"):
        return
    import fakeredis
    import redis

    server = fakeredis.FakeServer()
    redis.from_url = lambda *args, **kwargs: fakeredis.FakeRedis(server=server)


def _load(filename: str):
    """A module of this folder, by its path (the folder is off the import path, above)."""
    spec = importlib.util.spec_from_file_location(f"prefdata_{Path(filename).stem}", HERE / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ENGINE_WRITTEN_FOR = "2.8.0"  # sql_search.py and annotator_routes.py follow this server exactly


def main(host: str, port: int) -> None:
    from importlib.metadata import version  # not argilla_server itself: importing it builds the app

    installed = version("argilla-server")
    if installed != ENGINE_WRITTEN_FOR:
        sys.exit(f"argilla-server {installed} is installed, but prefdata's search engine is written for "
                 f"{ENGINE_WRITTEN_FOR}: remove the server environment so `prefdata argilla up` rebuilds it")
    _use_fake_redis()
    # the server reads its settings once, at its first import: name the engine before loading it
    os.environ["ARGILLA_SEARCH_ENGINE"] = "prefdata-sql"
    module = _load("sql_search.py")  # registers the engine
    if module.ENGINE_NAME != os.environ["ARGILLA_SEARCH_ENGINE"]:  # the server would fall back to another engine
        raise RuntimeError(f"sql_search.py registers the engine {module.ENGINE_NAME!r}, but the server is told to use "
                           f"{os.environ['ARGILLA_SEARCH_ENGINE']!r}")

    import uvicorn
    from argilla_server._app import app
    from argilla_server.api.routes import api_v1

    _load("annotator_routes.py").install(api_v1)  # the SDK's record calls, for annotators too
    uvicorn.run(app, host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
