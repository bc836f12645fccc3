"""Character n-gram TF-IDF features: the engine behind `prompt_distribution` (checks/content.py).

Texts are lower-cased with whitespace collapsed; features are the byte 3-, 4- and 5-grams of the
UTF-8 text (characters, for ASCII), weighted 1 + log(tf) times smoothed idf over the pooled texts,
then signed-hashed to FEATURE_DIM dimensions (the hashing trick keeps inner products in
expectation) and L2-normalised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from prefdata.checks.frames import utf8_buffer
from prefdata.checks.ngrams import _U, mix64

NGRAM_SIZES = (3, 4, 5)
FEATURE_DIM = 1024
MAX_TEXT_CHARS = 1000  # the first 1,000 characters of a prompt are its features (chat histories run long)


def tfidf_matrix(texts: list[str]) -> tuple[np.ndarray, dict[str, Any]]:
    """L2-normalised signed-hashed TF-IDF rows, and what `top_ngrams` needs to name n-grams."""
    series = pl.Series(texts, dtype=pl.String).str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()
    data, offsets = utf8_buffer(series.str.slice(0, MAX_TEXT_CHARS))
    n_docs = len(texts)
    x = np.zeros((n_docs, FEATURE_DIM), np.float32)
    buf = np.zeros(data.size + 8, np.uint8)
    buf[: data.size] = data
    lengths = np.diff(offsets).astype(np.int64)
    doc_of_byte = np.repeat(np.arange(n_docs, dtype=np.uint64), lengths)
    room = np.repeat(offsets[1:], lengths) - np.arange(data.size, dtype=np.int64)  # bytes left in the doc
    view = np.ndarray((data.size,), dtype="<u8", buffer=buf, strides=(1,))
    # one uint64 per occurrence: the n-gram's hash in the high bits, its document in the low bits,
    # so a plain sort groups (n-gram, doc) pairs and then n-grams, with no argsort
    doc_bits = _U(max(1, int(n_docs - 1).bit_length()))
    grams, keys = [], []
    for k in NGRAM_SIZES:
        at = np.flatnonzero(room >= k)
        gram = view[at] << _U(8 * (8 - k))  # little-endian: keep the k bytes from `at`
        gram ^= _U(k)
        mix64(gram)
        gram >>= doc_bits
        grams.append(gram)
        keys.append((gram << doc_bits) | doc_of_byte[at])
    if sum(k.size for k in keys) == 0:
        return x, {}
    occurrences = np.concatenate(grams)
    combined = np.sort(np.concatenate(keys))
    new_pair = np.ones(combined.size, bool)
    new_pair[1:] = combined[1:] != combined[:-1]
    first = np.flatnonzero(new_pair)
    tf = np.diff(np.append(first, combined.size)).astype(np.float64)
    pairs = combined[first]
    doc_u = (pairs & ((_U(1) << doc_bits) - _U(1))).astype(np.int64)
    gram_u = pairs >> doc_bits
    new_gram = np.ones(gram_u.size, bool)
    new_gram[1:] = gram_u[1:] != gram_u[:-1]
    inverse = np.cumsum(new_gram) - 1
    df = np.bincount(inverse)
    idf = np.log((1.0 + n_docs) / (1.0 + df)) + 1.0
    weight = (1.0 + np.log(tf)) * idf[inverse]
    bucket = (gram_u & _U(FEATURE_DIM - 1)).astype(np.int64)
    sign = np.where(((gram_u >> _U(20)) & _U(1)) == 1, -1.0, 1.0)
    flat = np.bincount(doc_u * FEATURE_DIM + bucket, weights=sign * weight, minlength=n_docs * FEATURE_DIM)
    x = flat.reshape(n_docs, FEATURE_DIM).astype(np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    sizes = np.concatenate([np.full(g.size, k, np.int8) for k, g in zip(NGRAM_SIZES, grams)])
    starts = np.concatenate([np.flatnonzero(room >= k) for k in NGRAM_SIZES])
    info = {"doc_u": doc_u, "inverse": inverse, "grams": gram_u[new_gram], "occurrences": occurrences,
            "starts": starts, "sizes": sizes, "buf": buf}
    return x, info


def top_ngrams(info: dict[str, Any], is_x: np.ndarray, top: int = 10) -> list[dict[str, Any]]:
    """N-grams whose document share differs most between the two sides (for the reader)."""
    if not info:
        return []
    doc_u, inverse, grams = info["doc_u"], info["inverse"], info["grams"]
    nx, ny = int(is_x.sum()), int((~is_x).sum())
    in_x = np.bincount(inverse, weights=is_x[doc_u].astype(float), minlength=grams.size) / max(nx, 1)
    in_y = np.bincount(inverse, weights=(~is_x[doc_u]).astype(float), minlength=grams.size) / max(ny, 1)
    order = np.argsort(-np.abs(in_x - in_y), kind="stable")[:top]
    out = []
    for i in order:
        j = int(np.argmax(info["occurrences"] == grams[i]))  # an occurrence, to print the bytes
        start, size = int(info["starts"][j]), int(info["sizes"][j])
        text = bytes(info["buf"][start : start + size]).decode("utf-8", errors="replace")
        out.append({"ngram": text, "share_prompts": round(float(in_x[i]), 4),
                    "share_reference": round(float(in_y[i]), 4)})
    return out
