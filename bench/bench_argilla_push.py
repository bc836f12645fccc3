"""Push 10,000 pairs to a real local argilla-server (2.8.0, SQLite, prefdata's SQL search engine),
with the progress bar users see, and time it; then time the same push again (every pair already
there: the idempotent re-push that a resumed run does) and one annotator's first queue page.

    .venv/bin/python bench/bench_argilla_push.py            # 10,000 pairs
    .venv/bin/python bench/bench_argilla_push.py --n 2000

The server runs from a fresh folder (fresh database) with the cached server environment
(.prefdata/argilla/venv, built on first use); it is stopped by its pid at the end. Pairs come from
bench/synth.py (prompts ~200 characters, responses ~400), with a category and a judge label so each
record also carries a suggestion. Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()

    import httpx
    import polars as pl

    from bench.synth import make_synthetic_pairs
    from prefdata.argilla import add_user, push_pairs
    from prefdata.argilla.server import LocalArgilla, free_port

    synth, _ = make_synthetic_pairs(args.n, seed=0, fault_rate=0.0)
    rows = synth.select(
        "pair_id", "prompt", pl.col("chosen").alias("response_a"), pl.col("rejected").alias("response_b"), "category",
        pl.lit("a").alias("judge_label"), pl.lit(0.9).alias("judge_confidence"), pl.lit("bench-judge").alias("judge_model"),
    ).unique("pair_id", keep="first", maintain_order=True)

    with tempfile.TemporaryDirectory(prefix="bench-argilla-") as workdir:
        server = LocalArgilla(workdir, venv=REPO / ".prefdata" / "argilla" / "venv")
        start = time.perf_counter()
        info = server.start(port=free_port())
        started = time.perf_counter() - start
        try:
            start = time.perf_counter()
            first = push_pairs(rows, url=info.url, api_key=info.api_key, dataset="bench", overlap=2, progress=True)
            pushed = time.perf_counter() - start
            start = time.perf_counter()
            again = push_pairs(rows, url=info.url, api_key=info.api_key, dataset="bench", overlap=2, progress=False)
            repushed = time.perf_counter() - start
            key = add_user(url=info.url, api_key=info.api_key, username="bench-annotator", password="bench-password")
            queue = {"filters": {"and": [
                {"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": ["pending"]},
                {"type": "terms", "scope": {"entity": "record", "property": "status"}, "values": ["pending"]}]}}
            with httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": key}, timeout=120) as client:
                start = time.perf_counter()
                page = client.post(f"/api/v1/me/datasets/{first.dataset_id}/records/search",
                                   params={"limit": 10, "include": "responses"}, json=queue)
                queued = time.perf_counter() - start
                page.raise_for_status()
        finally:
            server.stop()

    print(f"server start (fresh database, cached environment): {started:.1f} s")
    print(f"push {first.pushed:,} records: {pushed:.1f} s ({first.pushed / pushed:,.0f} records/s); {first.summary()}")
    print(f"re-push, all {again.already_there:,} already there: {repushed:.1f} s")
    print(f"an annotator's first queue page over {page.json()['total']:,} pending records: {queued * 1000:.0f} ms")


if __name__ == "__main__":
    main()
