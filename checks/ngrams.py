"""Word n-gram overlap: the hash engine behind `answer_leakage` (checks/content.py).

The overlap between each row's prompt and response, exact up to 64-bit hashing, vectorised
with numpy over the Arrow byte buffers in chunks of rows (so scratch arrays stay small and are
reused; fresh allocations are what make numpy slow at this scale):
  words    maximal runs of bytes > 0x20 (whitespace and control characters separate words;
           punctuation stays attached, as it does in copied text), ASCII letters lower-cased;
  word id  the word's first and last 8 bytes and its length (exact for words up to 16 bytes);
  n-gram   polynomial hash of n consecutive word ids within one text (prefix sums with wrapping
           uint64 arithmetic, divided back by the start position's power);
  match    n-gram hashes keyed by row; a 4 MiB bitmap discards most non-matches, the rest are
           matched exactly (sorted search). share = response n-grams (positions) found in the
           prompt / response n-grams.
Rows are hashed in chunks of about CHUNK_BYTES, their Arrow buffers made a block of about
frames.BLOCK_BYTES at a time. `mix64` is also the byte n-gram hash of checks/tfidf.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from prefdata.checks import frames
from prefdata.checks.frames import len_bytes, utf8_buffer

_U = np.uint64
_K1 = _U(0x9E3779B97F4A7C15)
_K2 = _U(0xBF58476D1CE4E5B9)
_K3 = _U(0x94D049BB133111EB)


def mix64(x: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """In-place splitmix64 finaliser of a uint64 array (a bijection, so distinct inputs stay distinct)."""
    tmp = np.empty_like(x) if tmp is None else tmp[: x.size]
    np.right_shift(x, _U(30), out=tmp)
    x ^= tmp
    x *= _K2
    np.right_shift(x, _U(27), out=tmp)
    x ^= tmp
    x *= _K3
    np.right_shift(x, _U(31), out=tmp)
    x ^= tmp
    return x


_PAD = 8
_POLY = _U(0xD6E8FEB86659FD93)
_TABLE_BITS = 22
CHUNK_BYTES = 1 << 20


def _inverse64(a: int) -> int:
    y = a  # Newton's iteration for the inverse of an odd number modulo 2**64
    for _ in range(6):
        y = (y * (2 - a * y)) % (1 << 64)
    return y


_POLY_INV = _U(_inverse64(int(_POLY)))


class _Scratch:
    """Per-thread reusable arrays, grown on demand."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: Any) -> np.ndarray:
        arr = self.arrays.get(name)
        if arr is None or arr.size < size or arr.dtype != dtype:
            arr = np.empty(max(size, 4096) * 5 // 4, dtype)
            self.arrays[name] = arr
        return arr[:size]

    def powers(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        p = self.arrays.get("pow")
        if p is None or p.size < size:
            k = max(size, 1 << 16) * 2
            with np.errstate(over="ignore"):
                p = np.full(k, _POLY, dtype=np.uint64)
                p[0] = 1
                np.cumprod(p, out=p)
                q = np.full(k, _POLY_INV, dtype=np.uint64)
                q[0] = 1
                np.cumprod(q, out=q)
            self.arrays["pow"], self.arrays["ipow"] = p, q
        return self.arrays["pow"][:size], self.arrays["ipow"][:size]


def _word_hashes(
    ws: _Scratch, tag: str, data: np.ndarray, offsets: np.ndarray, a: int, b: int
) -> tuple[np.ndarray, np.ndarray]:
    """Word ids of rows a..b of one text column (into scratch `tag`) and the word count per row."""
    lo, hi = int(offsets[a]), int(offsets[b])
    n = hi - lo
    buf = ws.get(tag + "buf", n + 2 * _PAD, np.uint8)
    buf[:_PAD] = 0
    buf[_PAD + n :] = 0
    buf[_PAD : _PAD + n] = data[lo:hi]
    tmp8 = ws.get("tmp8", buf.size, np.uint8)  # ASCII lower-case in place: buf |= 32 where 'A'..'Z'
    np.subtract(buf, np.uint8(65), out=tmp8)
    upper = np.less(tmp8, np.uint8(26), out=ws.get("upper", buf.size, np.bool_))
    np.left_shift(upper.view(np.uint8), np.uint8(5), out=tmp8)
    np.bitwise_or(buf, tmp8, out=buf)
    is_word = np.greater(buf, np.uint8(32), out=ws.get("w", buf.size, np.bool_))
    edge = np.not_equal(is_word[1:], is_word[:-1], out=ws.get("edge", buf.size - 1, np.bool_))
    idx = np.flatnonzero(edge)
    idx += 1
    row_start = offsets[a : b + 1] - (lo - _PAD)
    # a row boundary inside a run of word bytes (an odd number of edges before it and none at it):
    # split the word there, i.e. insert the boundary twice (an end, then a start)
    inner = np.unique(row_start[1:-1])
    before = np.searchsorted(idx, inner, "left")
    inside = ((before & 1) == 1) & (np.searchsorted(idx, inner, "right") == before)
    if inside.any():
        idx = np.insert(idx, np.repeat(before[inside], 2), np.repeat(inner[inside], 2))
    starts, ends = idx[0::2], idx[1::2]
    counts = np.diff(np.searchsorted(starts, row_start))
    w = starts.size
    view = np.ndarray((buf.size - 7,), dtype="<u8", buffer=buf, strides=(1,))
    length = np.subtract(ends, starts, out=ws.get("len", w, np.int64)).view(np.uint64)
    shift = np.minimum(length, _U(8), out=ws.get("shift", w, np.uint64))
    np.subtract(_U(8), shift, out=shift)
    np.left_shift(shift, _U(3), out=shift)
    first = ws.get(tag + "h", w, np.uint64)
    first[:] = view[starts]
    np.left_shift(first, shift, out=first)
    np.right_shift(first, shift, out=first)
    last = ws.get("last", w, np.uint64)
    last[:] = view[np.subtract(ends, 8, out=ws.get("e8", w, np.int64))]
    np.right_shift(last, shift, out=last)
    first *= _K1
    last *= _K2
    first += last
    first += length
    return first, counts


def _ngram_keys(ws: _Scratch, h: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the word n-grams of each row, keyed by row (row-major), and n-grams per row."""
    w = h.size
    m = w - n + 1
    per_row = np.maximum(counts - n + 1, 0)
    if m <= 0 or not per_row.any():
        return np.zeros(0, np.uint64), per_row
    p, q = ws.powers(w + 1)
    prefix = ws.get("prefix", w + 1, np.uint64)
    prefix[0] = 0
    np.multiply(h, p[:w], out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    g = np.subtract(prefix[n:], prefix[:m], out=ws.get("g", m, np.uint64))
    g *= q[:m]
    row = np.repeat(np.arange(1, counts.size + 1, dtype=np.uint64), counts)
    valid = np.equal(row[:m], row[n - 1 :], out=ws.get("valid", m, np.bool_))
    keys = g[valid]
    keys += np.repeat(np.arange(1, counts.size + 1, dtype=np.uint64), per_row) * _K1
    return mix64(keys, ws.get("mixtmp", keys.size, np.uint64)), per_row


def _overlap_chunk(
    ws: _Scratch, prompt_buf: tuple, response_buf: tuple, a: int, b: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hp, cp = _word_hashes(ws, "p", *prompt_buf, a, b)
    kp, _ = _ngram_keys(ws, hp, cp, n)
    hr, cr = _word_hashes(ws, "r", *response_buf, a, b)
    kr, per_row = _ngram_keys(ws, hr, cr, n)
    hits = np.zeros(b - a, np.int64)
    if kp.size and kr.size:
        table = ws.arrays.get("table")
        if table is None:
            table = ws.arrays["table"] = np.zeros(1 << _TABLE_BITS, np.bool_)
        shift = _U(64 - _TABLE_BITS)
        ip = (kp >> shift).astype(np.intp)
        ir = (kr >> shift).astype(np.intp)
        table[ip] = True
        maybe_r = table[ir]
        table[ip] = False
        if maybe_r.any():
            cand = np.flatnonzero(maybe_r)
            table[ir[cand]] = True
            kp_cand = np.sort(kp[table[ip]])
            table[ir[cand]] = False
            kc = kr[cand]
            pos = np.searchsorted(kp_cand, kc)
            pos[pos == kp_cand.size] = 0
            found = cand[kp_cand[pos] == kc] if kp_cand.size else cand[:0]
            if found.size:
                rows = np.repeat(np.arange(b - a), per_row)
                hits = np.bincount(rows[found], minlength=b - a)
    return hits, per_row, cr


def word_ngram_overlap(
    prompts: pl.Series, responses: pl.Series, n: int = 8, threads: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (response n-grams found in the prompt, response n-grams, response words).

    Vectorised; see the comment above for the definitions. `threads` defaults to min(2, CPUs).
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if len(prompts) != len(responses):
        raise ValueError("prompts and responses differ in length")
    if len(prompts) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    prompts, responses = prompts.cast(pl.String).fill_null(""), responses.cast(pl.String).fill_null("")
    return overlap_in_blocks(lambda a, b: (prompts.slice(a, b - a), responses.slice(a, b - a)),
                              len_bytes(prompts) + len_bytes(responses), n, threads)


def overlap_in_blocks(
    texts: Callable[[int, int], tuple[pl.Series, pl.Series]], row_bytes: np.ndarray, n: int, threads: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`word_ngram_overlap` of the (prompt, response) texts of rows a..b-1 given by `texts(a, b)`,
    whose UTF-8 sizes together are about `row_bytes` per row (they only size the chunks and
    blocks). Rows are hashed in chunks of about CHUNK_BYTES; their Arrow buffers are made a block of
    about frames.BLOCK_BYTES (whole chunks) at a time, so the columns are never copied whole. A
    chunk's result depends only on its rows' bytes, so the blocks change nothing. `texts` is called
    once per block, in row order, from the calling thread, and the blocks cover every row."""
    rows = row_bytes.size
    cum = np.cumsum(row_bytes)
    cuts = np.searchsorted(cum, np.arange(CHUNK_BYTES, int(cum[-1]), CHUNK_BYTES), "right")
    edges = np.unique(np.concatenate([[0], cuts, [rows]]))
    bounds = [(int(x), int(y)) for x, y in zip(edges[:-1], edges[1:]) if y > x]
    blocks: list[list[tuple[int, int]]] = [[]]
    block_start = 0
    for a, b in bounds:
        if blocks[-1] and int(cum[b - 1]) - block_start > frames.BLOCK_BYTES:
            blocks.append([])
            block_start = int(cum[a - 1])
        blocks[-1].append((a, b))
    local = threading.local()
    threads = min(2, os.cpu_count() or 1) if threads is None else max(1, int(threads))
    pool = ThreadPoolExecutor(threads) if threads > 1 and len(bounds) > 1 else None
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    try:
        for chunks in blocks:
            start, stop = chunks[0][0], chunks[-1][1]
            prompt_block, response_block = texts(start, stop)
            pbuf, rbuf = utf8_buffer(prompt_block), utf8_buffer(response_block)
            del prompt_block, response_block

            def run(ab: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
                ws = getattr(local, "ws", None)
                if ws is None:
                    ws = local.ws = _Scratch()
                return _overlap_chunk(ws, pbuf, rbuf, ab[0] - start, ab[1] - start, n)

            parts.extend(pool.map(run, chunks) if pool else map(run, chunks))
            del pbuf, rbuf
    finally:
        if pool:
            pool.shutdown()
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]
