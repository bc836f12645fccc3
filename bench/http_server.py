"""A real HTTP server on 127.0.0.1 (a free port) that serves on a background thread while in a
`with` block: the base of bench_judge.py's delay proxy and tests/scripted_server.py's scripted
OpenAI-style server."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalHTTPServer:
    """Serves `handler` on 127.0.0.1 from `__enter__` to `__exit__`; `base_url` ends in /v1 (the
    OpenAI client's base)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
