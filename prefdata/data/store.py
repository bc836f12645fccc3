"""The dataset store: immutable, content-addressed versions with their lineage.

    <root>/<name>/<version>/
        README.md                         dataset card (HF YAML header: one config per table)
        data/<split>-00000-of-00001.parquet   preference pairs      (config "default"; a big import
                                          writes one shard per batch: <split>-<k>-of-<n>.parquet)
        sft/<split>-00000-of-00001.parquet    chosen-only SFT subset (config "sft")
        comparisons/train-...parquet      every comparison with its label (config "comparisons")
        votes/train-...parquet            annotator votes, long      (config "votes")
        quarantine.jsonl                  rejected rows with their reasons
        manifest.json                     file hashes, counts, schema, lineage, checks, status

`version` is the first 12 hex digits of a sha256 over every file's path and sha256 (all but the
manifest), so the same content always gets the same version and any change to a file shows.
The manifest is the one file that changes after creation, and only in its status and check
report (draft -> validated | rejected), under a lock and by atomic replace.

The root is `$PREFDATA_STORE`, else `.prefdata/store` in the working directory, or any fsspec
URL. On a local disk a version appears by one atomic rename of a fully written temporary folder;
on object storage the manifest is written last, and a folder without one is not a version.

The manifest (status, check report, status history, dates, counts, schema and lineage, bound to
the name, version and file hashes) is signed with HMAC-SHA256 under the store's key:
`$PREFDATA_STORE_KEY`, else `<root>/.prefdata-key` (made 0600 on first use). A hand-edited status or report fails `verify`,
so it never passes the gate into training. Every version is signed from its creation too (its
`creation_signature`: the whole manifest but the status record), so a draft's lineage, dates or counts
edited before `publish` fail verify and are never signed as the pipeline's own. The threat model is in
README.md ("Threat model").
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import hmac
import io
import itertools
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import polars as pl

from prefdata import __version__
from prefdata.data.card import render_card
from prefdata.base.errors import GateFailed, NoSpace, UnusableInput
from prefdata.base.files import NotRegularFile, kind_of, open_regular, read_at_most
from prefdata.base.scratch import alive, scratch

DEFAULT_ROOT = os.path.join(".prefdata", "store")
STATUSES = ("draft", "validated", "rejected")
# fullmatch, never `$`: `$` also matches before a trailing newline, and "abc\n" is no name.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_VERSION = re.compile(r"[0-9a-f]{4,64}")  # a version in a ref: its id or a prefix of it
_VERSION_ID = re.compile(r"[0-9a-f]{12}")  # a version folder's name: what version_id makes, nothing else
MANIFEST = "manifest.json"
KEY_ENV = "PREFDATA_STORE_KEY"
KEY_FILE = ".prefdata-key"  # in the store root, beside the datasets (no dataset name starts with ".")
MIN_KEY_CHARS = 32
MIN_KEY_DISTINCT = 8  # see key_weakness
STAGING = ".tmp-"  # NAME/.tmp-<pid>-<host>-<uuid>: a version being written, renamed into place when whole
STALE_STAGING_SECONDS = 24 * 3600  # staging from another host (whose pid we cannot check) older than this is dead
CONFIG_DIRS = {"default": "data", "sft": "sft", "comparisons": "comparisons", "votes": "votes"}
# zstd level of the version's Parquet files. 2, not polars' default 3: at 200k realistic pairs it
# encodes ~25% faster for files ~2.5% larger (level 1: ~45% faster, ~27% larger). The version id
# hashes the file bytes, so a level change gives the same content a new version id, once.
ZSTD_LEVEL = 2
_PARQUET = {"compression": "zstd", "compression_level": ZSTD_LEVEL, "statistics": False}  # every version file
_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how polars' errors name the OSError under them


def _now(timespec: str = "seconds") -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec=timespec)


def _created(v: "Version") -> dt.datetime:
    """When a version was made, for ordering a name's versions ("latest"). Recorded to the microsecond
    since one-second dates tied a filtered child with its parent (and the tie went by version id);
    an older manifest's whole second sorts as its first microsecond. A date that cannot be read
    (a damaged manifest) sorts first."""
    try:
        when = dt.datetime.fromisoformat(v.manifest["created_at"])
    except (KeyError, TypeError, ValueError):
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise UnusableInput(
            f"dataset name {name!r} is not allowed: use letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit, no '..', no '/')"
        )
    return name


def parse_ref(ref: str) -> tuple[str, str]:
    """'NAME@VERSION' -> (name, version); a bare NAME means NAME@latest."""
    name, _, version = ref.partition("@")
    check_name(name)
    version = version or "latest"
    if version != "latest" and not _VERSION.fullmatch(version):
        raise UnusableInput(f"{ref!r}: version must be 'latest' or hex digits of a version id (see `prefdata versions`)")
    return name, version


def version_id(files: dict[str, dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{files[path]['sha256']}\n".encode())
    return h.hexdigest()[:12]


# -- the signed status record --------------------------------------------------------------------
# What a status means is signed with the store's key, bound to the exact content: a record copied
# onto another version, a report edited to say "passed", or a status typed into the manifest by hand
# no longer matches its MAC. The key never appears in a manifest, a message or a log: only key_id,
# an HMAC of a constant under the key, which names the key without revealing it.
# Every field of the manifest is signed: its dates (which pick a dataset's "latest" version), counts,
# schema and lineage as much as its status, so that none can be edited to mislead `versions`, `show`
# or `train NAME` without failing verify. Version 1 (prefdata before this field list) signed only the
# status record; such signatures still verify, on the fields they covered.
SIGNED_FIELDS = ("name", "version", "status", "created_at", "prefdata_version", "files", "counts", "schema",
                 "lineage", "check_report", "status_history")
_SIGNED_V1 = ("name", "version", "files", "status", "check_report", "status_history")
_MAC_TAGS = {SIGNED_FIELDS: b"prefdata status v2\0", _SIGNED_V1: b"prefdata status v1\0"}
DAMAGED = "damaged"  # the status shown for a version whose manifest cannot be read
# The manifest is read whole and parsed: one line per file, the check report (offending ids cut to a
# few each) and the status history. A 10 000-shard version's is ~2 MB; 16 MiB is far past any real
# one, and bounds what json.loads holds (~10x the bytes) when a manifest is swapped for something huge.
MAX_MANIFEST_BYTES = 16 << 20


class DamagedFile(GateFailed):
    """A file of a version that is not what the store wrote: not a regular file (a symlink, FIFO,
    socket or device, none of which is ever opened or followed), or not the size its manifest records."""

    def __init__(self, rel: str, reason: str):
        super().__init__(f"{rel} {reason}")
        self.rel, self.reason = rel, reason


def _canonical(obj: Any) -> bytes:
    # through JSON first, so that what is signed is what the manifest holds once read back
    return json.dumps(json.loads(_dumps(obj)), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def key_id(key: bytes) -> str:
    return hmac.new(key, b"prefdata store key id", hashlib.sha256).hexdigest()[:12]


def status_mac(manifest: dict[str, Any], key: bytes, fields: tuple[str, ...] = SIGNED_FIELDS) -> str:
    record = {field: manifest.get(field) for field in fields}
    return hmac.new(key, _MAC_TAGS[fields] + _canonical(record), hashlib.sha256).hexdigest()


def sign_status(manifest: dict[str, Any], key: bytes) -> None:
    manifest["status_signature"] = {"alg": "hmac-sha256", "key_id": key_id(key), "signed": list(SIGNED_FIELDS),
                                    "mac": status_mac(manifest, key)}


# -- the creation signature ----------------------------------------------------------------------
# Made with the store's key when a version is written: an HMAC over the whole canonical manifest but
# the status record (the fields set_status changes, and the two signatures). A draft claims no status,
# yet its lineage (parent, sources, rendering), dates, counts and schema are what `publish` signs as
# the pipeline's own: edited by hand before publish, they fail this signature, and publish refuses.
# Every field, not a list: a field added by hand fails it too.
STATUS_RECORD = ("status", "check_report", "status_history", "status_signature", "creation_signature")
_CREATION_TAG = b"prefdata creation v1\0"
# A draft written before versions were signed at creation has no creation signature: nothing tells its
# manifest from one edited by hand (or from a signed draft whose signature was removed). It stays
# readable (show, check, filter, an --eval set, whose files its version id binds), but publish
# refuses it; importing the same content again signs it (Store._write_version).
UNSIGNED_DRAFT = ("creation: an unsigned draft (created before prefdata signed versions at creation): its lineage, "
                  "dates and counts cannot be told from a hand edit, so publish refuses it; import its source again "
                  "(the same content gets the same version, signed) or collect it anew")


def creation_mac(manifest: dict[str, Any], key: bytes) -> str:
    record = {field: value for field, value in manifest.items() if field not in STATUS_RECORD}
    return hmac.new(key, _CREATION_TAG + _canonical(record), hashlib.sha256).hexdigest()


def sign_creation(manifest: dict[str, Any], key: bytes) -> None:
    manifest["creation_signature"] = {"alg": "hmac-sha256", "key_id": key_id(key), "mac": creation_mac(manifest, key)}


def key_weakness(key: str) -> str | None:
    """Why a key is too guessable to sign with, or None. A floor against keys typed by hand, not a
    strength meter: at least MIN_KEY_CHARS characters, at least MIN_KEY_DISTINCT distinct ones, and
    not one block repeated ("a" * 32, "c1" * 32, "0123456789" * 4: the key has a period of at most
    half its length). Why 8 distinct, not 16: a hex key (what `secrets.token_hex` makes, and what
    prefdata's own key file holds) has at most 16 distinct characters, and 64 random hex digits miss
    at least one of them about a quarter of the time; fewer than 8 distinct happens to 32 random hex
    digits with a chance of about 4e-8, to 64 of about 1e-19."""
    if len(key) < MIN_KEY_CHARS:
        return f"too short ({len(key)} characters, at least {MIN_KEY_CHARS})"
    distinct = len(set(key))
    if distinct < MIN_KEY_DISTINCT:
        return f"too weak ({distinct} distinct characters, at least {MIN_KEY_DISTINCT})"
    period = next((p for p in range(1, len(key) // 2 + 1) if key[p:] == key[:-p]), None)
    if period is not None:
        return f"too weak (one block of {period} characters repeated)"
    return None


def sft_subset(pairs: pl.DataFrame) -> pl.DataFrame:
    """Checklist item 11: chosen-only prompt/completion rows, mixed into preference training
    against the alignment tax."""
    return pairs.select("id", "prompt", pl.col("chosen").alias("completion"))


def tables_for(pairs: pl.DataFrame, comparisons: pl.DataFrame | None = None,
               votes: pl.DataFrame | None = None) -> dict[str, dict[str, pl.DataFrame]]:
    """The tables of a version: pairs split by their `split` column (default: train), the
    chosen-only SFT subset of train, and comparisons and votes when there are any."""
    if "split" in pairs.columns:
        pairs = pairs.with_columns(pl.col("split").fill_null("train"))
        splits = {s: pairs.filter(pl.col("split") == s) for s in sorted(pairs["split"].unique())}
    else:
        splits = {"train": pairs}
    tables = {"default": splits}
    if "train" in splits:
        tables["sft"] = {"train": sft_subset(splits["train"])}
    if comparisons is not None:
        tables["comparisons"] = {"train": comparisons}
    if votes is not None:
        tables["votes"] = {"train": votes}
    return tables


class _Shards:
    """The Parquet files of a version being written, a batch of tables at a time: their hashes
    (the manifest's `files`), rows per config and split, the schema and the card's configs."""

    def __init__(self, store: Store, staging: str, n_batches: int):
        self.store, self.staging, self.n_batches = store, staging, n_batches
        self.files: dict[str, dict[str, Any]] = {}
        self.rows: dict[str, dict[str, int]] = {}
        self.schema: dict[str, dict[str, str]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.added = 0

    def add(self, tables: dict[str, dict[str, pl.DataFrame]], shard: tuple[int, int] | None = None) -> None:
        """Write one batch's tables: shard k of n (default: the next batch of n_batches)."""
        k, n = shard or (self.added, max(self.n_batches, self.added + 1))
        self.added += shard is None
        parquet: dict[str, pl.DataFrame] = {}
        for config, splits in tables.items():
            folder = CONFIG_DIRS[config]
            for split, frame in sorted(splits.items()):
                schema = {c: str(t) for c, t in frame.schema.items()}
                # a reader stacks the shards: every batch has the schema of the first
                if config in self.schema and self.added > 1 and self.schema[config] != schema:
                    raise ValueError(f"batch {k} of {config!r} has another schema than the batches before it: "
                                     f"{schema} != {self.schema[config]}")
                self.schema[config] = schema
                parquet[f"{folder}/{split}-{k:05d}-of-{n:05d}.parquet"] = frame
                self.configs.setdefault(config, {})[split] = f"{folder}/{split}-*.parquet"
                self.rows.setdefault(config, {})[split] = self.rows.get(config, {}).get(split, 0) + frame.height

        def put_parquet(rel: str) -> dict[str, Any]:
            return self.store._put_parquet(self.staging, rel, parquet[rel])

        # Two at a time (the pairs and their SFT subset): encoding, writing and hashing release the GIL.
        with ThreadPoolExecutor(max_workers=2) as pool:
            self.files.update(zip(parquet, pool.map(put_parquet, parquet)))


    def graft(self, parent: Version) -> None:
        """Put the parent version's tables (pairs, SFT subset, comparisons, votes) before this
        version's own: per table folder and split, the parent's files first, then these, renumbered
        `<split>-<i>-of-<n>` in that order. A parent file is hard-linked where the store is a local
        folder (shared, not copied: a 10M-row parent adds no disk; safe because the store never changes
        a file once written), copied elsewhere; its hash and size are the parent manifest's, which
        verify holds the shared file to in both versions. The caller verified the parent."""
        store = self.store
        grafted: dict[str, str] = {}  # final name -> the parent's file
        own = sorted(rel for rel in self.files if rel.split("/")[0] in CONFIG_DIRS.values())
        theirs = sorted(rel for rel in parent.manifest["files"] if rel.split("/")[0] in CONFIG_DIRS.values())
        parent_schema, parent_rows = parent.manifest["schema"], parent.manifest["counts"]["rows"]
        for config, folder in CONFIG_DIRS.items():
            if config in self.schema and config in parent_schema and self.schema[config] != parent_schema[config]:
                raise UnusableInput(f"the new rows' {config} table has columns {self.schema[config]}, {parent.ref}'s has "
                                    f"{parent_schema[config]}: import them as a version of their own")
        moved: dict[str, str] = {}
        for rel in own:  # out of the way of the final names first
            moved[rel] = f"{self.staging}/.own/{rel}"
            store.fs.makedirs(moved[rel].rsplit("/", 1)[0], exist_ok=True)
            store.fs.mv(f"{self.staging}/{rel}", moved[rel])
        groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for origin, rels in (("parent", theirs), ("own", own)):
            for rel in rels:
                folder, split = rel.split("/")[0], _SHARD.fullmatch(rel.split("/")[1])[1]
                groups.setdefault((folder, split), []).append((origin, rel))
        files = {rel: info for rel, info in self.files.items() if rel not in own}
        for (folder, split), members in groups.items():
            for i, (origin, rel) in enumerate(members):
                final = f"{folder}/{split}-{i:05d}-of-{len(members):05d}.parquet"
                target = f"{self.staging}/{final}"
                store.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                if origin == "own":
                    store.fs.mv(moved[rel], target)
                    files[final] = self.files[rel]
                else:
                    store._share(f"{store.version_dir(parent)}/{rel}", target)
                    files[final] = dict(parent.manifest["files"][rel])
                    grafted[final] = rel
        if own:
            store.fs.rm(f"{self.staging}/.own", recursive=True)
        self.files = files
        for config, splits in parent_rows.items():
            if config not in CONFIG_DIRS:
                continue
            for split, n in splits.items():
                self.rows.setdefault(config, {})[split] = self.rows.get(config, {}).get(split, 0) + n
                self.configs.setdefault(config, {})[split] = f"{CONFIG_DIRS[config]}/{split}-*.parquet"
            self.schema.setdefault(config, parent_schema[config])


_SHARD = re.compile(r"(.+)-\d{5}-of-\d{5}\.parquet")  # a table file's name: <split>-<k>-of-<n>.parquet


@dataclass(frozen=True)
class Version:
    name: str
    version: str
    manifest: dict[str, Any]

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def status(self) -> str:
        return self.manifest["status"]


# The URLs a store can live at: a local folder, or storage fsspec writes and keeps (object storage and
# the like, each through its own package). Not memory:// (a version written there vanishes when the
# process ends), not http(s):// (read-only), not archives, caches or chains of them.
STORE_PROTOCOLS = ("file", "local", "s3", "s3a", "gs", "gcs", "az", "abfs", "adl", "oci", "oss", "hdfs", "webhdfs",
                   "sftp", "ssh")
_STORE_URLS = ("store URLs that work: a local folder (PATH or file://PATH), or storage fsspec writes: "
               "s3://, gs://, az:// (abfs://), oci://, oss://, hdfs://, sftp:// (each with its fsspec package, e.g. "
               "pip install s3fs)")


class Store:
    def __init__(self, root: str | None = None, *, ephemeral: bool = False):
        """`root`: a folder or URL (default $PREFDATA_STORE, else .prefdata/store). `ephemeral`: allow
        memory://, a store that lives as long as this process (tests, a library's scratch store)."""
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.url = root or os.environ.get("PREFDATA_STORE") or DEFAULT_ROOT
        protocol = fsspec.core.split_protocol(self.url)[0]
        if protocol == "memory" and not ephemeral:
            raise UnusableInput(f"--store {self.url}: a memory:// store vanishes when the command ends, with every "
                                f"version written to it; {_STORE_URLS}")
        if protocol is not None and protocol not in STORE_PROTOCOLS + ("memory",):
            raise UnusableInput(f"--store {self.url}: {protocol}:// cannot hold a store; {_STORE_URLS}")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url)
        except ImportError as exc:  # the backend's package is missing (fsspec's message names it)
            raise UnusableInput(f"--store {self.url}: {exc}; {_STORE_URLS}") from None
        except ValueError as exc:
            raise UnusableInput(f"--store {self.url}: {exc}; {_STORE_URLS}") from None
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = self.root.rstrip("/")

    # -- paths -----------------------------------------------------------------------------
    def _dir(self, name: str, version: str | None = None) -> str:
        parts = [self.root, check_name(name)] + ([version] if version else [])
        return "/".join(parts)

    def path(self, ref: str) -> str:
        v = self.get(ref)
        return self.version_dir(v)

    def version_dir(self, v: "Version") -> str:
        """The folder (a path of `self.fs`) holding a version's files."""
        return self._dir(v.name, v.version)

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def _writing(self):
        """A store this user cannot write (read-only folder, read-only mount) is the user's to fix:
        one line naming the path, exit 2, instead of an internal error."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            where = f" ({exc.filename}: {exc.strerror})" if exc.filename else f" ({exc.strerror})"
            raise UnusableInput(f"cannot write to the store {self.url}{where}: make it writable for this user, "
                                "or choose another store with --store or $PREFDATA_STORE") from None

    def create(
        self,
        name: str,
        tables: dict[str, dict[str, pl.DataFrame]],
        *,
        quarantine: Iterable[dict[str, Any]] | None = None,
        counts: dict[str, Any],
        lineage: dict[str, Any],
        guidelines: str | None = None,
        notes: Sequence[str] = (),
    ) -> Version:
        """Write a new draft version; the same content returns the existing version unchanged.

        tables: {config: {split: frame}}; configs are those of CONFIG_DIRS. notes: lines the card
        states after its counts (a collected version: how its prompts reached the policy).
        """
        return self.create_sharded(name, [tables], lambda: ({}, quarantine, counts, lineage), guidelines=guidelines,
                                   notes=notes)

    def create_sharded(
        self,
        name: str,
        batches: Iterable[dict[str, dict[str, pl.DataFrame]]],
        ending: Callable[[], tuple[dict[str, dict[str, pl.DataFrame]], Iterable[dict[str, Any]] | None,
                                   dict[str, Any], dict[str, Any]]],
        *,
        n_batches: int = 1,
        guidelines: str | None = None,
        notes: Sequence[str] = (),
        onto: Version | None = None,
    ) -> Version:
        """A version written a batch of tables at a time, so that no more than one batch of a big
        dataset is ever in memory: batch k's frames become `<folder>/<split>-<k>-of-<n_batches>.parquet`
        as soon as the batch comes. `ending()`, called after the last batch, gives the tables that
        need every batch first (each one file), the quarantine (a list, or any iterable: it is written
        a line at a time), the counts and the lineage. A version of one batch is what `create` writes;
        the same content in the same batches is the same version. `onto`: a version of this store whose
        tables come first, their files shared, not copied (`_Shards.graft`): a growing dataset's child.
        """
        check_name(name)
        with self._writing():
            # The key signs the version as it is made (its creation signature): one that cannot be had
            # or used says so now, before any batch is written.
            key = self._key(create=True)
            self._clean_staging(name)
            # The writer (pid, host) is in the name, so that a later writer can tell a dead one's
            # leftovers from a live one's work; nothing of it lands inside the version folder.
            staging = self._dir(name, f"{STAGING}{os.getpid()}-{_writer_tag()}-{uuid.uuid4().hex}")
            self.fs.makedirs(staging, exist_ok=True)
            try:
                shards = _Shards(self, staging, n_batches)
                for tables in batches:
                    shards.add(tables)
                    del tables  # before the next batch is made
                extra, quarantine, counts, lineage = ending()
                if extra:
                    shards.add(extra, shard=(0, 1))
                if onto is not None:
                    shards.graft(onto)
                return self._write_version(name, staging, shards, quarantine, counts, lineage, guidelines, notes,
                                           key=key)
            finally:
                if self.fs.exists(staging):
                    self.fs.rm(staging, recursive=True)

    def _write_version(self, name, staging, shards: _Shards, quarantine, counts, lineage, guidelines,
                       notes: Sequence[str] = (), *, key: bytes) -> Version:
        files = dict(shards.files)
        lines = (json.dumps(q, ensure_ascii=False) + "\n" for q in quarantine or ())
        entry = self._put_lines(staging, "quarantine.jsonl", lines)
        if entry is not None:
            files["quarantine.jsonl"] = entry
        counts = {**counts, "rows": shards.rows}
        card = render_card(name, shards.configs, counts, guidelines, notes)
        files["README.md"] = self._put(staging, "README.md", card.encode())
        version = version_id(files)
        manifest = {
            "name": name,
            "version": version,
            "status": "draft",  # a draft claims no status, and no gate lets it through
            "created_at": _now("microseconds"),  # orders a name's versions: a second was too coarse
            "prefdata_version": __version__,
            "files": files,
            "counts": counts,
            "schema": shards.schema,
            "lineage": lineage,
            "check_report": None,
            "status_history": [{"status": "draft", "at": _now()}],
        }
        sign_creation(manifest, key)
        self._put(staging, MANIFEST, _dumps(manifest))  # last: a folder without it is no version
        final = self._dir(name, version)
        if self.fs.exists(f"{final}/{MANIFEST}"):
            existing = self.get(f"{name}@{version}")  # same content already stored
            if not _unsigned_draft(existing.manifest):
                return existing
            # A draft from before creation signatures, of these very files: this write's manifest (its
            # lineage as this import found it) replaces it, signed. Its files are checked by verify as ever.
            with self._lock(name):
                if _unsigned_draft(self._version(name, version).manifest):
                    self._replace_manifest(name, version, manifest)
            return self.get(f"{name}@{version}")
        self._rename(staging, final)
        return Version(name, version, manifest)

    def _put(self, folder: str, rel: str, data: bytes | memoryview) -> dict[str, Any]:
        path = f"{folder}/{rel}"
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as handle:
            handle.write(data)
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def _put_parquet(self, folder: str, rel: str, frame: pl.DataFrame) -> dict[str, Any]:
        """`_put` of a frame as Parquet. A local store's file is written by polars as it encodes, then
        hashed from the page cache: through a buffer, 1M pairs cost ~1 s more (a copy of the
        growing buffer, and the file's 330 MB written in one go after)."""
        if not self.local:
            buffer = io.BytesIO()
            frame.write_parquet(buffer, **_PARQUET)
            return self._put(folder, rel, buffer.getbuffer())
        path = f"{folder}/{rel}"
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        try:
            frame.write_parquet(path, **_PARQUET)
        except pl.exceptions.PolarsError as exc:  # polars wraps the file's OSError: a full disk must stay one (exit 4)
            code = _OS_ERROR.search(str(exc))
            if code is None:
                raise
            raise OSError(int(code[1]), os.strerror(int(code[1])), path) from None
        with open(path, "rb") as handle:
            digest = hashlib.file_digest(handle, "sha256")
        return {"sha256": digest.hexdigest(), "bytes": os.path.getsize(path)}

    def _share(self, source: str, target: str) -> None:
        """`target` holding `source`'s bytes: a hard link in a local store (no bytes written), else, or
        where the folder cannot link (another file system, a link limit), a copy."""
        if self.local:
            try:
                os.link(source, target)
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
            shutil.copyfile(source, target)
            return
        self.fs.copy(source, target)

    def _put_lines(self, folder: str, rel: str, lines: Iterable[str], per_write: int = 10_000) -> dict[str, Any] | None:
        """`_put` of text given a line at a time (a quarantine of millions of rows), hashed as written:
        the file and its hash are those of the lines joined, and no lines write no file."""
        path = f"{folder}/{rel}"
        digest, size = hashlib.sha256(), 0
        batch = list(itertools.islice(lines, per_write))
        if not batch:
            return None
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as handle:
            while batch:
                data = "".join(batch).encode("utf-8", "surrogatepass")
                handle.write(data)
                digest.update(data)
                size += len(data)
                batch = list(itertools.islice(lines, per_write))
        return {"sha256": digest.hexdigest(), "bytes": size}

    def _rename(self, staging: str, final: str) -> None:
        if self.local:
            try:
                os.rename(staging, final)  # atomic; fails if another writer got there first
            except OSError:
                if not os.path.exists(os.path.join(final, MANIFEST)):
                    raise
        else:
            self.fs.mv(staging, final, recursive=True)

    def _clean_staging(self, name: str) -> None:
        """Remove the staging folders killed writers left in NAME/ (a killed import can leave a
        partial Parquet file of any size). Only a dead writer's: one on this host (and pid namespace)
        whose process is gone, or one from elsewhere (or from before a reboot) untouched for
        STALE_STAGING_SECONDS. A live writer's staging is never touched. Local stores only: on object
        storage nothing here can tell a live writer from a dead one."""
        if not self.local:
            return
        parent = self._dir(name)
        try:
            entries = [e for e in os.scandir(parent) if e.name.startswith(STAGING) and e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return
        here = _writer_tag()
        for entry in entries:
            pid, _, rest = entry.name[len(STAGING):].partition("-")
            tag = rest.partition("-")[0]
            try:
                if pid.isdigit() and tag == here:
                    stale = not alive(int(pid))
                else:
                    stale = time.time() - _newest_mtime(entry.path) > STALE_STAGING_SECONDS
            except FileNotFoundError:
                continue  # renamed into place (or removed) by its writer meanwhile
            if stale:
                shutil.rmtree(entry.path, ignore_errors=True)  # another writer may be removing it too

    @contextmanager
    def _lock(self, name: str):
        if not self.local:
            yield  # object stores: the manifest is replaced in one PUT
            return
        from filelock import FileLock

        os.makedirs(self._dir(name), exist_ok=True)
        self._check_lock_file(name)
        with FileLock(self._dir(name) + "/.lock", timeout=60):
            yield

    def _check_lock_file(self, name: str) -> None:
        lock = self._dir(name) + "/.lock"
        if os.path.lexists(lock) and (os.path.islink(lock) or not os.path.isfile(lock)):
            raise UnusableInput(f"{lock} is {'a symlink' if os.path.islink(lock) else 'not a file'}, not a lock file: "
                                "remove it (prefdata makes its own)")

    def check_can_set_status(self, name: str) -> None:
        """What setting a status will need, checked before the work that decides it (a whole checklist
        run): a writable dataset folder, a lock file that is a file, a usable key. Exit 2 when not."""
        if not self.local:
            return
        folder = self._dir(name)
        self._check_lock_file(name)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UnusableInput(f"cannot write to the store {self.url} ({folder}: not writable): make it writable for "
                                "this user, or choose another store with --store or $PREFDATA_STORE")
        if os.path.lexists(self.key_path) or os.environ.get(KEY_ENV):
            self._key(create=False)  # a key that cannot be used says why now
        elif not os.access(self.root, os.W_OK | os.X_OK):
            raise UnusableInput(f"cannot write the store's key in {self.root}: make the folder writable, or set {KEY_ENV}")

    # -- the store's key ---------------------------------------------------------------------
    @property
    def key_path(self) -> str:
        return f"{self.root}/{KEY_FILE}"

    def _key(self, create: bool) -> bytes | None:
        """The key that signs status records: $PREFDATA_STORE_KEY, else the store's key file, made
        0600 on first use when `create`. None when there is none (nothing signed can be trusted)."""
        env = os.environ.get(KEY_ENV)
        if env:
            weakness = key_weakness(env)
            if weakness:
                raise UnusableInput(f"{KEY_ENV} is {weakness}: whoever guesses it can forge a validated version; "
                                    "make one with `python -c 'import secrets; print(secrets.token_hex(32))'`")
            return env.encode()
        if not self.local:
            if create:
                raise UnusableInput(f"the store {self.url} is not on a local disk: set {KEY_ENV} to sign its versions "
                                    "(a key file in shared storage is readable by everyone who reads the store)")
            return None
        path = self.key_path
        if create and not os.path.lexists(path):
            self._make_key(path)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        fix = f"or pass the store's key in ${KEY_ENV}"
        if not stat.S_ISREG(info.st_mode):
            raise UnusableInput(f"the store key {path} is not a regular file: remove it {fix}")
        if info.st_uid not in (os.geteuid(), 0):
            raise UnusableInput(f"the store key {path} belongs to another user (uid {info.st_uid}): only its owner "
                                f"signs and checks statuses with it; {fix}")
        if info.st_mode & 0o077:
            raise UnusableInput(f"the store key {path} can be read or written by other users (mode "
                                f"{stat.S_IMODE(info.st_mode):o}): whoever reads it can forge a validated status; "
                                f"chmod 600 {path}, {fix}")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                key = handle.read().strip()
        except OSError as exc:
            raise UnusableInput(f"cannot read the store key {path} ({exc.strerror}): {fix}") from None
        if len(key) < MIN_KEY_CHARS:
            raise UnusableInput(f"the store key {path} is damaged (too short): restore it from a backup {fix}")
        weakness = key_weakness(key.decode("latin-1"))
        if weakness:
            raise UnusableInput(f"the store key {path} is {weakness}, not one prefdata made: whoever guesses it can "
                                f"forge a validated version; restore the key from a backup {fix}")
        return key

    def _make_key(self, path: str) -> None:
        os.makedirs(self.root, exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                os.write(fd, (secrets.token_hex(32) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(tmp, path)  # appears whole, and never replaces a key another writer made first
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)  # whatever happened (a full disk too): no temporary key is left behind

    def status_problems(self, manifest: dict[str, Any]) -> list[str]:
        """Why a manifest's status record, or the manifest as it was created, cannot be trusted (empty
        when both can). A draft's status claims nothing, but its creation signature must hold; a
        version validated or rejected before creation signatures has its status signature alone, which
        covers every field too."""
        status = manifest.get("status")
        signature = manifest.get("status_signature")
        creation = manifest.get("creation_signature")
        if not isinstance(signature, dict):
            if status != "draft" or signature is not None:
                return [f"status: {status!r} has no signature (only `prefdata publish` sets a status): the manifest "
                        "was edited by hand"]
            if creation is None:
                return [UNSIGNED_DRAFT]
            return self._creation_problems(manifest)
        problems = self._status_signature_problems(manifest, signature)
        if not problems and creation is not None:
            problems = self._creation_problems(manifest)
        return problems

    def _signing_key_problem(self, what: str, signature: dict[str, Any]) -> tuple[bytes | None, str | None]:
        """The key to check a signature with, or why there is none to check it with."""
        key = self._key(create=False)
        if key is None:
            where = f"{self.key_path} is missing and ${KEY_ENV} is unset" if self.local else f"${KEY_ENV} is unset"
            return None, f"{what} is signed, but this store has no key to check it ({where})"
        if signature.get("key_id") != key_id(key):
            return None, (f"{what} is signed with another key (key id {signature.get('key_id')}, this store's is "
                          f"{key_id(key)}): set ${KEY_ENV} to the key that signed it")
        return key, None

    def _creation_problems(self, manifest: dict[str, Any]) -> list[str]:
        signature = manifest.get("creation_signature")
        if not isinstance(signature, dict):
            return ["creation: the creation signature is not a signature prefdata writes: the manifest was edited by hand"]
        key, problem = self._signing_key_problem("creation: the version", signature)
        if problem:
            return [problem]
        if not hmac.compare_digest(str(signature.get("mac")), creation_mac(manifest, key)):
            return ["creation: the manifest (its files, counts, schema, lineage or dates) does not match the signature "
                    "made when the version was created: it was edited by hand"]
        return []

    def _status_signature_problems(self, manifest: dict[str, Any], signature: dict[str, Any]) -> list[str]:
        status = manifest.get("status")
        key, problem = self._signing_key_problem(f"status: {status!r}", signature)
        if problem:
            return [problem]
        signed = signature.get("signed")
        fields = tuple(signed) if isinstance(signed, list) and all(isinstance(f, str) for f in signed) else None
        if fields not in _MAC_TAGS:
            return [f"status: the signature names fields {signed!r}, which no prefdata signs: it was edited by hand"]
        if not hmac.compare_digest(str(signature.get("mac")), status_mac(manifest, key, fields)):
            return [f"status: the manifest ({status!r}, its check report, history, dates, counts or lineage) does not "
                    "match its signature: it was edited by hand"]
        return []

    def set_status(self, ref: str, status: str, report: dict[str, Any] | None = None, note: str = "",
                   checked: Version | None = None) -> Version:
        """Record a check report and move draft -> validated | rejected, signed with the store's key.
        Validated is final; the same status again with the same report (and no note) changes nothing.

        `checked`: the version as the report's checks read it (`pinned`). The signature covers the
        whole manifest (file hashes, lineage, counts, schema, dates), so it must be the manifest the
        checks read: one that differs from it in anything at all is refused, never signed. A manifest
        whose creation signature fails (or a draft from before there were any) is never signed either:
        its lineage and dates would become the pipeline's word."""
        if status not in STATUSES:
            raise UnusableInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        v = self.get(ref)
        with self._writing(), self._lock(v.name):
            key = self._key(create=True)
            manifest = self._read_manifest(v.name, v.version)  # re-read under the lock
            if checked is not None and _canonical(manifest) != _canonical(checked.manifest):
                changed = sorted(f for f in set(manifest) | set(checked.manifest)
                                 if _canonical(manifest.get(f)) != _canonical(checked.manifest.get(f)))
                raise GateFailed(f"{v.ref}: its manifest changed while the checklist ran ({', '.join(changed)}), so the "
                                 f"verdict covers another manifest: nothing was signed; run `prefdata verify {v.ref}`")
            problems = self.status_problems(manifest)
            # What vouches for the fields a status signature covers: the creation signature; for a version
            # from before those, a status signature that holds. Neither: nothing is signed.
            vouching = (self._creation_problems(manifest) if manifest.get("creation_signature") is not None
                        else problems)
            if vouching:
                raise GateFailed(f"{v.ref} cannot be signed: {vouching[0]}; run `prefdata verify {v.ref}`")
            # An unsigned or forged status record is no status at all: it neither blocks nor skips this one.
            trusted = not problems
            if trusted and manifest["status"] == "validated":
                if status != "validated":
                    raise GateFailed(f"{v.ref} is validated; a validated version never changes status")
                return Version(v.name, v.version, manifest)
            same_report = report is None or _canonical(report) == _canonical(manifest.get("check_report"))
            if trusted and manifest["status"] == status and same_report and not note:
                return Version(v.name, v.version, manifest)
            manifest["status"] = status
            if report is not None:
                manifest["check_report"] = report
            manifest["status_history"] = list(manifest.get("status_history") or []) + [
                {"status": status, "at": _now(), **({"note": note} if note else {})}]
            sign_status(manifest, key)
            self._replace_manifest(v.name, v.version, manifest)
        return Version(v.name, v.version, manifest)

    def _replace_manifest(self, name: str, version: str, manifest: dict[str, Any]) -> None:
        """Atomic replace, through a temporary file in NAME/ (never in the version folder, which
        holds exactly the manifest's files). Called under the lock, so any other temporary manifest
        there is a killed writer's."""
        parent = self._dir(name)
        prefix = f".{MANIFEST}-"
        if self.local:
            for entry in os.scandir(parent):
                if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                    os.unlink(entry.path)
        tmp = f"{parent}/{prefix}{version}-{uuid.uuid4().hex}.tmp"
        try:
            with self.fs.open(tmp, "wb") as handle:
                handle.write(_dumps(manifest))
            if self.local:
                os.replace(tmp, f"{self._dir(name, version)}/{MANIFEST}")
            else:
                self.fs.mv(tmp, f"{self._dir(name, version)}/{MANIFEST}")
        except BaseException:
            if self.fs.exists(tmp):  # a full disk, a signal: the old manifest stays, and nothing beside it
                self.fs.rm(tmp)
            raise

    # -- reading ---------------------------------------------------------------------------
    def _open(self, path: str, rel: str):
        """A file inside the store opened for reading, and its size. A local store's must be a regular
        file, told by lstat before any open: a symlink (to /dev/zero, or out of the store), a FIFO
        (whose open blocks), a socket or a device is a DamagedFile naming it, never opened or read."""
        if not self.local:
            return self.fs.open(path, "rb"), self.fs.size(path)
        try:
            handle = open_regular(path)
        except NotRegularFile as exc:
            raise DamagedFile(rel, f"is {exc.kind}, not a regular file") from None
        except OSError as exc:
            raise DamagedFile(rel, f"cannot be read ({exc.strerror})") from None
        return handle, os.fstat(handle.fileno()).st_size

    def _read_manifest(self, name: str, version: str) -> dict[str, Any]:
        """The parsed manifest; DamagedFile when it is no regular file, or bigger than
        MAX_MANIFEST_BYTES (told by its size before reading, and by reading at most one byte more)."""
        folder = self._dir(name, version)
        if self.local and os.path.islink(folder):  # its files would lie outside the store, wherever it points
            raise DamagedFile(MANIFEST, "lies in a version folder that is a symlink, not a folder of the store")
        handle, size = self._open(f"{folder}/{MANIFEST}", MANIFEST)
        with handle:
            data = b"" if size > MAX_MANIFEST_BYTES else read_at_most(handle, MAX_MANIFEST_BYTES)
        if size > MAX_MANIFEST_BYTES or len(data) > MAX_MANIFEST_BYTES:
            raise DamagedFile(MANIFEST, f"is larger than {MAX_MANIFEST_BYTES >> 20} MiB, more than any manifest "
                                        "prefdata writes")
        return json.loads(data)

    def _version(self, name: str, version: str) -> Version:
        """The version in NAME/VERSION; one whose manifest cannot be read (no regular file, too big,
        not JSON, not an object, a field missing or of the wrong type) is a DAMAGED version, which lists
        as such and fails verify, never an error (or a hang) that hides its sibling versions."""
        try:
            manifest = self._read_manifest(name, version)
            problem = _manifest_problem(manifest)
        except DamagedFile as exc:
            problem = f"it {exc.reason}"
        except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
            problem = f"not valid JSON ({exc})"
        if problem:
            manifest = {"name": name, "version": version, "status": DAMAGED, "created_at": "",
                        "files": {}, "counts": {"rows": {}}, "damaged": f"{MANIFEST} is damaged: {problem}"}
        return Version(name, version, manifest)

    def versions(self, name: str | None = None) -> list[Version]:
        """Every version (of one name), oldest first by the date it was made. Only NAME/ID folders are
        versions: a folder whose name is no dataset name (`good copy/`) or whose id is not one the store
        makes (`good/backup/`, staging, a look-alike) is no version, and is passed over without a word
        that would stop the listing of every other dataset."""
        pattern = f"{self.root}/{check_name(name) if name else '*'}/*/{MANIFEST}"
        found = []
        for path in self.fs.glob(pattern):
            parts = path.rstrip("/").split("/")
            vname, version = parts[-3], parts[-2]
            if not _VERSION_ID.fullmatch(version) or not _NAME.fullmatch(vname) or ".." in vname:
                continue
            found.append(self._version(vname, version))
        return sorted(found, key=lambda v: (v.name, _created(v), v.version))

    def get(self, ref: str) -> Version:
        name, version = parse_ref(ref)
        candidates = self.versions(name)
        if not candidates:
            raise UnusableInput(f"no dataset named {name!r} in the store {self.url} (see `prefdata versions`)")
        if version == "latest":
            readable = [v for v in candidates if v.status != DAMAGED]
            if not readable:
                raise UnusableInput(f"every version of {name!r} has a damaged {MANIFEST} (see `prefdata versions {name}`)")
            return readable[-1]
        exact = [v for v in candidates if v.version == version]
        matches = exact or [v for v in candidates if v.version.startswith(version)]
        if len(matches) != 1:
            what = "no version" if not matches else f"{len(matches)} versions"
            raise UnusableInput(f"{ref!r}: {what} of {name!r} match; known: {', '.join(v.version for v in candidates)}")
        return matches[0]

    def load(self, ref: str, config: str = "default", split: str | None = None) -> pl.DataFrame:
        """One table of a version as a polars frame (all splits stacked when split is None)."""
        v = self.get(ref)
        frames = []
        for rel in self.table_files(v, config):
            if split is None or rel.split("/")[1].startswith(split + "-"):
                frames.append(pl.read_parquet(self._read_file(v, rel)))
        if not frames:
            raise UnusableInput(f"{v.ref} has no {config!r} table" + (f" split {split!r}" if split else ""))
        return pl.concat(frames, how="diagonal")

    def table_files(self, v: Version, config: str) -> list[str]:
        """A version's files of one table, in row order (the order `load` stacks them)."""
        folder = CONFIG_DIRS[config]
        return sorted(f for f in v.manifest["files"] if f.startswith(folder + "/"))

    def _parquet_source(self, v: Version, rel: str):
        """What polars reads one of a version's Parquet files from: its path in a local store (read in
        part, a column or a row group at a time), else its bytes."""
        return self.file_path(v, rel) if self.local else self._read_file(v, rel)

    def table_schema(self, v: Version, config: str) -> pl.Schema:
        """The column types of a version's table, from its first file's footer."""
        return pl.read_parquet_schema(self._parquet_source(v, self.table_files(v, config)[0]))

    def read_columns(self, v: Version, config: str, columns: list[str] | None,
                     ids: pl.Series | None = None) -> pl.DataFrame:
        """Some columns (None: all) of a version's table, every file stacked; `ids`: only those rows."""
        frames = []
        for rel in self.table_files(v, config):
            scan = pl.scan_parquet(self._parquet_source(v, rel))
            if ids is not None:
                scan = scan.filter(pl.col("id").is_in(ids.implode()))
            frames.append(scan.select(columns) if columns is not None else scan)
        return pl.concat(pl.collect_all(frames), how="diagonal_relaxed")

    # -- a validated version's gate artifacts ----------------------------------------------------------
    # What validating a version computed that its children (a growing dataset) take again instead of
    # computing it (prefdata.gate.runner reuse_of): beside the version, never in its folder (whose files
    # its id binds), at NAME/.gate/VERSION/. Each is bound by its sha256 in the version's signed check
    # report; one written by a publish that then failed is named by no report, and never read.
    def _gate_dir(self, v: Version) -> str:
        return f"{self._dir(v.name)}/.gate/{v.version}"

    def write_gate_file(self, v: Version, rel: str, data: bytes) -> str:
        """Store one artifact of `v` (atomically where the store is local); its sha256, for the report."""
        folder = self._gate_dir(v)
        with self._writing():
            self.fs.makedirs(folder, exist_ok=True)
            if self.local:
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
                os.fchmod(fd, 0o644)  # readable as the version's own files are (mkstemp makes 0600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, f"{folder}/{rel}")
            else:
                with self.fs.open(f"{folder}/{rel}", "wb") as handle:
                    handle.write(data)
        return hashlib.sha256(data).hexdigest()

    def link_gate_file(self, v: Version, rel: str, source: Version, source_rel: str, sha256: str) -> str:
        """Store as `v`'s artifact `rel` the artifact `source_rel` of `source` (its parent), whose signed
        report gives it the hash `sha256`: a hard link where the store is local (gate files are replaced,
        never written in place, so the two never diverge), else a copy. Its sha256, for the report: should
        the source have changed meanwhile, the link fails its hash when read, and is never used."""
        if self.local:
            folder = self._gate_dir(v)
            with self._writing():
                os.makedirs(folder, exist_ok=True)
                tmp = f"{folder}/.tmp-link-{os.getpid()}-{rel}"
                try:
                    os.link(f"{self._gate_dir(source)}/{source_rel}", tmp)
                    os.replace(tmp, f"{folder}/{rel}")
                    return sha256
                except OSError:  # another file system, or links not allowed: a copy
                    with suppress(FileNotFoundError):
                        os.unlink(tmp)
        return self.write_gate_file(v, rel, self.read_gate_file(source, source_rel, sha256))

    def read_gate_file(self, v: Version, rel: str, sha256: str, max_bytes: int = 1 << 30) -> bytes:
        """One artifact of `v`, whole, when it has the hash `sha256` (its signed report's); else
        DamagedFile saying what is wrong with it."""
        path = f"{self._gate_dir(v)}/{rel}"
        try:
            handle, size = self._open(path, rel)
        except DamagedFile:
            raise
        except (FileNotFoundError, OSError) as exc:
            raise DamagedFile(rel, f"cannot be read ({exc.strerror or exc})") from None
        with handle:
            data = read_at_most(handle, min(size, max_bytes))
        if hashlib.sha256(data).hexdigest() != sha256:
            raise DamagedFile(rel, "does not have the hash the version's signed report gives")
        return data

    def read_text(self, ref: str, rel: str) -> str:
        return self._read_file(self.get(ref), rel).decode("utf-8")

    def _open_version_file(self, v: Version, rel: str):
        """One file of a version opened for reading, with its size: a regular file of the size its
        manifest records. Anything else is one line (GateFailed) naming it, pointing to verify."""
        info = v.manifest["files"].get(rel)
        if not isinstance(info, dict):
            raise UnusableInput(f"{v.ref} has no file {rel}")
        try:
            handle, size = self._open(f"{self.version_dir(v)}/{rel}", rel)
            if size != info.get("bytes"):
                handle.close()
                raise DamagedFile(rel, f"is {size} bytes, its manifest says {info.get('bytes')}")
        except DamagedFile as exc:
            raise GateFailed(f"{v.ref}: {exc}: run `prefdata verify {v.ref}`") from None
        return handle, size

    def _read_file(self, v: Version, rel: str) -> bytes:
        """One file of a version, whole, never more of it than the manifest's size + 1 bytes."""
        handle, size = self._open_version_file(v, rel)
        with handle:
            data = read_at_most(handle, size)
        if len(data) != size:
            raise GateFailed(f"{v.ref}: {rel} changed size while it was read: run `prefdata verify {v.ref}`")
        return data

    def file_path(self, v: Version, rel: str) -> str:
        """The path (of `self.fs`) of one file of a version, for a reader that opens it itself (a
        shard at a time), once it is known to be a regular file of the size the manifest records."""
        handle, _ = self._open_version_file(v, rel)
        handle.close()
        return f"{self.version_dir(v)}/{rel}"

    def verify(self, ref: str) -> list[str]:
        """Every problem with a version: a changed, missing or extra file (dot-files and empty
        folders too: nothing but the manifest's files belongs in a version), a manifest whose hashes
        or name lie, and a status record that does not match its signature."""
        return self._problems(self.get(ref))

    @contextmanager
    def pinned(self, ref: str, *, unsigned_draft_ok: bool = False) -> Iterator[tuple[Store, Version]]:
        """A private copy of one version and its manifest, for whatever must judge or use exactly
        the bytes the manifest names (the checklist before `publish` signs a status, a trainer).

        The manifest is read once and each file once: copied into a folder only this user can read,
        hashed as it is copied, and checked against that manifest; any problem `verify` would name
        raises GateFailed before anything reads the copy. Since the copy is what gets read, a writer
        of the store who swaps a file between the check and the use changes nothing that is read.
        Yields (a Store over the copy, the version as read); the copy is removed on exit.

        `unsigned_draft_ok`: a draft from before creation signatures passes (an --eval set: what is
        read of it is its files, which its version id binds); every other problem still refuses.
        A temporary folder without room for the copy is NoSpace naming it, and how to choose another."""
        v = self.get(ref)
        with ExitStack() as stack:
            try:
                copy_root = stack.enter_context(scratch("pinned"))  # 0700
                folder = f"{copy_root}/{v.name}/{v.version}"
                os.makedirs(folder)
                problems = self._problems(v, copy_to=folder)
                if unsigned_draft_ok:
                    problems = [p for p in problems if p != UNSIGNED_DRAFT]
                if problems:
                    raise GateFailed(f"{v.ref} fails verification ({problems[0]}): run `prefdata verify {v.ref}`; "
                                     "its files or its signed status changed")
                with open(f"{folder}/{MANIFEST}", "wb") as handle:
                    handle.write(_dumps(v.manifest))
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                size = sum(i.get("bytes") or 0 for i in v.manifest["files"].values() if isinstance(i, dict))
                raise NoSpace(f"no space left in the temporary folder {tempfile.gettempdir()} for the private copy of "
                              f"{v.ref} ({size / 2**20:.1f} MiB) that is checked before it is used ({exc.strerror}): "
                              "free space there, or point TMPDIR at a folder with room "
                              "(TMPDIR=/path/with/room prefdata ...)") from None
            yield Store(str(copy_root)), v

    def _problems(self, v: Version, copy_to: str | None = None) -> list[str]:
        """verify's problems with `v` as read (its manifest as given); with `copy_to`, each file is
        also copied there in the one read that hashes it."""
        if v.status == DAMAGED:
            return [f"manifest: {v.manifest['damaged']}: restore it from a backup, or delete {self._dir(v.name, v.version)}"]
        folder = self._dir(v.name, v.version)
        problems = []
        expected = v.manifest["files"]
        present, folders = self._listing(folder)
        present.pop(MANIFEST, None)
        for rel in sorted(expected):
            if rel not in present:
                problems.append(f"missing: {rel}")
            elif present[rel]:  # never opened: a FIFO would block, /dev/zero would never end
                problems.append(f"damaged: {rel} is {present[rel]}, not a regular file")
            else:
                problem = self._file_problem(folder, rel, expected[rel], f"{copy_to}/{rel}" if copy_to else None)
                problems += [problem] if problem else []
        problems += [f"extra: {rel}" + (f" ({present[rel]})" if present[rel] else "")
                     for rel in sorted(set(present) - set(expected))]
        # a folder holding no file at all is extra too (one holding an extra file is named by it)
        problems += [f"extra: {d}/" for d in sorted(folders)
                     if not any(f.startswith(d + "/") for f in set(present) | set(expected))]
        if version_id(expected) != v.version:
            problems.append(f"manifest: its file hashes give version {version_id(expected)}, not {v.version}")
        if (v.manifest.get("name"), v.manifest.get("version")) != (v.name, v.version):
            problems.append(f"manifest: it names {v.manifest.get('name')}@{v.manifest.get('version')}, "
                            f"but lies in {v.ref}'s folder")
        return problems + self.status_problems(v.manifest)

    def _listing(self, folder: str) -> tuple[dict[str, str | None], set[str]]:
        """Everything under a version folder: each file's relative path -> what it is when it is not a
        regular file (None when it is), and every folder. A local store's is walked by lstat, so a
        symlink is an entry of its own, never followed (a link to / would walk the whole disk)."""
        files: dict[str, str | None] = {}
        folders: set[str] = set()
        if not self.local:
            for path, info in self.fs.find(folder, withdirs=True, detail=True).items():
                rel = path.rstrip("/")[len(folder) + 1 :]
                if rel:
                    if info["type"] == "directory":
                        folders.add(rel)
                    else:
                        files[rel] = None
            return files, folders
        stack = [""]
        while stack:  # not recursion: a version folder nested a thousand deep is one more problem, not a crash
            top = stack.pop()
            with os.scandir(f"{folder}/{top}" if top else folder) as entries:
                for entry in entries:
                    rel = f"{top}/{entry.name}" if top else entry.name
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISDIR(mode):
                        folders.add(rel)
                        stack.append(rel)
                    else:
                        files[rel] = kind_of(mode)
        return files, folders

    def _file_problem(self, folder: str, rel: str, info: dict[str, Any], copy_to: str | None = None,
                      block: int = 1 << 22) -> str | None:
        """What is wrong with one file of a version, read once, a block at a time, and hashed; with
        `copy_to`, the blocks hashed are the blocks written there. A size other than the manifest's
        `bytes` is a change told without reading, and no more than `bytes` + 1 is ever read, so a file
        that grows meanwhile is told too, and never fills memory or the copy's disk."""
        try:
            handle, size = self._open(f"{folder}/{rel}", rel)
        except DamagedFile as exc:
            return f"damaged: {exc}"
        recorded = info.get("bytes")
        with handle:
            if size != recorded:
                return f"changed: {rel} ({size} bytes, manifest says {recorded})"
            digest, left = hashlib.sha256(), size + 1
            sink = None
            if copy_to is not None:
                os.makedirs(os.path.dirname(copy_to), exist_ok=True)
                sink = open(copy_to, "wb")
            try:
                while left > 0 and (chunk := handle.read(min(block, left))):
                    digest.update(chunk)
                    left -= len(chunk)
                    if sink is not None:
                        sink.write(chunk)
            finally:
                if sink is not None:
                    sink.close()
        if left <= 0:
            return f"changed: {rel} (it grew past the manifest's {recorded} bytes while it was read)"
        if digest.hexdigest() != info["sha256"]:
            return f"changed: {rel} (sha256 {digest.hexdigest()[:12]}, manifest says {info['sha256'][:12]})"
        return None


def _unsigned_draft(manifest: dict[str, Any]) -> bool:
    """A draft written before versions were signed at creation (or one whose signatures were removed:
    the two look the same, hence publish refuses both)."""
    return (manifest.get("status") == "draft" and manifest.get("status_signature") is None
            and manifest.get("creation_signature") is None)


def _manifest_problem(manifest: Any) -> str | None:
    """What makes a parsed manifest unusable (the fields every command reads), or None."""
    if not isinstance(manifest, dict):
        return f"a JSON {type(manifest).__name__}, not an object"
    expected = {"status": str, "created_at": str, "files": dict, "counts": dict}
    for field, kind in expected.items():
        if not isinstance(manifest.get(field), kind):
            return f"{field!r} is missing or not a {kind.__name__}"
    if not isinstance(manifest["counts"].get("rows"), dict):
        return "'counts' has no 'rows' object"
    return None


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode()


def _writer_tag() -> str:
    """This host, boot and pid namespace: where a staging folder's pid means this machine's process.
    After a reboot, or from another container or machine, the tag differs and only age counts."""
    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(open(path).read().strip() if path.endswith("boot_id") else str(os.stat(path).st_ino))
        except OSError:
            parts.append("-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _newest_mtime(folder: str) -> float:
    """The last time anything in a folder was written: a writer busy with a large file keeps it fresh."""
    newest = os.lstat(folder).st_mtime
    for dirpath, dirnames, filenames in os.walk(folder):
        for entry in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, entry)).st_mtime)
            except OSError:
                pass
    return newest
