"""Read rows from JSONL, JSON, CSV and Parquet files, gzipped, zstd-compressed or not.

Readers yield `RawRow`s and never raise for a bad row: a line that is not valid UTF-8 or not JSON,
a row nested deeper than MAX_DEPTH, or an object with a key given twice becomes a RawRow with an
`error`, so the importer can quarantine it with its row number. Only a file that cannot be used at
all (missing, unreadable, unknown type, corrupt gzip, a JSON document broken outside its rows)
raises UnusableInput.

Row numbers are what a user finds in an editor: the line in JSONL and CSV/TSV (the header is
line 1; a quoted field over several lines counts from its first line), the element of a JSON array
(1-based), the record of a Parquet file (1-based).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefdata.base.errors import UnusableInput

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# The largest zstd window (the history a frame may refer back to) read: 128 MiB, what `zstd -d` reads
# without --long and what the decoder then holds at most. A frame written with `zstd --long=28..31` from
# a stream (no size in its header) asks for up to 2 GiB; it is refused in one line that says how to read it.
MAX_ZSTD_WINDOW_LOG = 27
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".zst", ".zstd")
PARQUET_MAGIC = b"PAR1"
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, which Windows tools put before the first row
MAX_DEPTH = 100  # preference rows nest 3 levels (a message list); deeper is an attack or an accident
RAW_TEXT_CHARS = 2000  # unparsed text kept for the quarantine file
# A JSONL line longer than this is quarantined as row_too_large without being held whole. The import
# sets it from --max-text-bytes (ROW_BYTES_PER_TEXT_BYTE times it): a row holds a few texts, each at
# most that long, and JSON escapes can double a text's bytes.
ROW_BYTES_PER_TEXT_BYTE = 16
MAX_ROW_BYTES = ROW_BYTES_PER_TEXT_BYTE << 20
_SURROGATE = re.compile("[\ud800-\udfff]")
KINDS = ("jsonl", "json", "csv", "tsv", "parquet")


@dataclass(frozen=True)
class RawRow:
    number: int  # 1-based: the line in JSONL, the element in a JSON array, the record in CSV/Parquet
    data: dict[str, Any] | None
    error: str | None = None  # a quarantine reason when the row could not be read
    detail: str = ""
    text: str | None = None  # the unparsed text of a row that could not be read, cut to RAW_TEXT_CHARS


def file_kind(path: Path, head: bytes) -> str:
    """The container type, from the extension (ignoring .gz, .zst) and, failing that, the first bytes."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() not in COMPRESSED_SUFFIXES]
    ext = suffixes[-1].lstrip(".") if suffixes else ""
    if ext in ("jsonl", "ndjson"):
        return "jsonl"
    if ext in ("parquet", "pq"):
        return "parquet"
    if ext in KINDS:
        return ext
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    stripped = head.lstrip()
    if stripped.startswith(b"["):
        return "json"
    if stripped.startswith(b"{"):
        return "jsonl"
    raise UnusableInput(
        f"{path}: cannot tell the file type from its name or content; "
        "use one of .jsonl, .json, .csv, .tsv, .parquet (optionally .gz or .zst)"
    )


def require_regular_file(path: Path) -> None:
    """A data file is read more than once (its type, its rows, its sha256 for the lineage), which a
    pipe or a device cannot give twice the same (`cat f > fifo` would hang on the second read; /dev/zero
    never ends): anything but a regular file (or a link to one) is refused before the first read."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UnusableInput(f"{path}: no such file") from None
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read it ({exc.strerror})") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):  # a folder is refused where it is opened, in its own words
        return
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise UnusableInput(f"{path}: is {what}, not a regular file; prefdata reads its input more than once, so save it "
                        f"to a file first (e.g. `cat {path} > data.jsonl`)")


def read_bytes(path: Path) -> bytes:
    """The whole file, decompressed (Parquet, which is read in one piece)."""
    require_regular_file(path)
    with _open_data(path) as handle:
        try:
            return handle.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None


def _stream_error(path: Path, handle: Any, exc: Exception) -> UnusableInput:
    if isinstance(handle, gzip.GzipFile):
        return UnusableInput(f"{path}: corrupt gzip data ({exc})")
    if isinstance(getattr(handle, "raw", None), _Zstd):
        return UnusableInput(f"{path}: {exc}")  # "corrupt zstd data (...)"
    return UnusableInput(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})")


def has_invalid_text(value: Any) -> bool:
    """True when a decoded value carries lone surrogates, i.e. bytes that were not valid UTF-8."""
    if isinstance(value, str):
        return bool(_SURROGATE.search(value))
    if isinstance(value, dict):
        return any(has_invalid_text(v) for v in value.values()) or any(has_invalid_text(k) for k in value)
    if isinstance(value, list):
        return any(has_invalid_text(v) for v in value)
    return False


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep lists and objects nest (a flat row is 1); stops counting past `limit`. Iterative, so
    a hostile row cannot exhaust Python's stack."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: a key given twice would silently keep the last value."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_WS = re.compile(r"[ \t\n\r]*")
_JSON_TOKEN = re.compile(r'["\[\]{}]')
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _cut_text(text: str) -> str:
    return text if len(text) <= RAW_TEXT_CHARS else text[:RAW_TEXT_CHARS] + f"... [{len(text)} chars]"


def _value_end(text: str, pos: int) -> int:
    """Where the JSON array or object starting at `pos` ends, by counting brackets outside strings:
    used to step over a value the decoder refused (too deep, a duplicate key) without recursion."""
    depth = 0
    while True:
        token = _JSON_TOKEN.search(text, pos)
        if token is None:
            return len(text)
        char, pos = token.group(), token.end()
        if char == '"':
            string = _JSON_STRING.match(text, token.start())
            if string is None:
                return len(text)
            pos = string.end()
            continue
        depth += 1 if char in "[{" else -1
        if depth == 0:
            return pos


def _decode_at(text: str, pos: int, number: int, check_text: bool = True) -> tuple[RawRow, int]:
    """Decode the JSON value at `pos` as row `number`; returns the row and where the value ends."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except RecursionError:
        end = _value_end(text, pos)
        return RawRow(number, None, "too_deep", f"nested more than {MAX_DEPTH} levels deep",
                      _cut_text(text[pos:end])), end
    except _DuplicateKey as dup:
        end = _value_end(text, pos)
        return RawRow(number, None, "duplicate_key", f"key {dup.key!r} appears twice in one object",
                      _cut_text(text[pos:end])), end
    # Only a row with many brackets can be deep; counting them is C-speed and needs no parse.
    if (text.count("[", pos, end) + text.count("{", pos, end) > MAX_DEPTH
            and nesting_depth(value) > MAX_DEPTH):
        return RawRow(number, None, "too_deep", f"nested more than {MAX_DEPTH} levels deep",
                      _cut_text(text[pos:end])), end
    return _object_row(number, value, check_text, text[pos:end] if not isinstance(value, dict) else None), end


def _object_row(number: int, value: Any, check_text: bool = True, text: str | None = None) -> RawRow:
    if not isinstance(value, dict):
        return RawRow(number, None, "not_an_object", f"got {type(value).__name__}",
                      _cut_text(text) if text is not None else None)
    if check_text and has_invalid_text(value):
        return RawRow(number, None, "invalid_utf8", "a text field is not valid UTF-8")
    return RawRow(number, value)


class _Zstd(io.RawIOBase):
    """A zstd stream, decompressed as it is read, a frame after another (`zstd -c a b`, pzstd).

    zstandard's stream_reader ends quietly on a file cut inside a frame, so this drives a
    decompressobj itself: a file that ends inside a frame, or bytes that are not a frame, raise an
    OSError (as gzip's damage does, so every reader's `except` catches it); a frame whose window is
    over MAX_ZSTD_WINDOW_LOG is not damage, and raises UnusableInput saying so. Input goes in by
    FEED_BYTES: a zstd block of one repeated byte packs 128 KB into 4 bytes, so this bounds what one
    call can expand to (~64 MB for a bomb), not the file."""

    FEED_BYTES = 2048

    def __init__(self, handle, path: Path | str = ""):
        import zstandard

        self._handle, self._zstd, self._path = handle, zstandard, path
        self._frame = self._new_frame()
        self._head = b""  # the current frame's first bytes (its header: the window it asks for)
        self._begun = False  # input given to the current frame
        self._out, self._at, self._ended = b"", 0, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at >= len(self._out):
            if self._ended:
                return 0
            self._out, self._at = self._decompress(self._handle.read(self.FEED_BYTES)), 0
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at:self._at + n]
        self._at += n
        return n

    def _decompress(self, data: bytes) -> bytes:
        if not data:
            self._ended = True
            if self._begun and not self._frame.eof:
                raise OSError("corrupt zstd data (the file ends inside a frame: cut short?)")
            return b""
        out = []
        while data:
            if self._frame.eof:  # the frame is over: the next one starts here
                self._frame, self._head = self._new_frame(), b""
            self._begun = True
            if len(self._head) < 18:  # a frame header is at most 18 bytes
                self._head += data[:18 - len(self._head)]
            try:
                out.append(self._frame.decompress(data))
            except self._zstd.ZstdError as exc:
                if "too much memory" in str(exc):
                    raise self._window_too_large() from None
                raise OSError(f"corrupt zstd data ({exc})") from None
            data = self._frame.unused_data if self._frame.eof else b""
        return b"".join(out)

    def _new_frame(self):
        return self._zstd.ZstdDecompressor(max_window_size=1 << MAX_ZSTD_WINDOW_LOG).decompressobj()

    def _window_too_large(self) -> UnusableInput:
        """A frame whose window is over MAX_ZSTD_WINDOW_LOG (`zstd --long=31` of a stream): not corrupt, but
        more history than prefdata holds. One line (exit 2) saying so and how to read it."""
        try:
            size = self._zstd.get_frame_parameters(self._head).window_size
            asks = f"a window of {size / (1 << 20):g} MiB (2^{size.bit_length() - 1})"
        except (self._zstd.ZstdError, ValueError):
            asks = "a larger window"
        limit = 1 << MAX_ZSTD_WINDOW_LOG
        return UnusableInput(
            f"{self._path}: zstd data written with a long window (`zstd --long=N`, N > {MAX_ZSTD_WINDOW_LOG}): it asks "
            f"for {asks}, more than the {limit >> 20} MiB (--long={MAX_ZSTD_WINDOW_LOG}) prefdata reads; the file is "
            f"not corrupt: decompress it first (`zstd -d --long=31 FILE`) and import the result, or compress it "
            f"with --long={MAX_ZSTD_WINDOW_LOG} or less")

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


def _open_data(path: Path):
    """The file's bytes as a stream, decompressed as it is read when it is gzip or zstd (by their
    magic bytes, whatever the name says)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise UnusableInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnusableInput(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read it ({exc.strerror})") from None
    head = handle.peek(4)[:4]
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=handle, mode="rb")
    if head == ZSTD_MAGIC:
        return io.BufferedReader(_Zstd(handle, path), 1 << 20)
    return handle


def _lines(path: Path, max_line_bytes: int, block: int = 1 << 20) -> Iterator[tuple[int, bytes | None, bytes, int]]:
    """(line number, the line or None when it is longer than `max_line_bytes`, its first bytes, its
    size) for each line of a file read a block at a time: a line over the limit is never held whole
    (a gzip bomb of one 1.5 GB line costs a block, not 3 GB). The BOM is stripped."""
    number, line, size, head = 0, bytearray(), 0, b""
    with _open_data(path) as handle:
        try:
            first = True
            while chunk := handle.read(block):
                if first:
                    chunk, first = chunk.removeprefix(BOM), False
                start = 0
                while True:
                    end = chunk.find(b"\n", start)
                    piece = chunk[start:] if end < 0 else chunk[start:end]
                    size += len(piece)
                    if line is not None:
                        line += piece
                        if len(line) > max_line_bytes:
                            head, line = bytes(line[:RAW_TEXT_CHARS]), None
                    if end < 0:
                        break
                    number += 1
                    yield number, (bytes(line) if line is not None else None), head, size
                    line, size, head, start = bytearray(), 0, b"", end + 1
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None
    if size:
        yield number + 1, (bytes(line) if line is not None else None), head, size


def _jsonl_rows(lines: Iterator[tuple[int, bytes | None, bytes, int]], max_line_bytes: int) -> Iterator[RawRow]:
    for number, line, head, size in lines:
        if line is None:
            yield RawRow(number, None, "row_too_large", f"the line is {size} bytes, over the {max_line_bytes} allowed "
                         "(raise --max-text-bytes if it is a real row)", head.decode("utf-8", errors="replace") + "...")
            continue
        if not line.strip():
            continue  # blank lines are not rows
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawRow(number, None, "invalid_utf8", f"byte {exc.start} of the line",
                         _cut_text(line.decode("utf-8", errors="replace")))
            continue
        start = _WS.match(text).end()
        try:
            # strict decoding let no bad byte through; only a JSON escape can still make a lone surrogate
            row, end = _decode_at(text, start, number, check_text="\\ud" in text or "\\uD" in text)
        except json.JSONDecodeError as exc:
            yield RawRow(number, None, "invalid_json", exc.msg, _cut_text(text.strip()))
            continue
        if text[end:].strip():
            yield RawRow(number, None, "invalid_json", "Extra data", _cut_text(text.strip()))
            continue
        yield row


_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S)  # a JSON string's text up to its closing quote
_SCALAR = re.compile(r"[^\s,\]}]*")


class _JsonStream:
    """A JSON document read as a stream: its text decoded a block at a time (_TextLines' buffer), a
    value decoded once it is whole in the buffer. A value over `limit` characters is a
    row_too_large row, read past without being held (a bracket and string scanner, block by block)."""

    def __init__(self, path: Path, handle, limit: int):
        self.path, self.limit = path, limit
        self.text = _TextLines(handle)
        self.lines = 0  # newlines of the text dropped from the buffer, for the messages

    def _fill(self) -> None:
        text = self.text
        self.lines += text.buffer.count("\n", 0, text.pos)
        text._fill()

    def peek(self) -> str:
        """The next character after white space ("" at the end)."""
        text = self.text
        while True:
            text.pos = _WS.match(text.buffer, text.pos).end()
            if text.pos < len(text.buffer) or text.eof:
                return text.buffer[text.pos:text.pos + 1]
            self._fill()

    def take(self, char: str) -> None:
        self.text.pos += len(char)

    def where(self, pos: int | None = None) -> str:
        buffer, pos = self.text.buffer, self.text.pos if pos is None else pos
        line = self.lines + buffer.count("\n", 0, pos) + 1
        start = buffer.rfind("\n", 0, pos)
        return f"line {line}" + (f", column {pos - start}" if start >= 0 or not self.lines else "")

    def invalid(self, what: str, pos: int | None = None) -> UnusableInput:
        return UnusableInput(f"{self.path}: not valid JSON ({what} at {self.where(pos)})")

    def value(self, number: int) -> RawRow:
        """The JSON value at the cursor as row `number` (an object, or the reason it is not a row)."""
        self.peek()
        row, _ = self._decoded(lambda text, pos: _decode_at(text, pos, number), number)
        return row

    def _decoded(self, decode, number: int) -> tuple[Any, bool]:
        """decode(buffer, pos) -> (result, end) once the value at the cursor is whole in the buffer,
        the cursor moved past it; (row_too_large row, False) for a value over the limit."""
        text = self.text
        while True:
            buffer, pos = text.buffer, text.pos
            try:
                result, end = decode(buffer, pos)
            except json.JSONDecodeError as exc:
                # broken before the buffer's end is broken; at its end, the rest may be in the next
                # block ("Unterminated string" names where the string starts)
                if text.eof or (exc.pos < len(buffer) - 16 and not exc.msg.startswith("Unterminated string")):
                    raise self.invalid(exc.msg, exc.pos) from None
                end = len(buffer)
            if end - pos > self.limit:
                return self._too_large(number), False
            if end < len(buffer) or text.eof:  # a value ending the buffer may go on in the next block
                text.pos = end
                return result, True
            self._fill()

    def _too_large(self, number: int) -> RawRow:
        head = self.text.buffer[self.text.pos:self.text.pos + RAW_TEXT_CHARS]
        size = self._skip_value()
        return RawRow(number, None, "row_too_large", f"the value is {size} characters, over the {self.limit} "
                      "allowed (raise --max-text-bytes if it is a real row)", head + "...")

    def _skip_value(self) -> int:
        """Move the cursor past the value there, a block at a time; its size in characters."""
        text, depth, in_string, size = self.text, 0, False, 0
        scalar = text.buffer[text.pos:text.pos + 1] not in '["{'
        while True:
            buffer, pos = text.buffer, text.pos
            if scalar:
                pos = _SCALAR.match(buffer, pos).end()
                done = pos < len(buffer)
            elif in_string:
                pos = _STRING_BODY.match(buffer, pos).end()
                in_string = not buffer.startswith('"', pos)
                pos += not in_string
                done = not in_string and depth == 0
            else:
                token = _JSON_TOKEN.search(buffer, pos)
                pos = len(buffer) if token is None else token.end()
                if token is not None:
                    char = token.group()
                    in_string = char == '"'
                    depth += 0 if in_string else 1 if char in "[{" else -1
                done = token is not None and depth == 0 and not in_string
            size += pos - text.pos
            text.pos = pos
            if done:
                return size
            if pos < len(buffer) and not (in_string and pos == len(buffer) - 1):
                continue  # more of the value in this block (a "\\" last in it waits for what it escapes)
            if text.eof:
                raise self.invalid("a value is not closed before the end of the file")
            self._fill()

    def array(self, number: int = 0) -> Iterator[RawRow]:
        """The elements of the array at the cursor, one row each (numbered from `number` + 1)."""
        self.take("[")
        if self.peek() == "]":
            self.take("]")
            return
        while True:
            number += 1
            yield self.value(number)
            char = self.peek()
            if char not in (",", "]"):
                raise self.invalid(f"expected ',' or ']' after element {number}")
            self.take(char)
            if char == "]":
                return
            self.peek()

    def key(self) -> str:
        """An object's key at the cursor, and its ':' (a key over the limit is a broken file)."""
        if self.peek() != '"':
            raise self.invalid("expected a key")
        key, whole = self._decoded(_DECODER.raw_decode, 0)
        if not whole:
            raise self.invalid(f"a key over {self.limit} characters")
        if self.peek() != ":":
            raise self.invalid(f"expected ':' after key {key!r}")
        self.take(":")
        return key


def _json_rows(path: Path, limit: int) -> Iterator[RawRow]:
    """A JSON file's rows, read as a stream (memory: a block and one row): an array of rows,
    `{"data": [...]}` (an object with one list: its rows), one object (one row), or JSON Lines
    saved as .json (`datasets`' to_json writes those). An object is read twice: first to find its
    lists, then for the rows."""
    with _open_data(path) as handle:
        try:
            stream = _JsonStream(path, handle, limit)
            first = stream.peek()
            if first == "[":
                yield from stream.array()
                if stream.peek():
                    raise stream.invalid("more text after the array")
                return
            if first != "{":
                if not first:
                    raise stream.invalid("Expecting value")
                row = stream.value(1)
                raise UnusableInput(f"{path}: a JSON file must hold an array of rows, {row.detail or 'got a value'}")
            lists, more = _object_shape(stream)
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None
    if more:  # JSON Lines saved as .json
        yield from _jsonl_rows(_lines(path, limit), limit)
        return
    with _open_data(path) as handle:
        try:
            stream = _JsonStream(path, handle, limit)
            stream.peek()
            if len(lists) != 1:  # no single list: the object is one row
                yield stream.value(1)
                return
            stream.take("{")
            while stream.key() != lists[0]:
                stream.value(0)  # a member before the rows' list (never a list: it is the only one)
                stream.peek()
                stream.take(",")
            stream.peek()
            yield from stream.array()
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None


def _object_shape(stream: _JsonStream) -> tuple[list[str], bool]:
    """The first pass over a top-level object: the keys of its list members, and whether more text
    follows it (JSON Lines). Its values are read past, one at a time, never kept."""
    stream.take("{")
    keys: set[str] = set()
    lists: list[str] = []
    while stream.peek() != "}":
        key = stream.key()
        if key in keys:
            raise UnusableInput(f"{stream.path}: the top-level object has a bad or repeated key {key!r}")
        keys.add(key)
        if stream.peek() == "[":
            lists.append(key)
            for _ in stream.array():
                pass
        else:
            stream.value(0)
        char = stream.peek()
        if char not in (",", "}"):
            raise stream.invalid(f"expected ',' or '}}' after member {key!r}")
        if char == ",":
            stream.take(",")
    stream.take("}")
    return lists, bool(stream.peek())


class _TextLines:
    """A UTF-8 byte stream's lines, decoded a block at a time, as io's universal newlines mode gives
    them (ended by "\n", "\r\n" or "\r", kept): `readline(size)` returns at most `size` characters
    and sets `cut` when more of the line follows; a "\r\n" is never cut in two. A byte that is not
    UTF-8 becomes a lone surrogate (its row is quarantined as invalid_utf8); a BOM is dropped."""

    def __init__(self, handle, block: int = 1 << 20):
        import codecs

        self.handle, self.block = handle, block
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="surrogateescape")
        self.buffer, self.pos, self.eof, self.cut = "", 0, False, False

    def _fill(self) -> None:
        data = self.handle.read(self.block)
        self.eof = not data
        self.buffer = self.buffer[self.pos:] + self.decoder.decode(data, final=self.eof)
        self.pos = 0

    def _line_end(self) -> int:
        """Where the line from `pos` ends (after its newline), or -1 when the buffer holds no end."""
        buffer = self.buffer
        newline = buffer.find("\n", self.pos)  # str.find, not a regex: ~10x faster on long lines
        cr = buffer.find("\r", self.pos, newline if newline >= 0 else len(buffer))
        if cr < 0:
            return newline + 1 if newline >= 0 else -1
        if cr + 1 == len(buffer) and not self.eof:
            return -1  # a "\r" last in the buffer: its "\n" may be in the next block
        return cr + 2 if buffer.startswith("\n", cr + 1) else cr + 1

    def readline(self, size: int) -> str:
        while True:
            end = self._line_end()
            found = end >= 0
            if not found:
                end = len(self.buffer)
            if found or self.eof or end - self.pos > size:
                break
            self._fill()
        stop = min(end, self.pos + size)
        if stop < end and self.buffer[stop - 1] == "\r" and stop - 1 > self.pos:
            stop -= 1  # never between "\r" and "\n"
        self.cut = stop < end or (not found and not self.eof)
        line, self.pos = self.buffer[self.pos:stop], stop
        return line


class _RecordTooLarge(Exception):
    """Raised by _RecordLines inside csv.reader: this line would take the record over its limit."""

    def __init__(self, piece: str):
        super().__init__()
        self.piece = piece


class _RecordLines:
    """csv.reader's input: the text's lines, the lines of one record together at most `limit`
    characters, so that neither a long line nor a quoted field over many lines is ever held whole.
    csv.reader asks for a record's next line only while a quoted field is open: `used` (characters
    of this record handed over so far) says whether a line starts a record or continues one."""

    def __init__(self, text: _TextLines, limit: int):
        self.text, self.limit = text, limit
        self.lines = 0  # physical lines read, as an editor numbers them
        self.used = 0
        self.head = ""  # the record's first characters, for the quarantine file

    def __iter__(self) -> _RecordLines:
        return self

    def __next__(self) -> str:
        room = self.limit - self.used
        line = self.text.readline(max(room, 1))
        if not line:
            raise StopIteration
        if self.text.cut or len(line) > room:
            raise _RecordTooLarge(line)
        if not self.used:
            self.head = line[:RAW_TEXT_CHARS]
        self.lines += 1
        self.used += len(line)
        return line


_START, _FIELD, _QUOTED, _QUOTE = range(4)  # csv.reader's states: a field's start, in one, quoted, after a quote
_SKIP_PIECE = 1 << 20


def _record_end(piece: str, state: int, delimiter: str, stops: re.Pattern) -> int:
    """csv.reader's state machine (excel dialect, strict=False) run over `piece`, a line or a part
    of one, from `state`: the state at its end, or -1 when the record ends in it. A newline can only
    end the piece (a line is read at most to its end), and find() jumps over a field's text."""
    pos, n = 0, len(piece)
    while pos < n:
        if state == _QUOTED:
            pos = piece.find('"', pos) + 1
            if not pos:
                return _QUOTED
            state = _QUOTE
            continue
        if state == _FIELD:
            found = stops.search(piece, pos)
            if found is None:
                return _FIELD
            char, pos = found.group(), found.end()
        else:
            char, pos = piece[pos], pos + 1
        if char in "\r\n":
            return -1
        if char == delimiter:
            state = _START
        elif char == '"' and state in (_START, _QUOTE):  # opens a quoted field, or a doubled quote in one
            state = _QUOTED
        else:
            state = _FIELD  # after a closing quote too: strict=False reads on as an unquoted field
    return state


def _skip_record(lines: _RecordLines, piece: str, delimiter: str) -> int:
    """Read past the rest of a record over the limit from `piece` (the part of a line that took it
    over) without holding it; counts its lines; returns its size in characters."""
    stops = re.compile(f"[{re.escape(delimiter)}\r\n]")
    state = _QUOTED if lines.used else _START  # a record goes on to a new line only inside quotes
    size = lines.used
    while piece:
        size += len(piece)
        state = _record_end(piece, state, delimiter, stops)
        if not lines.text.cut:
            lines.lines += 1  # the piece ended its line
        if state < 0:
            break
        piece = lines.text.readline(_SKIP_PIECE)
    return size


def csv_records(path: Path, delimiter: str, limit: int) -> Iterator[tuple[int, list[str]] | RawRow]:
    """A CSV (TSV) file's header, then its records, read as a stream: (line, fields) for each
    record (line: where it starts; the header is line 1), or a RawRow with the error of one that
    cannot be read (over `limit` characters: row_too_large, read past without being held). Blank
    lines are not records."""
    csv.field_size_limit(max(csv.field_size_limit(), limit + 1))  # a field is bounded by its record
    with _open_data(path) as handle:
        lines = _RecordLines(_TextLines(handle), limit)
        reader = csv.reader(lines, delimiter=delimiter)
        try:
            while True:
                number = lines.lines + 1
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except _RecordTooLarge as big:
                    head = lines.head if lines.used else big.piece[:RAW_TEXT_CHARS]
                    size = _skip_record(lines, big.piece, delimiter)
                    yield RawRow(number, None, "row_too_large", f"the record is {size} characters, over the "
                                 f"{limit} allowed (raise --max-text-bytes if it is a real row)", head + "...")
                except csv.Error as exc:  # strict=False leaves few; the rest of its line is dropped
                    yield RawRow(number, None, "malformed_csv_row", str(exc), lines.head)
                else:
                    if fields:  # a blank line is not a record
                        yield number, fields
                lines.used = 0
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None


def _csv_rows(path: Path, delimiter: str, limit: int) -> Iterator[RawRow]:
    records = csv_records(path, delimiter, limit)
    header = next(records, None)
    if header is None:
        return
    if isinstance(header, RawRow):
        raise UnusableInput(f"{path}: its first line (the header) is over {limit} characters; is it a "
                            f"{'TSV' if delimiter == chr(9) else 'CSV'} file?")
    header = csv_header(path, header[1])
    for record in records:
        if isinstance(record, RawRow):
            yield record
            continue
        yield csv_row(*record, header, delimiter)


def csv_row(number: int, fields: list[str], header: list[str], delimiter: str) -> RawRow:
    """One CSV record as a row of the header's columns, or malformed_csv_row / invalid_utf8."""
    if len(fields) != len(header):
        return RawRow(number, None, "malformed_csv_row", f"{len(fields)} fields, header has {len(header)}",
                      _cut_text(delimiter.join(fields)))
    return _object_row(number, dict(zip(header, fields)))


def csv_header(path: Path, header: list[str]) -> list[str]:
    """The header's column names; UnusableInput when one is given twice."""
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise UnusableInput(f"{path}: the header names column {repeated[0]!r} twice; give each column one name")
    return header


def parquet_problem(path: Path, exc: Exception) -> str:
    """Where a Parquet file that failed to read is damaged: the first row group pyarrow cannot read,
    or whose text is not UTF-8, with its rows (from 1); else the error as it came."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(str(path))
    except (pa.ArrowException, OSError) as footer:
        return f"its footer cannot be read ({' '.join(str(footer).split())})"
    first = 1
    for group in range(parquet.num_row_groups):
        n = parquet.metadata.row_group(group).num_rows
        where = f"row group {group} (rows {first}-{first + n - 1})"
        try:
            table = parquet.read_row_group(group)
        except (pa.ArrowException, OSError) as damaged:
            return f"{where} cannot be read ({' '.join(str(damaged).split())}): rewrite the file, or drop that row group"
        for field, column in zip(table.schema, table.columns):
            if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                try:
                    column.validate(full=True)
                except pa.ArrowInvalid:
                    return (f"{where} holds text that is not UTF-8 in column {field.name!r}: fix those rows, or raise "
                            f"--batch-rows above the file's {parquet.metadata.num_rows} rows, so that it is read in "
                            "memory and only those rows are quarantined")
        first += n
    return str(exc)


def parquet_table(path: Path, raw: bytes):
    """A pyarrow Table of Parquet bytes.

    The bytes are handed to Arrow in memory Arrow owns. Wrapped in pa.BufferReader, Python's own
    bytes object stays referenced by the dataset scanner, which drops that reference on one of its
    worker threads after read_table returns; freeing a Python object needs the GIL, and when the
    interpreter is already exiting (an error right after the read) that thread is killed inside a
    C++ destructor: "terminate called without an active exception", exit 134.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    gzipped = False
    try:
        with path.open("rb") as handle:
            gzipped = handle.read(2) == GZIP_MAGIC
        if not gzipped:  # Arrow opens the file itself
            return pq.read_table(str(path))
        sink = pa.BufferOutputStream()
        sink.write(raw)
        return pq.read_table(pa.BufferReader(sink.getvalue()))
    except (pa.ArrowException, OSError) as exc:
        where = parquet_problem(path, exc) if not gzipped else str(exc)
        raise UnusableInput(f"{path}: not a readable Parquet file: {where}") from None


def _parquet_rows(path: Path, raw: bytes) -> Iterator[RawRow]:
    yield from _table_rows(parquet_table(path, raw), 1)


def parquet_rows_in_batches(path: Path, batch_rows: int) -> Iterator[RawRow]:
    """The rows `read_rows` gives of a plain (not gzipped) Parquet file, read `batch_rows` records at
    a time instead of the whole table. A damaged file raises pyarrow's error when the reading
    reaches it (the caller names it, as parquet_table does)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    number = 1
    for batch in pq.ParquetFile(str(path)).iter_batches(batch_size=batch_rows):
        yield from _table_rows(pa.Table.from_batches([batch]), number)
        number += batch.num_rows


def rows_in_batches(rows: Iterable[RawRow], batch_rows: int, n_batches: int) -> Iterator[list[RawRow]]:
    """`rows`, in the order of their numbers, as exactly `n_batches` lists: batch k holds the rows
    numbered 1 + k * batch_rows to (k + 1) * batch_rows (a CSV record by its first line; so a batch
    may be empty), the last one every row after."""
    batch: list[RawRow] = []
    boundary, made = 1 + batch_rows, 0
    for row in rows:
        while row.number >= boundary and made < n_batches - 1:
            yield batch
            batch, made, boundary = [], made + 1, boundary + batch_rows
        batch.append(row)
    while made < n_batches:
        yield batch
        batch, made = [], made + 1


def _table_rows(table: Any, first: int) -> Iterator[RawRow]:
    """A pyarrow table's records as rows numbered from `first`."""
    import pyarrow as pa

    # A Parquet writer can store bytes that are not UTF-8 in a text column; pyarrow would raise on
    # the whole column. Such columns are read as bytes and decoded here, so that only the rows
    # with bad bytes are quarantined (invalid_utf8), as in the other formats. (Column by column of
    # the table given: decoding a valid UTF-8 value this way gives the text pyarrow would.)
    bad_text = []
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            try:
                table.column(i).validate(full=True)
            except pa.ArrowInvalid:
                bad_text.append(field.name)
                table = table.set_column(i, field.name, table.column(i).cast(pa.large_binary()))
    for number, item in enumerate(table.to_pylist(), start=first):
        for name in bad_text:
            if item[name] is not None:
                item[name] = item[name].decode("utf-8", errors="surrogateescape")
        yield _object_row(number, item)


def read_rows(path: str | Path, max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[RawRow]:
    """Every row of a data file, in order, with its number; bad rows carry an error instead of data.
    JSONL and CSV/TSV (compressed or not) are read as streams: a JSONL line over `max_row_bytes`
    bytes, or a CSV record over that many characters, is a `row_too_large` row, never held whole."""
    path = Path(path)
    require_regular_file(path)
    with _open_data(path) as handle:
        try:
            head = handle.read(64 + len(BOM)).removeprefix(BOM)
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None
    kind = file_kind(path, head)
    if kind == "jsonl":
        return _jsonl_rows(_lines(path, max_row_bytes), max_row_bytes)
    if kind in ("csv", "tsv"):  # a record over `max_row_bytes` characters is row_too_large, never held whole
        return _csv_rows(path, "\t" if kind == "tsv" else ",", max_row_bytes)
    if kind == "json":  # an element over `max_row_bytes` characters is row_too_large, never held whole
        return _json_rows(path, max_row_bytes)
    return _parquet_rows(path, read_bytes(path).removeprefix(BOM))
