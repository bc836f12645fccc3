"""The dataset store: immutable, content-addressed versions with their lineage.

    <root>/<name>/<version>/
        README.md                         dataset card (HF YAML header: one config per table)
        data/<split>-00000-of-00001.parquet   preference pairs      (config "default")
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
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import polars as pl

from prefdata import __version__
from prefdata.card import render_card
from prefdata.errors import GateFailed, UnusableInput

DEFAULT_ROOT = os.path.join(".prefdata", "store")
STATUSES = ("draft", "validated", "rejected")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_VERSION = re.compile(r"^[0-9a-f]{4,64}$")
MANIFEST = "manifest.json"
CONFIG_DIRS = {"default": "data", "sft": "sft", "comparisons": "comparisons", "votes": "votes"}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def check_name(name: str) -> str:
    if not _NAME.match(name) or ".." in name:
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
    if version != "latest" and not _VERSION.match(version):
        raise UnusableInput(f"{ref!r}: version must be 'latest' or hex digits of a version id (see `prefdata versions`)")
    return name, version


def version_id(files: dict[str, dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{files[path]['sha256']}\n".encode())
    return h.hexdigest()[:12]


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


class Store:
    def __init__(self, root: str | None = None):
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.url = root or os.environ.get("PREFDATA_STORE") or DEFAULT_ROOT
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = self.root.rstrip("/")

    # -- paths -----------------------------------------------------------------------------
    def _dir(self, name: str, version: str | None = None) -> str:
        parts = [self.root, check_name(name)] + ([version] if version else [])
        return "/".join(parts)

    def path(self, ref: str) -> str:
        v = self.get(ref)
        return self._dir(v.name, v.version)

    # -- writing ---------------------------------------------------------------------------
    def create(
        self,
        name: str,
        tables: dict[str, dict[str, pl.DataFrame]],
        *,
        quarantine: list[dict[str, Any]] | None = None,
        counts: dict[str, Any],
        lineage: dict[str, Any],
        guidelines: str | None = None,
    ) -> Version:
        """Write a new draft version; the same content returns the existing version unchanged.

        tables: {config: {split: frame}}; configs are those of CONFIG_DIRS.
        """
        check_name(name)
        staging = self._dir(name, f".tmp-{uuid.uuid4().hex}")
        self.fs.makedirs(staging, exist_ok=True)
        try:
            files: dict[str, dict[str, Any]] = {}
            configs: dict[str, dict[str, str]] = {}
            rows: dict[str, dict[str, int]] = {}
            schema: dict[str, dict[str, str]] = {}
            for config, splits in tables.items():
                folder = CONFIG_DIRS[config]
                for split, frame in sorted(splits.items()):
                    rel = f"{folder}/{split}-00000-of-00001.parquet"
                    buffer = io.BytesIO()
                    frame.write_parquet(buffer, compression="zstd", statistics=False)
                    files[rel] = self._put(staging, rel, buffer.getvalue())
                    configs.setdefault(config, {})[split] = f"{folder}/{split}-*.parquet"
                    rows.setdefault(config, {})[split] = frame.height
                    schema[config] = {c: str(t) for c, t in frame.schema.items()}
            if quarantine:
                body = "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in quarantine)
                files["quarantine.jsonl"] = self._put(staging, "quarantine.jsonl", body.encode("utf-8", "surrogatepass"))
            counts = {**counts, "rows": rows}
            card = render_card(name, configs, counts, guidelines)
            files["README.md"] = self._put(staging, "README.md", card.encode())
            version = version_id(files)
            manifest = {
                "name": name,
                "version": version,
                "status": "draft",
                "created_at": _now(),
                "prefdata_version": __version__,
                "files": files,
                "counts": counts,
                "schema": schema,
                "lineage": lineage,
                "check_report": None,
                "status_history": [{"status": "draft", "at": _now()}],
            }
            self._put(staging, MANIFEST, _dumps(manifest))  # last: a folder without it is no version
            final = self._dir(name, version)
            if self.fs.exists(f"{final}/{MANIFEST}"):
                return self.get(f"{name}@{version}")  # same content already stored
            self._rename(staging, final)
        finally:
            if self.fs.exists(staging):
                self.fs.rm(staging, recursive=True)
        return Version(name, version, manifest)

    def _put(self, folder: str, rel: str, data: bytes) -> dict[str, Any]:
        path = f"{folder}/{rel}"
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as handle:
            handle.write(data)
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def _rename(self, staging: str, final: str) -> None:
        if self.local:
            try:
                os.rename(staging, final)  # atomic; fails if another writer got there first
            except OSError:
                if not os.path.exists(os.path.join(final, MANIFEST)):
                    raise
        else:
            self.fs.mv(staging, final, recursive=True)

    @contextmanager
    def _lock(self, name: str):
        if not self.local:
            yield  # object stores: the manifest is replaced in one PUT
            return
        from filelock import FileLock

        os.makedirs(self._dir(name), exist_ok=True)
        with FileLock(self._dir(name) + "/.lock", timeout=60):
            yield

    def set_status(self, ref: str, status: str, report: dict[str, Any] | None = None, note: str = "") -> Version:
        """Record a check report and move draft -> validated | rejected. Validated is final."""
        if status not in STATUSES:
            raise UnusableInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        v = self.get(ref)
        with self._lock(v.name):
            manifest = self._read_manifest(v.name, v.version)  # re-read under the lock
            if manifest["status"] == "validated" and status != "validated":
                raise GateFailed(f"{v.ref} is validated; a validated version never changes status")
            manifest["status"] = status
            if report is not None:
                manifest["check_report"] = report
            manifest["status_history"].append({"status": status, "at": _now(), **({"note": note} if note else {})})
            folder = self._dir(v.name, v.version)
            tmp = f"{folder}/.{MANIFEST}.{uuid.uuid4().hex}"
            with self.fs.open(tmp, "wb") as handle:
                handle.write(_dumps(manifest))
            if self.local:
                os.replace(tmp, f"{folder}/{MANIFEST}")
            else:
                self.fs.mv(tmp, f"{folder}/{MANIFEST}")
        return Version(v.name, v.version, manifest)

    # -- reading ---------------------------------------------------------------------------
    def _read_manifest(self, name: str, version: str) -> dict[str, Any]:
        with self.fs.open(f"{self._dir(name, version)}/{MANIFEST}", "rb") as handle:
            return json.loads(handle.read())

    def versions(self, name: str | None = None) -> list[Version]:
        pattern = f"{self.root}/{check_name(name) if name else '*'}/*/{MANIFEST}"
        found = []
        for path in self.fs.glob(pattern):
            parts = path.rstrip("/").split("/")
            vname, version = parts[-3], parts[-2]
            if version.startswith("."):
                continue
            found.append(Version(vname, version, self._read_manifest(vname, version)))
        return sorted(found, key=lambda v: (v.name, v.manifest["created_at"], v.version))

    def get(self, ref: str) -> Version:
        name, version = parse_ref(ref)
        candidates = self.versions(name)
        if not candidates:
            raise UnusableInput(f"no dataset named {name!r} in the store {self.url} (see `prefdata versions`)")
        if version == "latest":
            return candidates[-1]
        matches = [v for v in candidates if v.version.startswith(version)]
        if len(matches) != 1:
            what = "no version" if not matches else f"{len(matches)} versions"
            raise UnusableInput(f"{ref!r}: {what} of {name!r} match; known: {', '.join(v.version for v in candidates)}")
        return matches[0]

    def load(self, ref: str, config: str = "default", split: str | None = None) -> pl.DataFrame:
        """One table of a version as a polars frame (all splits stacked when split is None)."""
        v = self.get(ref)
        folder = CONFIG_DIRS[config]
        frames = []
        for rel in sorted(f for f in v.manifest["files"] if f.startswith(folder + "/")):
            if split is None or rel.split("/")[1].startswith(split + "-"):
                with self.fs.open(f"{self._dir(v.name, v.version)}/{rel}", "rb") as handle:
                    frames.append(pl.read_parquet(handle.read()))
        if not frames:
            raise UnusableInput(f"{v.ref} has no {config!r} table" + (f" split {split!r}" if split else ""))
        return pl.concat(frames, how="diagonal")

    def read_text(self, ref: str, rel: str) -> str:
        with self.fs.open(f"{self.path(ref)}/{rel}", "rb") as handle:
            return handle.read().decode("utf-8")

    def verify(self, ref: str) -> list[str]:
        """Every problem with a version's files: changed, missing, extra, or a manifest that lies."""
        v = self.get(ref)
        folder = self._dir(v.name, v.version)
        problems = []
        expected = v.manifest["files"]
        present = {
            p[len(folder) + 1 :] for p in self.fs.find(folder) if not p.rsplit("/", 1)[-1].startswith(".")
        } - {MANIFEST}
        for rel in sorted(expected):
            if rel not in present:
                problems.append(f"missing: {rel}")
                continue
            with self.fs.open(f"{folder}/{rel}", "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            if digest != expected[rel]["sha256"]:
                problems.append(f"changed: {rel} (sha256 {digest[:12]}, manifest says {expected[rel]['sha256'][:12]})")
        problems += [f"extra: {rel}" for rel in sorted(present - set(expected))]
        if version_id(expected) != v.version:
            problems.append(f"manifest: its file hashes give version {version_id(expected)}, not {v.version}")
        return problems


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode()
