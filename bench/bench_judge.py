"""Pairwise LLM judging, sequential (concurrency 1) against concurrent, on the same pairs and the
same real local `transformers serve` (started here, stopped by its pid).

    .venv/bin/python bench/bench_judge.py                        # 32 pairs, concurrency 8
    .venv/bin/python bench/bench_judge.py --model PATH           # any local chat model

Every pair is judged in both orders, so one pair is two chat requests (pairwise-v1 template,
~1,400 characters each, temperature 0, at most --max-tokens reply tokens). The judge model is by
default a RANDOM-INIT char-level Llama (bench.tiny_models, "test" size, ~0.3M parameters): its replies
are gibberish and every verdict is undecided, which costs the same requests as real verdicts.

The server runs with OMP_NUM_THREADS=1 (see bench_sampling: on a shared machine torch's own thread
count spin-waits), and `--serve-flag` passes extra flags, e.g. `--serve-flag=--continuous-batching`.
A warm-up request loads the model before timing; the two modes alternate for --repeats rounds and
the fastest of each is reported.

What concurrency can buy here: `transformers serve` (without --continuous-batching) runs every
`model.generate` one after another on a single inference thread, so against a local CPU server the
judge's throughput is bounded by the server's compute and concurrent requests only overlap the
client and HTTP work. Concurrency pays where the round trip, not the server's compute, dominates
(remote and hosted endpoints, or servers that batch: vLLM, TGI). So the run is repeated through a
local proxy that delays each request by --rtt-ms before forwarding it to the same real server; the
two sections are printed separately. Figures only; no assertions.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


from bench.http_server import LocalHTTPServer  # noqa: E402


class DelayProxy(LocalHTTPServer):
    """Forwards each HTTP request to the real server after `delay` seconds: the round trip of a
    remote endpoint, which is what concurrency overlaps. The server behind it is unchanged."""

    def __init__(self, target_port: int, delay: float):
        import http.client
        from http.server import BaseHTTPRequestHandler

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                time.sleep(delay)
                conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=600)
                conn.request("POST", self.path, body, {"content-type": "application/json"})
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                self.send_header("content-type", reply.getheader("content-type", "application/json"))
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def log_message(self, *args):
                pass

        super().__init__(Handler)


def timed(base_url: str, model: str, pairs, concurrency: int, max_tokens: int, repeats: int) -> dict:
    """Fastest seconds and last report of each mode; the modes alternate so drift hits both."""
    from prefdata.collect.judging import PairwiseLLMJudge

    judges = {name: PairwiseLLMJudge(base_url, model, concurrency=c, max_tokens=max_tokens, timeout=300)
              for name, c in (("sequential", 1), (f"concurrent ({concurrency})", concurrency))}
    judges["sequential"].judge(pairs[:1])  # warm-up: the server loads the model on the first request
    best = {name: float("inf") for name in judges}
    reports = {}
    for _ in range(repeats):
        for name, judge in judges.items():
            start = time.perf_counter()
            judge.judge(pairs)
            best[name] = min(best[name], time.perf_counter() - start)
            reports[name] = judge.last_report
    return {name: (best[name], reports[name]) for name in judges}


def show(title: str, results: dict, n_pairs: int, repeats: int) -> None:
    print(title)
    print(f"  {'mode':<18}{'seconds':>9}{'pairs/s':>9}  report")
    for name, (seconds, report) in results.items():
        print(f"  {name:<18}{seconds:>9.2f}{n_pairs / seconds:>9.2f}  {report.summary()}")
    (sequential, _), (concurrent, _) = results.values()
    print(f"  speed-up: {sequential / concurrent:.2f}x (fastest of {repeats} alternating rounds each)")


def make_pairs(n: int):
    from prefdata.collect.judging import PairToJudge

    rng = random.Random(0)
    pairs = []
    for _ in range(n):
        x, y = rng.randint(0, 99), rng.randint(0, 99)
        wrong = x + y + rng.choice([-10, -1, 1, 10])
        pairs.append(PairToJudge(f"What is {x}+{y}?", f"The answer is {x + y}.", f"The answer is {wrong}."))
    return pairs


def main() -> None:
    from bench.tiny_models import model_bench_parser

    ap = model_bench_parser(__doc__, "a local chat model folder (default: build a random tiny one)")
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rtt-ms", type=float, default=150.0,
                    help="also time through a proxy adding this delay per request (0: skip)")
    ap.add_argument("--serve-flag", action="append", default=[], help="extra `transformers serve` flag (repeatable)")
    args = ap.parse_args()

    from prefdata.collect.local_serve import TransformersServe, serve_command
    from bench.tiny_models import build_tiny_llama, n_params

    tmp = tempfile.TemporaryDirectory()
    path = Path(args.model) if args.model else build_tiny_llama(Path(tmp.name) / "judge", size="test")
    pairs = make_pairs(args.pairs)
    server = TransformersServe(Path(tmp.name) / "serve.log", extra_env={"OMP_NUM_THREADS": "1"},
                               extra_flags=args.serve_flag)
    with server:
        direct = timed(server.base_url, str(path), pairs, args.concurrency, args.max_tokens, args.repeats)
        delayed = None
        if args.rtt_ms:
            with DelayProxy(server.port, args.rtt_ms / 1000) as proxy:
                delayed = timed(proxy.base_url, str(path), pairs, args.concurrency, args.max_tokens, args.repeats)

    print(f"server: HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 transformers {' '.join(serve_command(server.port, args.serve_flag)[1:])}")
    print(f"judge model: {path} ({n_params(path) / 1e6:.2f}M params){'' if args.model else ' RANDOM weights'}; "
          f"{args.pairs} pairs x 2 orders, max_tokens {args.max_tokens}")
    show("direct to the local server:", direct, args.pairs, args.repeats)
    if delayed:
        show(f"through a proxy adding {args.rtt_ms:.0f} ms per request (a remote endpoint's round trip):",
             delayed, args.pairs, args.repeats)


if __name__ == "__main__":
    main()
