"""The MinHash-LSH engine of the near-duplicate check (checks/dedup.py holds the rules):
signatures, LSH banding, candidate pairs, the signature screen and exact Jaccard verification.

It works on rows of text that the caller prepares (`RowTexts`: checks/dedup.py normalises them a
block of rows at a time and finds exact copies); nothing here knows about normalisation or
preference pairs. The pipeline (checks/dedup.py describes step 1, exact copies):

2. Shingles: byte n-grams (default 5) of the UTF-8 normalised text. Character 5-grams rather than
   word 3-grams because prompts are short: a 200-character prompt has ~196 character 5-grams but
   only ~30 word 3-grams, so with word shingles one changed word moves the Jaccard by ~0.1 and a
   0.8 threshold becomes a coin toss; character shingles also need no tokeniser (CJK, code) and
   are robust to punctuation. For ASCII text byte and character n-grams are the same. Each window
   of n bytes is read as one integer (a strided unaligned uint64 view of the byte buffer), which
   is an exact, collision-free shingle identity; it is then mixed to a 32-bit hash.
3. Signatures: one-permutation hashing with optimal densification (Li, Owen & Zhang 2012,
   "One permutation hashing"; Shrivastava 2017, "Optimal densification for fast and accurate
   minwise hashing"). Each shingle is hashed once; its hash picks one of `num_perm` bins and the
   signature keeps the minimum per bin; empty bins borrow from a bin chosen by a doc-independent
   probe sequence. Two signatures agree in a bin with probability equal to the Jaccard, as with
   `num_perm` independent permutations, at the cost of one hash per shingle instead of `num_perm`.
4. LSH: `bands` x `rows` of the signature (default for 0.8 and 128: 25 bands x 5 rows). The split
   is chosen so a pair at exactly the threshold Jaccard becomes a candidate with probability
   >= 0.999 (1 - (1 - 0.8^5)^25 = 0.99995); the S-curve knee, (1/b)^(1/r) ~ 0.53, sits below the
   threshold on purpose: candidates are verified exactly, so a low knee costs some verification
   time and buys recall. (datasketch's MinHashLSH picks 9 x 13 for 0.8 / 128, which minimises
   unverified false positives and negatives together and finds a pair at J = 0.8 with p ~ 0.40.)
   Candidates are texts sharing a band key, found per band by sorting the keys. A bucket's first
   `MAX_ALL_PAIRS_BUCKET` texts (in text order) are candidates all pairs, and each further member
   is linked to the bucket's first text (a star), so the work stays linear in the bucket size; and
   texts joining later never change the candidates among earlier ones (a grown version's edges
   among its parent's texts are its parent's, so it starts from the parent's clusters: `known`,
   and of its parent's stored values holds only the texts sharing a band key with a new one).
5. Verification: bands are processed one after another, candidates in batches; a candidate whose
   two texts are already in one cluster is skipped, the others get the exact Jaccard of their
   shingle sets (recomputed for those texts only) and are dropped below the threshold, so every
   linked pair really has "Jaccard of byte n-gram sets >= threshold" (no false positives; a
   cluster may chain such pairs, as any transitive dedup does). Skipping
   connected pairs keeps templated data (thousands of prompts sharing most of their text) cheap.
   Reused text (a chosen reply shared by three sibling pairs, canned refusals) makes many pairs
   candidates at Jaccard 0.4-0.7, so before exact verification a candidate is screened on its
   signatures (`_Screen`: 8 bits of each value; dropped when its estimate is SCREEN_SIGMAS
   deviations below the threshold), and a pair found below the threshold is remembered and never
   verified again when it meets in another band. `n_lsh_candidates`, `n_screened_out` and
   `n_candidate_pairs` (exact verifications) in the result's details count this work. The pairs
   that pass are screened again, the same way, on a longer second signature made only for their
   texts (`_fine_screen`, 256 values, and up to 1,024 where both texts are long enough to fill
   them: FINE_LEVELS): sibling pairs at Jaccard 0.6-0.7 mostly stop there.
6. Clusters: verified pairs are unioned (vectorised union-find, roots = smallest index), i.e.
   clusters are connected components; each cluster's first row (in frame order) is kept, every
   later member is offending.
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
import polars as pl

from .base import default
from .frames import large_binary

# near_duplicates' parameters, set in checks/checklist.yaml (checks/dedup.py cites the sources for
# 5-grams, ~128 values and Jaccard 0.8). The constants below are the engine's own tuning, not check
# parameters: how it bounds its memory and time, and the probabilities (< 1e-9, 0.999) with which a
# pair at the threshold stays found; a config has no reason to change them.
DEFAULT_NUM_PERM = default("near_duplicates", "num_perm")
DEFAULT_NGRAM = default("near_duplicates", "ngram")
# A pair exactly at the threshold Jaccard must become an LSH candidate with at least this probability.
MIN_CANDIDATE_PROB = 0.999
# A bucket's this many smallest members are linked all pairs, any further member to the smallest (a star).
MAX_ALL_PAIRS_BUCKET = 16
# Bytes of text per hashing chunk: small enough for its temporaries (~30x this) to stay in cache.
CHUNK_BYTES = 1 << 18
# At most this many texts per hashing chunk (its signature matrix is CHUNK_TEXTS x num_perm).
CHUNK_TEXTS = 1 << 15
# Candidate pairs verified per batch (bounds the verification's temporary arrays).
VERIFY_BATCH = 20_000
# Within a batch, bytes of text whose exact shingle sets are built at once (~60 bytes each).
VERIFY_BYTES = 1 << 22
# The signature screen (step 5): a candidate whose Jaccard, estimated from 8 bits of each of its
# `num_perm` signature values, lies more than SCREEN_SIGMAS standard deviations below the threshold
# is dropped without exact verification. At 128 values and J = 0.8 the estimate's deviation is
# 0.035, so the cut sits at ~0.59 and a pair at the threshold is lost with probability < 1e-9.
SCREEN_SIGMAS = 6.0
# The screen applies only when both texts have at least this many bytes per signature value: then
# nearly every one-permutation bin holds a shingle of its own, and the values behave as independent
# draws (short texts borrow values across empty bins, which widens the estimate's spread).
SCREEN_MIN_BYTES_PER_VALUE = 2
# The fine screen (_fine_screen, in exact verification): a candidate the screen keeps is screened
# again on FINE_NUM_PERM values of a second signature (another hash), made only for the texts that
# reach verification. At 256 values the deviation at J = 0.8 is 0.025, so the cut sits at ~0.65
# instead of ~0.59: reused text (sibling pairs at Jaccard 0.6-0.7) mostly stops here instead of
# costing an exact Jaccard each (69% fewer at 200k realistic pairs), and a pair at the threshold is
# still lost with probability < 1e-9. It applies where both texts have SCREEN_MIN_BYTES_PER_VALUE
# bytes per value (517 bytes); shorter ones go to exact verification as before.
FINE_NUM_PERM = 256
FINE_SEED = 104_729
FINE_MAX_PROBES = 256  # densification probes (a table of FINE_MAX_PROBES x values)
# Longer texts are screened on more values of the same second signature (one hash per shingle
# whatever the count, bins by the hash's top bits): a pair whose two texts both have
# SCREEN_MIN_BYTES_PER_VALUE bytes per value of a longer level (and fill FINE_MIN_FILLED of its bins)
# is screened there, at the same SCREEN_SIGMAS: at 384 values (texts of 773 bytes or more) the cut
# moves to ~0.68, at 512 (1,029 bytes) to ~0.69, at 768 to ~0.71, at 1,024 (2,053 bytes) to ~0.73, and
# a pair at the threshold is still lost with probability < 1e-9. Sampled replies that start alike make
# sibling pairs at Jaccard 0.6-0.72 (bench/realistic.py's collections shape): at 300k of its pairs the
# exact verifications went 39,202 -> 18,418 with these levels, the same pairs found.
FINE_LEVELS = (1024, 768, 512, 384, FINE_NUM_PERM)
# ...and where each text's own shingles fill at least this share of the bins: a text that repeats
# itself has few distinct shingles however long it is, and its borrowed values are not independent.
FINE_MIN_FILLED = 0.8

_EMPTY = np.uint32(0xFFFFFFFF)
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


class RowTexts(Protocol):
    """What the engine needs of the rows it clusters (checks/dedup.py `_Texts`): their count, row
    blocks of bounded size, each block's prepared texts (one per row), the texts of chosen rows,
    a 64-bit hash per text, and for each row the first row with the identical text."""

    n: int

    def blocks(self) -> list[tuple[int, int]]: ...
    def parts(self, rows: np.ndarray | tuple[int, int]) -> list[pl.Series]: ...
    def join(self, parts: list[pl.Series]) -> pl.Series: ...
    def text(self, rows: np.ndarray | tuple[int, int]) -> pl.Series: ...
    def hash(self, block: pl.Series, seed: int) -> np.ndarray: ...
    def first_copies(self, key: np.ndarray) -> np.ndarray: ...


# ----------------------------------------------------------------------------------------------
# building blocks

def lsh_params(threshold: float, num_perm: int, min_prob: float = MIN_CANDIDATE_PROB) -> tuple[int, int]:
    """(bands, rows): the most rows per band such that a pair at `threshold` is a candidate with
    probability >= `min_prob` (1 - (1 - t^r)^b), using b = num_perm // r bands."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        b = num_perm // r
        if b < 1:
            break
        if 1.0 - (1.0 - threshold**r) ** b >= min_prob:
            best = (b, r)
    return best


def _texts_buffer(texts: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of all texts back to back, followed by at least 8 padding bytes (so 8-byte windows
    can be read at every position), and int64 offsets (n + 1). One copy (polars -> arrow), no more:
    the padding is a sentinel text appended before the conversion."""
    n = len(texts)
    padded = texts.cast(pl.String).fill_null("").clone().append(pl.Series([" " * 8], dtype=pl.String))
    arr = large_binary(padded)
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset : arr.offset + n + 2]
    base, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8)[base:end]
    return data, offsets[: n + 1] - base


def _windows(data: np.ndarray, start: int, length: int, ngram: int) -> np.ndarray:
    """Exact shingle keys: for each byte position, the next `ngram` bytes as the top bytes of a uint64."""
    view = np.ndarray((length,), dtype="<u8", buffer=data, offset=start, strides=(1,))
    return view << np.uint64(8 * (8 - ngram))


def _short_keys(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, ngram: int) -> np.ndarray:
    """Keys of texts shorter than `ngram` bytes (their one shingle is the whole text). The low byte
    holds length + 1, so they never equal a full n-gram key (whose low bytes are zero)."""
    if starts.size == 0:
        return np.zeros(0, dtype=np.uint64)
    view = np.ndarray((data.size - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    raw = view[starts]
    mask = np.where(lengths > 0, (np.uint64(1) << (8 * lengths.astype(np.uint64))) - np.uint64(1), 0)
    mask = mask.astype(np.uint64)
    return ((raw & mask) << np.uint64(8 * (8 - ngram))) | (lengths.astype(np.uint64) + np.uint64(1))


def _hash32(x: np.ndarray, seed: int) -> np.ndarray:
    """Mix 64-bit keys to 32-bit hashes: multiply, xor-shift, multiply, keep the top 32 bits."""
    h = x * (_M1 ^ np.uint64((seed * 2 + 1) & 0xFFFFFFFFFFFFFFFF) | np.uint64(1))
    h ^= h >> np.uint64(32)
    h *= _M2
    h >>= np.uint64(32)
    return h.astype(np.uint32)


def _bin_of(h32: np.ndarray, num_perm: int) -> np.ndarray:
    if num_perm & (num_perm - 1) == 0:
        return h32 >> np.uint32(32 - int(math.log2(num_perm))) if num_perm > 1 else np.zeros_like(h32)
    return ((h32.astype(np.uint64) * np.uint64(num_perm)) >> np.uint64(32)).astype(np.uint32)


class _Densifier:
    """Optimal densification: an empty bin j takes the value of bin probe[t, j] for the first
    t = 0, 1, ... whose bin is non-empty. The probe table depends on (t, j) only, never on the
    text, so two texts with the same non-empty bins borrow identically."""

    def __init__(self, num_perm: int, seed: int, max_probes: int | None = None):
        self.k = num_perm
        t = max_probes or max(64, 32 * num_perm)
        j = np.arange(t * num_perm, dtype=np.uint64) + np.uint64(num_perm)
        h = _hash32(j, seed + 7919).astype(np.uint64)
        self.probes = ((h * np.uint64(num_perm)) >> np.uint64(32)).astype(np.intp).reshape(t, num_perm)

    def __call__(self, sig: np.ndarray) -> np.ndarray:
        k = self.k
        flat = sig.reshape(-1)
        empty = np.flatnonzero(flat == _EMPTY)
        if empty.size == 0:
            return sig
        out = flat.copy()
        base = empty - empty % k  # start of the text's row
        col = empty - base
        for probe in self.probes:
            vals = flat[base + probe[col]]
            ok = vals != _EMPTY
            out[empty[ok]] = vals[ok]
            keep = ~ok
            empty, base, col = empty[keep], base[keep], col[keep]
            if empty.size == 0:
                return out.reshape(sig.shape)
        # vanishingly rare: fall back to the text's overall minimum (consistent too)
        out[empty] = sig.min(axis=1)[base // k]
        return out.reshape(sig.shape)


def _band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(bands, n) uint64: each band's `rows` signature values hashed together with the band index."""
    n = sig.shape[0]
    s = sig[:, : bands * rows].reshape(n, bands, rows).transpose(1, 2, 0)  # (bands, rows, n)
    h = np.empty((bands, n), dtype=np.uint64)
    h[:] = (np.arange(bands, dtype=np.uint64) * _M3 + np.uint64(1))[:, None]
    for i in range(rows):
        h ^= s[:, i, :]
        h *= _M1
        h ^= h >> np.uint64(29)
    h *= _M2
    h ^= h >> np.uint64(32)
    return h


def _signature_chunk(
    data: np.ndarray,
    offsets: np.ndarray,
    d0: int,
    d1: int,
    ngram: int,
    num_perm: int,
    seed: int,
    densify: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """(d1 - d0, num_perm) densified one-permutation MinHash signatures of texts d0..d1-1."""
    k = num_perm
    n = d1 - d0
    starts = offsets[d0:d1]
    ends = offsets[d0 + 1 : d1 + 1]
    lengths = ends - starts
    start, stop = int(starts[0]), int(ends[-1])
    sig = np.full(n * k + 1, _EMPTY, dtype=np.uint32)
    dummy = n * k
    if stop > start:
        h32 = _hash32(_windows(data, start, stop - start, ngram), seed)
        idx = np.repeat(np.arange(0, n * k, k, dtype=np.uint32), lengths)
        idx += _bin_of(h32, k)
        # windows that run past the end of their text are not shingles: send them to a dummy slot
        for j in range(1, ngram):
            pos = ends - j
            idx[pos[pos >= starts] - start] = dummy
        np.minimum.at(sig, idx, h32)
    short = np.flatnonzero(lengths < ngram)
    if short.size:
        h = _hash32(_short_keys(data, starts[short], lengths[short], ngram), seed)
        np.minimum.at(sig, short.astype(np.int64) * k + _bin_of(h, k), h)
    return densify(sig[:dummy].reshape(n, k))


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    ordered = pl.Series(values, dtype=pl.UInt64).sort().to_numpy()  # polars' sort is ~2x numpy's here
    if ordered.size:
        ordered = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    return ordered


def _dense_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each value among them) -- np.unique(return_inverse=True) by sort."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.concatenate(([True], ordered[1:] != ordered[:-1])) if ordered.size else np.zeros(0, bool)
    inverse = np.empty(values.size, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _shingle_sets(texts: pl.Series, ngram: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Exact shingle sets of `texts`: a sorted uint64 array with one entry (text index << b | shingle)
    per distinct shingle of each text, the shingle as its exact byte value when text index and shingle
    fit in 64 bits together, else as a dense id; and the int64 start of each text's entries (n + 1)."""
    data, offsets = _texts_buffer(texts)
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    total = int(offsets[-1])
    x = _windows(data, 0, total, ngram)
    d = np.repeat(np.arange(n, dtype=np.uint64), lengths)
    keep = np.arange(total, dtype=np.int64) + ngram <= offsets[1:][d.astype(np.intp)]
    x, d = x[keep], d[keep]
    short = np.flatnonzero(lengths < ngram)
    if short.size:
        x = np.concatenate([x, _short_keys(data, offsets[:-1][short], lengths[short], ngram)])
        d = np.concatenate([d, short.astype(np.uint64)])
    shift = 8 * (8 - ngram)
    shingle_bits = 8 * ngram + 3  # the n bytes, and the low 3 bits that mark texts shorter than n
    doc_bits = max(1, int(n).bit_length())
    if shingle_bits + doc_bits <= 64:
        sid = ((x >> np.uint64(shift)) << np.uint64(3)) | (x & np.uint64(7))
        bits = shingle_bits
    else:
        sid = _dense_ids(x)[1].astype(np.uint64)
        bits = 64 - doc_bits
    keys = _sorted_unique((d << np.uint64(bits)) | sid)
    bounds = np.searchsorted(keys, np.arange(n + 1, dtype=np.uint64) << np.uint64(bits))
    return keys, bounds.astype(np.int64), bits


def _verify(
    texts: Callable[[np.ndarray], pl.Series], a: np.ndarray, b: np.ndarray, ngram: int, threshold: float,
    verify_bytes: int | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The candidate pairs (a, b) whose exact shingle-set Jaccard is >= threshold (see _verify_mask),
    and how many pairs had their exact Jaccard computed."""
    keep, exact = _verify_mask(texts, a, b, ngram, threshold, verify_bytes)
    return a[keep], b[keep], int(exact.sum())


def _verify_mask(
    texts: Callable[[np.ndarray], pl.Series], a: np.ndarray, b: np.ndarray, ngram: int, threshold: float,
    verify_bytes: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate pair: is its exact shingle-set Jaccard >= threshold? And was it computed (the
    pairs the fine screen drops are answered no without it)? `texts(docs)` gives the texts of the
    documents `docs`. The shingle sets take ~60 bytes per text byte, so they are built for
    consecutive runs of pairs of at most `verify_bytes` (default VERIFY_BYTES) bytes of text at a time."""
    keep = np.zeros(a.size, dtype=bool)
    if a.size == 0:
        return keep, keep.copy()
    docs, inverse = _dense_ids(np.concatenate([a, b]))
    doc_texts = texts(docs)
    exact = _fine_screen(doc_texts, inverse[: a.size], inverse[a.size :], ngram, threshold)
    at = np.flatnonzero(exact)
    la, lb = inverse[at], inverse[a.size + at]
    if at.size == 0:
        return keep, exact
    length = doc_texts.str.len_bytes().cast(pl.Int64).to_numpy()
    cum = np.cumsum(length[la] + length[lb] + 1)
    step = verify_bytes or VERIFY_BYTES
    cuts = np.searchsorted(cum, np.arange(step, int(cum[-1]), step, dtype=np.int64), "right")
    edges = np.unique(np.concatenate([[0], cuts, [at.size]]))
    for e0, e1 in zip(edges[:-1], edges[1:]):
        keep[at[e0:e1]] = _jaccard_reaches(doc_texts, la[e0:e1], lb[e0:e1], ngram, threshold)
    return keep, exact


@functools.cache
def _fine_densifier(num_perm: int = FINE_NUM_PERM) -> _Densifier:
    return _Densifier(num_perm, FINE_SEED, FINE_MAX_PROBES)


def _fine_screen(texts: pl.Series, a: np.ndarray, b: np.ndarray, ngram: int, threshold: float) -> np.ndarray:
    """Per pair (texts[a], texts[b]): does it pass the fine screen? Each pair is screened on the
    longest level of FINE_LEVELS that both its texts are long enough for and fill (FINE_MIN_FILLED);
    pairs with a text too short to screen on at FINE_NUM_PERM values (or too repetitive) pass. The
    second signatures are made for the texts of pairs screened only, at the levels they are tried at."""
    lengths = texts.str.len_bytes().cast(pl.Int64).to_numpy()
    shorter = np.minimum(lengths[a], lengths[b])
    keep = np.ones(a.size, dtype=bool)
    open_ = np.ones(a.size, dtype=bool)  # not screened yet
    for level in FINE_LEVELS:
        at = np.flatnonzero(open_ & (shorter >= SCREEN_MIN_BYTES_PER_VALUE * level + ngram))
        if at.size == 0:
            continue
        signed = np.unique(np.concatenate([a[at], b[at]]))
        sketch, filled = _fine_sketch(texts.gather(signed), ngram, level)
        sa, sb = np.searchsorted(signed, a[at]), np.searchsorted(signed, b[at])
        fills = filled[sa] & filled[sb]  # the others are tried at the next (shorter) level
        done = at[fills]
        keep[done] = _Screen(sketch, np.ones(signed.size, dtype=bool), threshold)(sa[fills], sb[fills])
        open_[done] = False
    return keep


def _fine_sketch(texts: pl.Series, ngram: int, num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """The low 8 bits of each text's `num_perm`-value second signature (FINE_SEED), and whether the
    text's own shingles fill FINE_MIN_FILLED of its bins."""
    data, offsets = _texts_buffer(texts)
    sketch = np.empty((len(texts), num_perm), dtype=np.uint8)
    filled = np.empty(len(texts))  # the share of bins each text's own shingles fill

    def densify(sig: np.ndarray, d0: int) -> np.ndarray:
        filled[d0 : d0 + sig.shape[0]] = (sig != _EMPTY).mean(axis=1)
        return _fine_densifier(num_perm)(sig)

    bounds = _chunk_bounds(offsets, max(1, CHUNK_TEXTS * FINE_NUM_PERM // num_perm))

    for d0, d1 in zip(bounds[:-1], bounds[1:]):
        sig = _signature_chunk(data, offsets, d0, d1, ngram, num_perm, FINE_SEED,
                               functools.partial(densify, d0=d0))
        sketch[d0:d1] = sig.astype(np.uint8)  # the low 8 bits, as _Screen reads them
    return sketch, filled >= FINE_MIN_FILLED


def _jaccard_reaches(
    texts: pl.Series, a: np.ndarray, b: np.ndarray, ngram: int, threshold: float
) -> np.ndarray:
    """Per pair (texts[a], texts[b]): is the Jaccard of their shingle sets >= threshold?"""
    docs, inverse = _dense_ids(np.concatenate([a, b]))
    la, lb = inverse[: a.size], inverse[a.size :]
    keys, bounds, bits = _shingle_sets(texts.gather(docs), ngram)
    sizes = np.diff(bounds)
    small = sizes[la] <= sizes[lb]  # look the smaller set up in the larger one
    qa, qb = np.where(small, la, lb), np.where(small, lb, la)
    low = np.uint64((1 << bits) - 1)
    keep = np.zeros(a.size, dtype=bool)
    for s0 in range(0, a.size, VERIFY_BATCH):
        pa, pb = qa[s0 : s0 + VERIFY_BATCH], qb[s0 : s0 + VERIFY_BATCH]
        counts = sizes[pa]
        firsts = np.cumsum(counts) - counts
        pair = np.repeat(np.arange(pa.size), counts)
        src = np.arange(int(counts.sum())) - firsts[pair] + bounds[pa][pair]
        query = (pb[pair].astype(np.uint64) << np.uint64(bits)) | (keys[src] & low)
        at = np.minimum(np.searchsorted(keys, query), keys.size - 1)
        inter = np.bincount(pair, weights=keys[at] == query, minlength=pa.size)
        union = sizes[pa] + sizes[pb] - inter
        keep[s0 : s0 + VERIFY_BATCH] = inter >= threshold * union - 1e-9
    return keep


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components: label[i] = smallest index in i's component (vectorised union-find:
    hook roots to the smaller root, then pointer-jump until every edge's ends agree)."""
    label = np.arange(n, dtype=np.int64)
    if a.size == 0:
        return label
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    while True:
        la, lb = label[a], label[b]
        differ = la != lb
        if not differ.any():
            return label
        la, lb = la[differ], lb[differ]
        low = np.minimum(la, lb)
        np.minimum.at(label, la, low)
        np.minimum.at(label, lb, low)
        while True:  # full path compression
            nxt = label[label]
            if np.array_equal(nxt, label):
                break
            label = nxt


class _UnionFind:
    """Vectorised union-find over 0..n-1 whose roots are the smallest index of their component
    (a root is only ever hooked under a smaller root)."""

    def __init__(self, n: int):
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, x: np.ndarray) -> np.ndarray:
        parent = self.parent
        root = parent[x]
        while True:
            up = parent[root]
            if np.array_equal(up, root):
                break
            root = up
        parent[x] = root  # path compression for the nodes asked about
        return root

    def union(self, a: np.ndarray, b: np.ndarray) -> None:
        while a.size:
            ra, rb = self.find(a), self.find(b)
            differ = ra != rb
            a, b, ra, rb = a[differ], b[differ], ra[differ], rb[differ]
            np.minimum.at(self.parent, np.maximum(ra, rb), np.minimum(ra, rb))

    def labels(self) -> np.ndarray:
        return self.find(np.arange(self.parent.size))


def _band_buckets(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Texts sharing a key within one band: (text index, bucket number) for every member of a
    bucket of two or more, grouped by bucket."""
    order = pl.Series(keys, dtype=pl.UInt64).arg_sort().to_numpy()  # ~2.5x faster than np.argsort here
    ordered = keys[order]
    same = ordered[1:] == ordered[:-1]
    member = np.zeros(keys.size, dtype=bool)
    member[1:] |= same
    member[:-1] |= same
    at = np.flatnonzero(member)
    bucket = np.cumsum(np.concatenate(([True], ~same[at[1:] - 1])) if at.size else np.zeros(0, bool)) - 1
    return order[at].astype(np.int64), bucket


def _band_edges(members: np.ndarray, bucket: np.ndarray, min_b: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Candidate edges (a < b) of one band: every pair among a bucket's MAX_ALL_PAIRS_BUCKET smallest
    members, and each further member to the bucket's smallest (a star). The rule is prefix-stable:
    the edges among a bucket's members below an index do not change when members above it join, so
    a grown version's edges among its parent's texts are the parent's (`_find_near_duplicates`'s
    `known`). `min_b`: only the edges whose b is at least this."""
    if members.size == 0:
        return members, members
    frame = pl.DataFrame({"k": bucket, "u": members}).with_columns(
        pl.col("u").rank("ordinal").over("k").alias("r"), pl.col("u").min().over("k").alias("first")
    )
    head = frame.filter(pl.col("r") <= MAX_ALL_PAIRS_BUCKET).select("k", "u")
    tail = frame.filter(pl.col("r") > MAX_ALL_PAIRS_BUCKET)
    edges = pl.concat(
        [
            head.join(head, on="k", suffix="_b")
            .filter(pl.col("u") < pl.col("u_b"))
            .select(pl.col("u").alias("a"), pl.col("u_b").alias("b")),
            tail.select(pl.col("first").alias("a"), pl.col("u").alias("b")),
        ]
    )
    if min_b:
        edges = edges.filter(pl.col("b") >= min_b)
    edges = edges.unique()
    return edges["a"].to_numpy().astype(np.int64), edges["b"].to_numpy().astype(np.int64)


# ----------------------------------------------------------------------------------------------
# near duplicates: the detector


@dataclass(frozen=True)
class NearDuplicates:
    """What `find_near_duplicates` found. `cluster[i]` is the row index of the first row of row i's
    cluster (i itself when row i is a singleton or the first of its cluster); `exact[i]` the index of
    the first row whose normalised text is identical to row i's."""

    cluster: np.ndarray
    bands: int
    rows: int
    n_unique_texts: int
    n_candidate_pairs: int  # candidate pairs whose exact Jaccard was computed
    n_verified_pairs: int  # of those, pairs at or above the threshold
    exact: np.ndarray | None = None
    n_lsh_candidates: int = 0  # candidate pairs from the LSH bands (not already connected)
    n_screened_out: int = 0  # of those, dropped by the signature estimate before exact verification

    @property
    def flagged(self) -> np.ndarray:
        """Boolean per row: a member of a cluster that is not the cluster's first row."""
        return self.cluster != np.arange(self.cluster.size)

    def clusters(self) -> list[np.ndarray]:
        """Row indices of every cluster of two or more rows, each sorted, ordered by first row."""
        if not self.flagged.any():
            return []
        members = np.nonzero(np.isin(self.cluster, self.cluster[self.flagged]))[0]
        frame = pl.DataFrame({"c": self.cluster[members], "i": members})
        grouped = frame.group_by("c", maintain_order=True).agg("i").sort("c")
        return [np.asarray(x, dtype=np.int64) for x in grouped["i"].to_list()]


def _lsh_split(
    threshold: float, num_perm: int, ngram: int, bands_rows: tuple[int, int] | None
) -> tuple[int, int]:
    """Check the detector's parameters; (bands, rows): `bands_rows`, else `lsh_params`."""
    if not 2 <= ngram <= 7:
        raise ValueError(f"ngram must be between 2 and 7 bytes, got {ngram}")
    if num_perm < 1:
        raise ValueError("num_perm must be >= 1")
    bands, rows = bands_rows or lsh_params(threshold, num_perm)
    if bands * rows > num_perm:
        raise ValueError(f"bands x rows = {bands * rows} exceeds num_perm = {num_perm}")
    return bands, rows


def _chunk_bounds(offsets: np.ndarray, max_texts: int = CHUNK_TEXTS) -> list[int]:
    """Text boundaries of hashing chunks of at most CHUNK_BYTES bytes (or one text) and `max_texts` texts."""
    m = offsets.size - 1
    bounds = [0]
    while bounds[-1] < m:
        d0 = bounds[-1]
        d1 = int(np.searchsorted(offsets, offsets[d0] + CHUNK_BYTES, side="right")) - 1
        bounds.append(min(max(d1, d0 + 1), d0 + max_texts, m))
    return bounds


def _distinct_edges(buckets: list[tuple[np.ndarray, np.ndarray]], m: int,
                    min_b: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The candidate edges (a < b, b >= min_b) of all bands, each pair once, ordered by (a, b):
    deduplicated band by band, so at most one band's edges are held twice."""
    seen = pl.Series("k", [], dtype=pl.UInt64)
    for members, bucket in buckets:
        a, b = _band_edges(members, bucket, min_b)
        keys = pl.Series("k", a.astype(np.uint64) * np.uint64(m) + b.astype(np.uint64), dtype=pl.UInt64)
        seen = pl.concat([seen, keys]).unique()
    keys = seen.sort().to_numpy()
    return (keys // np.uint64(m)).astype(np.int64), (keys % np.uint64(m)).astype(np.int64)


class _Screen:
    """Keep the candidate pairs whose Jaccard estimate (the share of equal 8-bit signature values,
    corrected for chance 8-bit matches) is within SCREEN_SIGMAS deviations of the threshold, or
    that involve a text too short for the estimate to be trusted (`screenable` false)."""

    def __init__(self, sketch: np.ndarray, screenable: np.ndarray, threshold: float, index: np.ndarray | None = None):
        # `index`: the sorted text indices whose values the arrays hold, row for row (a grown version's
        # run holds only the texts that can meet a new one); None: text i's values are at i
        self.sketch, self.screenable, self.index = sketch, screenable, index
        k = sketch.shape[1]
        chance = 1.0 / 256.0
        sigma = math.sqrt(threshold * (1.0 - threshold) / k)
        # the estimate is (share of equal values - chance) / (1 - chance): cut on the share itself
        cut = threshold - SCREEN_SIGMAS * sigma
        self.min_equal = max(0.0, cut) * (1.0 - chance) + chance

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.size == 0:
            return np.zeros(0, dtype=bool)
        if self.index is not None:
            a, b = np.searchsorted(self.index, a), np.searchsorted(self.index, b)
        equal = (self.sketch[a] == self.sketch[b]).mean(axis=1)
        return (equal >= self.min_equal - 1e-12) | ~(self.screenable[a] & self.screenable[b])


def _find_near_duplicates(
    texts: RowTexts,
    *,
    threshold: float,
    num_perm: int,
    ngram: int,
    seed: int,
    bands_rows: tuple[int, int],
    n_threads: int | None,
    on_block: Callable[[int, int, list[pl.Series]], None] | None = None,
    verify_bytes: int | None = None,
    stored: Callable[[int, int], tuple[np.ndarray, ...] | None] | None = None,
    on_signed: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
    known: tuple[int, np.ndarray, np.ndarray] | None = None,
) -> NearDuplicates:
    """`find_near_duplicates` over `texts.text(...)` (one text per row). The texts are made and
    hashed a block of rows at a time (`texts.blocks()`), so at no point are all of them in memory:
    only their 64-bit hashes and band keys are kept, and the few texts that verification needs are
    made again. `on_block(a, b, parts)` sees each block's prepared columns (rows a..b-1), so a caller
    can hash them for another use without preparing them again. `stored(a, b)`, when it gives them,
    is a block's values as `_sign_blocks` made them in an earlier run (its texts are then not read),
    and `on_signed` sees every row's values once signed (to store them for a later run).

    `known` = (n_old, rows, firsts[, copies]): the clusters an earlier run found over rows 0..n_old-1, the same
    rows under the same parameters (a grown version's parent: row i of those in `rows` is in the
    cluster whose first row is firsts[i]). Only edges reaching a text first seen after them are then
    made, screened and verified; the clusters are those of a run over all rows, as edges among the
    earlier rows' texts are the earlier run's (`_band_edges` is prefix-stable) and verification is
    per pair. The counts in the result are then this run's work. `copies` = (n_old, rows, firsts): that
    run's exact copies among those rows, compared on their texts then (`texts.first_copies`' `verified`)."""
    bands, rows = bands_rows
    n = texts.n
    if n == 0:
        return NearDuplicates(np.zeros(0, np.int64), bands, rows, 0, 0, 0, np.zeros(0, np.int64))

    workers = n_threads or min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        signed = _sign_blocks(texts, num_perm, ngram, seed, bands, rows, pool, on_block, stored,
                              known[0] if known is not None else 0)
        if on_signed is not None:
            on_signed(signed)
        key, band_keys = signed.key, signed.band_keys
        # collapse exact duplicates (identical texts): `u` = index of the row's unique text, in order
        # of first occurrence, so the smallest unique index of a cluster belongs to its first row.
        # rows whose copies an earlier run verified on their texts (a grown version's parent's) are not
        # compared again; only ShardTexts (a grown version's rows) takes them
        verified = known[3] if known is not None and len(known) > 3 else None
        exact = texts.first_copies(key, verified) if verified is not None else texts.first_copies(key)
        del key
        first_rows = np.nonzero(exact == np.arange(n))[0]
        u_of_row = np.searchsorted(first_rows, exact)
        m = first_rows.size
        # texts first seen in rows before n_old are 0..m_old-1: an earlier run's, clustered already
        m_old = int(np.searchsorted(first_rows, known[0])) if known is not None else 0
        # the texts whose values are held (all, or a grown version's new texts and the old ones that
        # share a band key with one) and where: `held` (text indices) and `at_held` (their positions)
        held, at_held = _held_texts(first_rows, signed.rows, n)

        def buckets_of(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            keys = keys[at_held] if at_held is not None else keys
            if not m_old:
                return _band_buckets(keys)
            # the buckets a new text is in, whole (their smallest members decide the edges). A hash set
            # of the new texts' keys: np.isin sorts the old and new keys together, a 10M-row sort per
            # band (seconds each, and a copy of the keys per thread) to learn about 100k new rows
            is_new = held >= m_old
            new_keys = pl.Series(keys[is_new], dtype=pl.UInt64)
            meets = pl.Series(keys, dtype=pl.UInt64).is_in(new_keys.implode()).to_numpy() | is_new
            at = np.flatnonzero(meets)
            members, bucket = _band_buckets(keys[at])
            return held[at[members]], bucket

        buckets = list(pool.map(buckets_of, band_keys)) if pool else [buckets_of(k) for k in band_keys]
    finally:
        if pool:
            pool.shutdown()
    del band_keys
    sketch, screenable = signed.sketch, signed.screenable
    if at_held is not None:
        sketch, screenable = sketch[at_held], screenable[at_held]
    del signed
    seed_edges = (u_of_row[known[1]], u_of_row[known[2]]) if m_old else None
    labels, counts = _cluster_candidates(texts, first_rows, buckets, sketch, screenable, threshold, ngram, verify_bytes,
                                         seed_edges, m_old, None if held.size == m else held)
    n_candidates, n_checked, n_verified = counts
    cluster = first_rows[labels[u_of_row]]
    return NearDuplicates(cluster.astype(np.int64), bands, rows, m, n_checked, n_verified, exact,
                          n_lsh_candidates=n_candidates, n_screened_out=n_candidates - n_checked)


# stored rows a grown version's run filters at a time (`_sign_blocks`' n_old): ~80 MB of their values
FILTER_ROWS = 1 << 18


@dataclass
class Signed:
    """What signing made: every row's 64-bit text hash (`key`), and band keys (bands x rows), 8-bit
    sketches and screenable flags for the rows in `rows` (sorted row indices), position for
    position; `rows` None: for every row, row i at i."""

    key: np.ndarray
    band_keys: np.ndarray
    sketch: np.ndarray
    screenable: np.ndarray
    rows: np.ndarray | None = None


def _sign_blocks(texts: RowTexts, num_perm: int, ngram: int, seed: int, bands: int, rows: int,
                 pool: ThreadPoolExecutor | None, on_block, stored=None, n_old: int = 0) -> Signed:
    """Steps 1-4, per block of rows: each text's 64-bit hash (for exact duplicates), its band keys,
    and the low 8 bits of its signature with whether it is long enough to screen on (step 5), in
    chunks of at most CHUNK_BYTES / CHUNK_TEXTS, on a few threads. Signatures are per text, so the
    blocks and chunks do not change them, and a block whose values `stored(a, b)` gives (an earlier
    run's, for the same rows under the same parameters) is taken as it is, its texts not read.

    `n_old` > 0 (a grown version whose parent clustered rows 0..n_old-1): the blocks of new rows are
    signed first, and of the old rows' stored values only those of rows sharing a band key with a new
    row are kept (`Signed.rows`): no other old text can meet a new one, and holding 10M rows' band
    keys and sketches would cost ~3 GB to learn about 100k. Old blocks signed again (their stored
    values unfit) are kept whole, as a caller may store them."""
    n = texts.n
    densify = _Densifier(num_perm, seed)
    key = np.empty(n, dtype=np.uint64)

    def sign(a: int, b: int) -> tuple[tuple[np.ndarray, ...], bool]:
        """Rows a..b-1's (band keys, sketch, screenable), their text hashes written to `key`, and
        whether they were stored."""
        values = stored(a, b) if stored is not None else None
        if values is not None:
            key[a:b] = values[0]
            return values[1:], True
        parts = texts.parts((a, b))
        if on_block is not None:
            on_block(a, b, parts)
        block = texts.join(parts)
        del parts
        key[a:b] = texts.hash(block, seed)
        data, offsets = _texts_buffer(block)
        del block
        bounds = _chunk_bounds(offsets)
        band_keys = np.empty((bands, b - a), dtype=np.uint64)
        sketch = np.empty((b - a, num_perm), dtype=np.uint8)

        def work(i: int) -> None:
            d0, d1 = bounds[i], bounds[i + 1]
            sig = _signature_chunk(data, offsets, d0, d1, ngram, num_perm, seed, densify)
            band_keys[:, d0:d1] = _band_keys(sig, bands, rows)
            sketch[d0:d1] = sig.astype(np.uint8)  # the low 8 bits

        if pool:
            list(pool.map(work, range(len(bounds) - 1)))
        else:
            for i in range(len(bounds) - 1):
                work(i)
        screenable = np.diff(offsets) >= SCREEN_MIN_BYTES_PER_VALUE * num_perm + ngram
        return (band_keys, sketch, screenable), False

    blocks = texts.blocks()
    if not n_old:
        band_keys = np.empty((bands, n), dtype=np.uint64)
        sketch = np.empty((n, num_perm), dtype=np.uint8)
        screenable = np.empty(n, dtype=bool)
        for a, b in blocks:
            (band_keys[:, a:b], sketch[a:b], screenable[a:b]), _ = sign(a, b)
        return Signed(key, band_keys, sketch, screenable)

    # (rows, band keys, sketch, screenable) in row order: the old rows kept, then the new ones
    new = [(np.arange(a, b), *sign(a, b)[0]) for a, b in blocks if b > n_old]
    new_keys = [pl.Series(np.concatenate([part[1][band] for part in new]), dtype=pl.UInt64).implode()
                for band in range(bands)] if new else None
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # stored blocks not yet filtered

    def keep_meeting() -> None:
        """Of the pending stored rows, those sharing a band key with a new row, in one pass per band:
        is_in builds its hash set of the new keys per call, so per 16k-row block it cost 20 s at 10M."""
        at_rows, band_keys, sketch, screenable = (np.concatenate([p[0] for p in pending]),
                                                  np.concatenate([p[1] for p in pending], axis=1),
                                                  np.concatenate([p[2] for p in pending]),
                                                  np.concatenate([p[3] for p in pending]))
        pending.clear()

        def meets_in(band: int) -> np.ndarray:
            return pl.Series(band_keys[band], dtype=pl.UInt64).is_in(new_keys[band]).to_numpy()

        meets = np.zeros(at_rows.size, dtype=bool)
        if new_keys is not None:
            for found in (pool.map(meets_in, range(bands)) if pool else map(meets_in, range(bands))):
                meets |= found
        at = np.flatnonzero(meets)
        kept.append((at_rows[at], band_keys[:, at], sketch[at], screenable[at]))

    for a, b in [block for block in blocks if block[1] <= n_old]:
        (band_keys, sketch, screenable), was_stored = sign(a, b)
        if not was_stored:  # kept whole, after the stored rows before it: `kept` stays in row order
            if pending:
                keep_meeting()
            kept.append((np.arange(a, b), band_keys, sketch, screenable))
            continue
        pending.append((np.arange(a, b), band_keys, sketch, screenable))
        if sum(p[0].size for p in pending) >= FILTER_ROWS:
            keep_meeting()
    if pending:
        keep_meeting()
    kept += new  # every new block ends after n_old, so after every old one
    return Signed(key, np.concatenate([part[1] for part in kept], axis=1),
                  np.concatenate([part[2] for part in kept]), np.concatenate([part[3] for part in kept]),
                  np.concatenate([part[0] for part in kept]).astype(np.int64))


def _held_texts(first_rows: np.ndarray, rows: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(the unique texts whose values signing kept, sorted; their positions in its arrays, None where
    text i is at i): a text's values are its first row's, and every row's are held where `rows` is None."""
    if rows is None:
        return np.arange(first_rows.size), (None if first_rows.size == n else first_rows)
    pos = np.minimum(np.searchsorted(rows, first_rows), max(rows.size - 1, 0))
    hit = rows[pos] == first_rows if rows.size else np.zeros(first_rows.size, dtype=bool)
    return np.flatnonzero(hit), pos[hit]


def _cluster_candidates(texts: RowTexts, first_rows: np.ndarray, buckets, sketch: np.ndarray,
                        screenable: np.ndarray, threshold: float, ngram: int,
                        verify_bytes: int | None, seed_edges: tuple[np.ndarray, np.ndarray] | None = None,
                        min_b: int = 0, held: np.ndarray | None = None) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Steps 5-6 over the unique texts: candidates, band by band and in batches; edges whose texts
    are already connected are skipped, the rest screened on their signatures and verified by exact
    Jaccard; verified edges are unioned into clusters. Returns each unique text's cluster label and
    (candidates, verified by exact Jaccard, found similar). `seed_edges` join texts known to be
    similar already (an earlier run's clusters), and only candidates with b >= `min_b` are made.
    `held`: the texts whose sketch and screenable flag are given, row for row (None: all)."""
    m = first_rows.size

    def unique_texts(u: np.ndarray) -> pl.Series:
        return texts.text(first_rows[u])

    # Reuse (a chosen reply shared by sibling pairs, canned refusals) makes thousands of pairs
    # candidates at Jaccard 0.4-0.7: the screen drops those on their signatures' estimate, so exact
    # verification (the costly part) runs on the pairs near or above the threshold only.
    screen = _Screen(sketch, screenable, threshold, held)
    # Every band's candidate pairs, each distinct pair once: the same two texts meet in many bands
    # (a shared reply puts them in one bucket band after band, and a big bucket's star keeps its
    # centre), and each pair is screened and verified at most once.
    a, b = _distinct_edges(buckets, m, min_b)
    prefetch = getattr(texts, "prefetch", None)
    if prefetch is not None and a.size:  # texts read from disk (checks/shards.py): fetch every row
        # verification may need in one pass, not a pass per batch of edges
        kept = np.concatenate([screen(a[s0:s0 + VERIFY_BATCH], b[s0:s0 + VERIFY_BATCH])
                               for s0 in range(0, a.size, VERIFY_BATCH)])
        prefetch(first_rows[np.unique(np.concatenate([a[kept], b[kept]]))])
    uf = _UnionFind(m)
    if seed_edges is not None:
        uf.union(*seed_edges)
    n_checked = n_verified = n_candidates = 0
    for s0 in range(0, a.size, VERIFY_BATCH):
        ea, eb = a[s0 : s0 + VERIFY_BATCH], b[s0 : s0 + VERIFY_BATCH]
        apart = uf.find(ea) != uf.find(eb)
        ea, eb = ea[apart], eb[apart]
        n_candidates += int(ea.size)
        keep = screen(ea, eb)
        ea, eb = ea[keep], eb[keep]
        if ea.size == 0:
            continue
        va, vb, exact = _verify(unique_texts, ea, eb, ngram, threshold, verify_bytes)
        n_checked += exact
        n_verified += int(va.size)
        uf.union(va, vb)
    return uf.labels(), (n_candidates, n_checked, n_verified)


# ----------------------------------------------------------------------------------------------
# what `_sign_blocks` made, kept for a later run (checks/batched.py near_duplicates: a grown version
# takes its parent's for the files they share, and signs only its new files' rows)

NEAR_FORMAT = "1"  # bump when the signatures, band keys, sketches or text hashes change for the same text


def _near_meta(**params: Any) -> str:
    """What made a file's stored values: the check's parameters (threshold, num_perm, ngram, scope, seed,
    bands x rows), the engine's format and the text hasher (polars' hash: not stable across versions).
    Values made under any other are signed again, never taken."""
    import json

    return json.dumps({**params, "format": NEAR_FORMAT, "hasher": f"polars-{pl.__version__}"}, sort_keys=True,
                      default=str)


def near_file(meta: str, key: np.ndarray, band_keys: np.ndarray, sketch: np.ndarray, screenable: np.ndarray,
              out: Any) -> None:
    """One data file's near_duplicates values (what `_sign_blocks` made: text hash, band keys,
    sketch, screenable flag per row) written to `out` (a path or binary file) as an .npz, with `meta`."""
    np.savez(out, meta=np.frombuffer(meta.encode(), dtype=np.uint8), key=key, band_keys=band_keys, sketch=sketch,
             screenable=screenable)


def read_near_file(data: bytes, meta: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """`near_file`'s values; None when they were made under another `meta` (ValueError: not such a file)."""
    import io
    import zipfile

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            if bytes(stored["meta"]).decode() != meta:
                return None
            values = tuple(stored[name] for name in ("key", "band_keys", "sketch", "screenable"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ValueError(f"not a file of near_duplicates values ({exc})") from None
    return values  # type: ignore[return-value]


def _scratch_dir() -> str:
    """A folder for one run's values to publish, removed when the process exits (publish reads it before)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="prefdata-near-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def near_scratch(values: tuple[np.ndarray, ...], *, threshold: float, num_perm: int, ngram: int, scope: str,
                 seed: int, bands_rows: tuple[int, int]) -> str:
    """An in-memory run's values of all its rows (dedup.check_near_duplicates) in a scratch file: its path."""
    path = os.path.join(_scratch_dir(), "near.npz")
    meta = _near_meta(threshold=threshold, num_perm=num_perm, ngram=ngram, scope=scope, seed=seed,
                      bands=bands_rows[0], rows=bands_rows[1])
    near_file(meta, *values, path)
    return path


def _clusters_meta(meta: str) -> str:
    """`meta` and the candidate rule: clusters found under another rule are not a start (`known` needs
    the parent's candidates among its texts to be this run's)."""
    return f"{meta} edges: head {MAX_ALL_PAIRS_BUCKET} all pairs, then a star"


def first_rows_file(meta: str, files: list[str], **groupings: np.ndarray | None) -> bytes:
    """Groupings of a version's rows, each as every row's first row in its group (NearDuplicates.cluster,
    or .exact: its copies), for its grown children to start from: per grouping PREFIX, the rows that are
    not their group's first (PREFIXrows) with that first row (PREFIXfirsts); with `meta` and the
    version's data files in row order (what the rows are)."""
    import io
    import json

    arrays: dict[str, np.ndarray] = {}
    for prefix, first in groupings.items():
        if first is not None:
            rows = np.flatnonzero(first != np.arange(first.size))
            arrays[f"{prefix}rows"], arrays[f"{prefix}firsts"] = rows.astype(np.int64), first[rows].astype(np.int64)
            arrays["n"] = np.array([first.size], dtype=np.int64)
    out = io.BytesIO()
    np.savez(out, meta=np.frombuffer(meta.encode(), dtype=np.uint8),
             files=np.frombuffer(json.dumps(files).encode(), dtype=np.uint8), **arrays)
    return out.getvalue()


def read_first_rows(data: bytes, meta: str, files: list[str], offsets: np.ndarray,
                    *prefixes: str) -> tuple[int, dict[str, tuple[np.ndarray, np.ndarray] | None]] | None:
    """`first_rows_file`'s groupings (rows, firsts) by prefix (None: not in the file) for a version whose
    data files (`files`, row `offsets`) begin with the stored version's, under the same `meta`, with
    the stored version's row count; None otherwise (ValueError: not such a file)."""
    import io
    import json
    import zipfile

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            if bytes(stored["meta"]).decode() != meta:
                return None
            theirs = json.loads(bytes(stored["files"]).decode())
            n = int(stored["n"][0])
            found = {p: (stored[f"{p}rows"], stored[f"{p}firsts"]) if f"{p}rows" in stored.files else None
                     for p in prefixes}
    except (OSError, ValueError, KeyError, IndexError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ValueError(f"not a file of row groupings ({exc})") from None
    k = len(theirs)
    if not theirs or files[:k] != theirs or k >= len(files) or int(offsets[k]) != n:
        return None
    for rows, firsts in filter(None, found.values()):
        if rows.shape != firsts.shape or (rows.size and (rows.min() < 0 or rows.max() >= n or firsts.min() < 0
                                                         or (firsts >= rows).any())):
            raise ValueError("row groupings out of their rows' range")
    return n, found


def near_clusters_file(meta: str, files: list[str], cluster: np.ndarray, exact: np.ndarray | None = None) -> bytes:
    """A run's clusters over a version's rows (NearDuplicates.cluster), for its grown children to start
    from (`_find_near_duplicates`'s `known`), and its exact copies (.exact: verified on their texts,
    which a child then compares no more)."""
    return first_rows_file(_clusters_meta(meta), files, **{"": cluster, "copy_": exact})


def read_near_clusters(data: bytes, meta: str, files: list[str], offsets: np.ndarray) -> tuple | None:
    """`near_clusters_file`'s clusters as `known` = (n, rows, firsts, verified copies (n, rows, firsts)
    or None) for a version whose data files begin with the stored version's, under the same `meta`; None
    otherwise (ValueError: not such a file)."""
    stored = read_first_rows(data, _clusters_meta(meta), files, offsets, "", "copy_")
    if stored is None:
        return None
    n, found = stored
    if found[""] is None:
        raise ValueError("not a file of near_duplicates clusters (no clusters in it)")
    copies = found["copy_"]
    return n, *found[""], (n, *copies) if copies is not None else None

