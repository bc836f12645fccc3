"""A tiny local HTTP server speaking the OpenAI chat/completions wire format from a script.

For the faults a real server cannot be made to produce on demand (429, 5xx, slow replies) and for
judges with a known behaviour (always "[[A]]", always the truly better side). It is a real HTTP
server on 127.0.0.1: the openai client, its timeouts and our retries run unchanged against it.

    def script(body: dict, index: int) -> Reply    # index: 0-based count of requests so far
    with ScriptedServer(script) as server: server.base_url, server.requests
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from bench.http_server import LocalHTTPServer  # the repository root is on sys.path (tests/conftest.py)


@dataclass
class Reply:
    status: int = 200
    content: str | list[str] = ""   # chat message content (or completion text); a list gives several choices
    delay: float = 0.0              # seconds to wait before answering (timeouts)
    headers: dict = field(default_factory=dict)


@dataclass
class Seen:
    time: float
    path: str
    body: dict
    headers: dict  # names lower-cased


def _payload(path: str, body: dict, reply: Reply) -> dict:
    if reply.status != 200:
        return {"error": {"message": f"scripted {reply.status}", "type": "scripted", "code": reply.status}}
    contents = reply.content if isinstance(reply.content, list) else [reply.content]
    if path.endswith("/chat/completions"):
        choices = [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": c}}
                   for i, c in enumerate(contents)]
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"), "choices": choices}
    choices = [{"index": i, "finish_reason": "stop", "text": c, "logprobs": None} for i, c in enumerate(contents)]
    return {"id": "x", "object": "text_completion", "created": 0, "model": body.get("model", "m"), "choices": choices}


class ScriptedServer(LocalHTTPServer):
    def __init__(self, script):
        self.script, self.requests, self.in_flight, self.max_in_flight = script, [], 0, 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with outer._lock:
                    index = len(outer.requests)
                    outer.requests.append(Seen(time.monotonic(), self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    reply = outer.script(body, index)
                    time.sleep(reply.delay)
                    data = json.dumps(_payload(self.path, body, reply)).encode()
                    self.send_response(reply.status)
                    for k, v in {"content-type": "application/json", "content-length": str(len(data)), **reply.headers}.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): that is the point of a slow reply
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

            def log_message(self, *args):
                pass

        super().__init__(Handler)


# -- judges with a known behaviour ----------------------------------------------------------------

_ANSWER = re.compile(r"\[The Start of Assistant (A|B)'s Answer\]\n(.*?)\n\[The End of Assistant \1's Answer\]", re.S)
_QUESTION = re.compile(r"\[User Question\]\n(.*?)\n\n\[The Start", re.S)


def presented(body: dict) -> tuple[str, str, str]:
    """(question, answer shown as A, answer shown as B) from a pairwise-v1 judge request."""
    user = body["messages"][-1]["content"]
    answers = dict(_ANSWER.findall(user))
    return _QUESTION.search(user).group(1), answers["A"], answers["B"]


def truthful_arithmetic(body: dict, index: int) -> Reply:
    """A judge that is right about "What is X?" questions: the side giving eval(X) wins."""
    question, a, b = presented(body)
    x, op, y = re.fullmatch(r"What is (\d+)([+*-])(\d+)\?", question).groups()
    truth = str({"+": int.__add__, "-": int.__sub__, "*": int.__mul__}[op](int(x), int(y)))
    verdict = "[[tie]]" if (a.strip() == truth) == (b.strip() == truth) else ("[[A]]" if a.strip() == truth else "[[B]]")
    return Reply(content=f"Checking the arithmetic. {verdict}")


def always_a(body: dict, index: int) -> Reply:
    return Reply(content="Assistant A is better. [[A]]")
