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


def _ngram_keys(ws: _Scratch, h: np.ndarray, counts: np.ndarray, n: int,
                keyed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the word n-grams of each row, keyed by row (row-major), and n-grams per row;
    `keyed=False`: the n-gram's hash alone, the same in whichever row it stands."""
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
    if keyed:
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
    parts = _map_chunks(texts, row_bytes, threads,
                        lambda ws, bufs, _start, a, b: _overlap_chunk(ws, bufs[0], bufs[1], a, b, n))
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


def _map_chunks(texts: Callable[[int, int], tuple[pl.Series, ...]], row_bytes: np.ndarray, threads: int | None,
                run: Callable[[_Scratch, list[tuple[np.ndarray, np.ndarray]], int, int, int], Any]) -> list[Any]:
    """`run(scratch, buffers, start, a, b)` on each chunk of rows (of about CHUNK_BYTES by `row_bytes`), in
    row order: `buffers` are the Arrow buffers (frames.utf8_buffer) of the texts `texts(start, stop)`
    gives for the chunk's block (about frames.BLOCK_BYTES of whole chunks), `start` the block's first
    row and a..b the chunk's rows counted from it. `texts` is called once per block, in row order, from the
    calling thread; the chunks run on `threads` threads (default min(2, CPUs)), each with its own
    scratch arrays."""
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
    parts: list[Any] = []
    try:
        for chunks in blocks:
            start, stop = chunks[0][0], chunks[-1][1]
            block = texts(start, stop)
            bufs = [utf8_buffer(t) for t in block]
            del block

            def one(ab: tuple[int, int]) -> Any:
                ws = getattr(local, "ws", None)
                if ws is None:
                    ws = local.ws = _Scratch()
                return run(ws, bufs, start, ab[0] - start, ab[1] - start)

            parts.extend(pool.map(one, chunks) if pool else map(one, chunks))
            del bufs
    finally:
        if pool:
            pool.shutdown()
    return parts


# -- n-grams of a reference set (decontamination: checks/isolation.py) --------------------------------


def ngram_hashes(texts: pl.Series, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every word n-gram of each text, hashed as `ngrams_in` hashes them (words and n-grams as above;
    the hash is the n-gram's alone, the same in any text), row-major; the n-grams per text; the words
    per text. For a reference set (a benchmark's prompts): every text is hashed in one pass."""
    if n < 1:
        raise ValueError("n must be >= 1")
    texts = texts.cast(pl.String).fill_null("")
    if len(texts) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    ws = _Scratch()
    h, words = _word_hashes(ws, "t", *utf8_buffer(texts), 0, len(texts))
    keys, per_row = _ngram_keys(ws, h, words, n, keyed=False)
    return keys.copy(), per_row.astype(np.int64), words.astype(np.int64)


def ngrams_in(texts: Callable[[int, int], pl.Series], row_bytes: np.ndarray, wanted: np.ndarray, n: int,
              threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Which of the `wanted` n-grams (sorted distinct hashes from `ngram_hashes`) each text holds:
    (row, index into `wanted`) once per distinct pair, in row order. The texts of rows a..b-1 are
    `texts(a, b)`, about `row_bytes` UTF-8 bytes each, hashed a chunk at a time as
    `overlap_in_blocks` hashes them; a 4 MiB bitmap of `wanted` discards most n-grams, the rest are
    looked up exactly (sorted search), so the cost is the hashing of the texts."""
    if n < 1:
        raise ValueError("n must be >= 1")
    empty = np.zeros(0, np.int64)
    if row_bytes.size == 0 or wanted.size == 0:
        return empty, empty
    shift = _U(64 - _TABLE_BITS)
    table = np.zeros(1 << _TABLE_BITS, np.bool_)  # read by every thread, written before any runs
    table[(wanted >> shift).astype(np.intp)] = True

    def run(ws: _Scratch, bufs: list[tuple[np.ndarray, np.ndarray]], start: int, a: int,
            b: int) -> tuple[np.ndarray, np.ndarray]:
        h, counts = _word_hashes(ws, "t", *bufs[0], a, b)
        keys, per_row = _ngram_keys(ws, h, counts, n, keyed=False)
        cand = np.flatnonzero(table[(keys >> shift).astype(np.intp)])
        if cand.size == 0:
            return empty, empty
        pos = np.searchsorted(wanted, keys[cand])
        pos[pos == wanted.size] = 0
        hit = wanted[pos] == keys[cand]
        cand, pos = cand[hit], pos[hit]
        if cand.size == 0:
            return empty, empty
        rows = np.repeat(np.arange(start + a, start + b, dtype=np.int64), per_row)[cand]
        pair = np.unique(rows * wanted.size + pos)  # one per (row, n-gram); sorted: row order
        return pair // wanted.size, pair % wanted.size

    parts = _map_chunks(lambda a, b: (texts(a, b),), row_bytes, threads, run)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
