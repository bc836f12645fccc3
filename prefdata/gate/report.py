"""The checklist report, written several ways from the same list of CheckResult.

report.json  what programs read (report_json)          report.md   what a PR comment shows
junit.xml    what any CI test tab shows                 report.html one self-contained page with
                                                                    plots as inline SVG: opens
                                                                    offline, nothing to fetch
offending/<check id>.txt  every offending id of a check, one per line (report.json keeps the first
                          1,000 and says `offending_truncated` and `offending_file`)

Given the pairs frame the checks ran on, report.html shows under each failing check its first
offending pairs (prompt, chosen, rejected; long texts cut, the rest in a <details> fold), and for
duplicate checks each duplicate beside the row it repeats; report.md names them by id. The texts
are data, so untrusted: every one is HTML-escaped.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefdata.checks.base import MAX_LISTED_OFFENDERS, CheckResult
from prefdata.checks.structure import DEFAULT_MAX_LENGTH_RATIO

STATUSES = ("pass", "fail", "error", "skip")
COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "error": "#9a6700", "skip": "#6e7781"}
MD_OFFENDERS = 20  # per failing check in markdown: enough to start looking, short enough to read
JUNIT_OFFENDERS = 10
MAX_BARS = 40  # an HTML bar chart beyond this is unreadable; the lowest values are the news
RATIO_BINS = 18
# XML 1.0 cannot carry most control characters; ids and messages come from data, so strip them.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
OFFENDING_DIR = "offending"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
MAX_EXAMPLES = 3  # offending pairs shown under a failing check: enough to see the problem, short to read
LOOKUP_IDS = 50  # the first offending ids looked up among the pairs (some checks name other things)
HEAD_CHARS = 300  # of each text shown before the fold
FOLD_CHARS = 20_000  # at most this much of one text inside the fold: a 1 MB reply would swamp the page
PAIR_FIELDS = ("prompt", "chosen", "rejected")


def _passed(results: Sequence[CheckResult]) -> bool:
    return not any(r.status in ("fail", "error") for r in results)


def _counts(results: Sequence[CheckResult]) -> Counter:
    return Counter(r.status for r in results)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _shows_examples(r: CheckResult) -> bool:
    return r.status in ("fail", "error") and bool(r.offending)


def duplicate_examples(r: CheckResult) -> list[tuple[str, str]]:
    """(duplicate id, id of the row it repeats) for a duplicate check's first offending rows: its
    details["examples"] (exact duplicates), or its clusters' sample (near duplicates: each later
    member against the cluster's first row, the one a filter keeps). Empty for other checks."""
    if r.id == "exact_duplicates":  # other checks' "examples" (degenerate_pairs') are not pairings
        return [(str(e["id"]), str(e["duplicate_of"])) for e in r.details.get("examples") or []][:MAX_EXAMPLES]
    if r.id == "near_duplicates":
        found = [(str(d), str(c["ids"][0])) for c in r.details.get("clusters_sample") or [] for d in c["ids"][1:]]
        return found[:MAX_EXAMPLES]
    return []


def example_ids(results: Sequence[CheckResult]) -> set[str]:
    """The ids the reports show rows of: the first LOOKUP_IDS offending ids of each failing check
    and the rows its duplicates repeat."""
    wanted: set[str] = set()
    for r in filter(_shows_examples, results):
        wanted.update(r.offending[:LOOKUP_IDS])
        wanted.update(i for pair in duplicate_examples(r) for i in pair)
    return wanted


def example_rows(results: Sequence[CheckResult], pairs: Any) -> dict[str, dict[str, Any]]:
    """id -> its row (the first with that id) for every id the reports show: the first LOOKUP_IDS
    offending ids of each failing check and the rows duplicates repeat. One pass over the frame."""
    if pairs is None or "id" not in pairs.columns:
        return {}
    import polars as pl

    keep = [c for c in ("id", *PAIR_FIELDS) if c in pairs.columns]
    found = (pairs.select(keep).with_columns(pl.col("id").cast(pl.String))
             .filter(pl.col("id").is_in(sorted(example_ids(results)))).unique("id", keep="first", maintain_order=True))
    return {row["id"]: row for row in found.iter_rows(named=True)}


def _summary(results: Sequence[CheckResult]) -> str:
    counts = _counts(results)
    verdict = "PASSED" if _passed(results) else "FAILED"
    return f"{verdict}: {len(results)} checks, " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)


def offending_name(check_id: str) -> str:
    """The file name of a check's complete offending list (check ids are dotted names; anything else
    a plugin might use is replaced so the name stays one plain file)."""
    return _UNSAFE_NAME.sub("_", check_id) + ".txt"


def write_offending(results: Sequence[CheckResult], report_dir: Path) -> Path:
    """REPORT_DIR/offending/<check id>.txt for every check with offending ids: all of them, one per
    line, in the check's order (the JSON and the other reports show only the first ones)."""
    folder = Path(report_dir) / OFFENDING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.offending:
            # ids come from data: a newline inside one would split it, so it is escaped
            lines = (i.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") for i in r.offending)
            (folder / offending_name(r.id)).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def report_json(results: Sequence[CheckResult], passed: bool, report_dir: Path | None = None) -> dict[str, Any]:
    """The machine-readable report. Each check's `offending` keeps the first MAX_LISTED_OFFENDERS ids;
    `offending_truncated` says whether that cut any, and `offending_file` names the complete list
    (REPORT_DIR/offending/<check id>.txt, written by `write_reports`) when there is a report folder."""
    checks = []
    for r in results:
        entry = r.to_json()
        entry["offending_truncated"] = len(r.offending) > MAX_LISTED_OFFENDERS
        entry["offending_file"] = (str(Path(report_dir) / OFFENDING_DIR / offending_name(r.id))
                                   if report_dir is not None and r.offending else None)
        checks.append(entry)
    return {"passed": bool(passed), "checks": checks}


_CONTROL = re.compile("[\x00-\x1f\x7f\u2028\u2029]")
_BACKTICKS = re.compile("`+")


def _visible(text: str) -> str:
    """Control characters (a newline, a tab, ...) as escapes: one id or message stays on its line."""
    return _CONTROL.sub(lambda m: {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(m.group(), f"\\x{ord(m.group()):02x}"),
                        text)


def md_code(text: str) -> str:
    """`text` (an id: data, so untrusted) as one Markdown code span that shows it literally: fenced by
    more backticks than its longest run of them (a backtick inside cannot end the span), padded with a
    space where it starts or ends with a backtick or a space (CommonMark strips one each side).
    Inside a code span nothing is markup, so `<img onerror=...>` is shown as text, never as HTML."""
    text = _visible(str(text))
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(text: str) -> str:
    """Prose that may carry data (a check's message, a title) as Markdown text on one line: its code
    spans kept as they are (literal already); outside them `&`, `<` and `>` become entities, so no raw
    HTML (an `<img onerror>`, a `<script>`) reaches a renderer, `[`, `]` and `\\` are escaped (no link
    or image is made, no escape swallows the next character), and a backtick that opens no span is
    escaped. Line breaks become spaces."""
    text = _visible(" ".join(str(text).splitlines()).replace("\t", " "))
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "`":
            run = _BACKTICKS.match(text, i).group()
            close = re.compile(f"(?<!`){run}(?!`)").search(text, i + len(run))
            if close:  # a code span (CommonMark: the next run of the same length ends it)
                out.append(text[i:close.end()])
                i = close.end()
            else:
                out.append("\\`" * len(run))
                i += len(run)
        else:
            out.append(_MD_TEXT_ESCAPES.get(char, char))
            i += 1
    return "".join(out)


_MD_TEXT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]", "\\": "\\\\"}


def write_markdown(results: Sequence[CheckResult], path: Path, title: str = "prefdata checklist",
                   rows: Mapping[str, Any] | None = None) -> Path:
    """`rows` (example_rows) names the example pairs report.html shows under each failing check.
    Ids are data: each is one code span (md_code), whatever backticks, `<`, `|` or newlines it holds;
    messages and the title are escaped text (md_text)."""
    rows = rows or {}

    def cell(text: str) -> str:  # a pipe would break the table row, even inside a code span (GFM)
        return text.replace("|", "\\|")

    lines = [f"# {md_text(title)}", "", f"**{_summary(results)}**", "",
             "| id | status | metric | threshold | offending | message |",
             "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {cell(md_code(r.id))} | {r.status} | {_fmt(r.metric)} | {_fmt(r.threshold)} | "
                     f"{r.n_offending} | {cell(md_text(r.message))} |")
    for r in results:
        if r.status not in ("fail", "error"):
            continue
        lines += ["", f"## {md_text(r.id)} ({r.status})", "", md_text(r.message) or "(no message)"]
        duplicates = duplicate_examples(r)
        shown = [i for i in r.offending[:LOOKUP_IDS] if i in rows][:MAX_EXAMPLES]
        if duplicates:
            lines += ["", "Examples, each with the row it repeats (side by side in report.html):", ""]
            lines += [f"- {md_code(d)} duplicates {md_code(o)}" for d, o in duplicates]
        elif shown:
            lines += ["", "Example pairs in report.html: " + ", ".join(md_code(i) for i in shown)]
        if r.offending:
            shown = r.offending[:MD_OFFENDERS]
            lines += ["", f"Offending ids ({len(shown)} of {r.n_offending}):", ""]
            lines += [f"- {md_code(i)}" for i in shown]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


def write_junit(results: Sequence[CheckResult], path: Path, suite_name: str = "prefdata.checklist") -> Path:
    def clean(text: str) -> str:
        return _XML_ILLEGAL.sub("\ufffd", text)

    counts = _counts(results)
    totals = {"tests": str(len(results)), "failures": str(counts["fail"]),
              "errors": str(counts["error"]), "skipped": str(counts["skip"]), "time": "0"}
    root = ET.Element("testsuites", name=suite_name, **totals)
    suite = ET.SubElement(root, "testsuite", name=suite_name, **totals)
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=clean(r.id), time="0")
        if r.status == "pass":
            continue
        if r.status == "skip":
            ET.SubElement(case, "skipped", message=clean(r.message))
            continue
        detail = [r.message, f"metric: {_fmt(r.metric)}", f"threshold: {_fmt(r.threshold)}",
                  f"offending: {r.n_offending}"]
        if r.offending:
            detail.append("first offending ids: " + ", ".join(r.offending[:JUNIT_OFFENDERS]))
        tag = "failure" if r.status == "fail" else "error"
        element = ET.SubElement(case, tag, message=clean(r.message), type=r.status)
        element.text = clean("\n".join(detail))
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return Path(path)


# ---- HTML ------------------------------------------------------------------------------------

def _svg_histogram(ratios: Any, threshold: float) -> str:
    """Length ratios in equal bins from 1 to a cap, plus one overflow bin: real ratios cluster near
    1 while empty-side pairs sit at a huge sentinel, so an uncapped axis would hide everything."""
    values = np.asarray(ratios, dtype=float)
    values = values[~np.isnan(values)]
    cap = max(10.0, 2.0 * threshold)
    counts, edges = np.histogram(np.clip(values, 1.0, cap), bins=RATIO_BINS, range=(1.0, cap))
    counts = np.append(counts, np.count_nonzero(values > cap))  # overflow (np.clip put them last)
    counts[-2] -= counts[-1]
    w, h, left, bottom, bar = 640, 220, 50, 30, 560 / (RATIO_BINS + 1)
    top = max(int(counts.max()), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">',
             f'<text x="{left}" y="14" font-size="12">pairs: {len(values)}, max count {top}</text>']
    for i, count in enumerate(counts):
        bh = (h - bottom - 24) * count / top
        colour = COLOURS["fail"] if i == RATIO_BINS or edges[i] >= threshold else "#0969da"
        label = f">{cap:g}" if i == RATIO_BINS else f"{edges[i]:.1f}-{edges[i + 1]:.1f}"
        parts.append(f'<rect x="{left + i * bar:.1f}" y="{h - bottom - bh:.1f}" width="{bar - 2:.1f}" '
                     f'height="{bh:.1f}" fill="{colour}"><title>{html.escape(label)}: {count}</title></rect>')
    for i in (0, RATIO_BINS // 2, RATIO_BINS):
        text = f">{cap:g}" if i == RATIO_BINS else f"{edges[i]:g}"
        parts.append(f'<text x="{left + i * bar:.1f}" y="{h - 10}" font-size="11">{html.escape(text)}</text>')
    x = left + min((threshold - 1.0) / (cap - 1.0), 1.0) * RATIO_BINS * bar
    parts.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{h - bottom}" stroke="black" '
                 f'stroke-dasharray="4 3"/><text x="{x + 4:.1f}" y="30" font-size="11">max {threshold:g}</text>')
    return "\n".join(parts + ["</svg>"])


def _svg_bars(shares: Mapping[str, float], line: float | None = None) -> str:
    """Horizontal bars of shares in [0, 1], lowest first (the ones a reader needs), with an optional
    threshold line; bars under the line are red."""
    items = sorted(((str(k), float(v)) for k, v in shares.items()), key=lambda kv: kv[1])[:MAX_BARS]
    w, row, label_w, plot_w = 640, 18, 180, 400
    h = row * len(items) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">']
    for i, (name, share) in enumerate(items):
        y = 10 + i * row
        colour = COLOURS["fail"] if line is not None and share < line else "#0969da"
        short = name if len(name) <= 28 else name[:27] + "…"
        width = plot_w * min(max(share, 0.0), 1.0)
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" font-size="11" text-anchor="end">'
                     f'{html.escape(short)}</text><rect x="{label_w}" y="{y}" width="{width:.1f}" '
                     f'height="{row - 4}" fill="{colour}"><title>{html.escape(name)}: {share:.3f}</title></rect>'
                     f'<text x="{label_w + plot_w + 6}" y="{y + 12}" font-size="11">{share:.3f}</text>')
    if line is not None:
        x = label_w + plot_w * min(max(line, 0.0), 1.0)
        parts.append(f'<line x1="{x:.1f}" y1="4" x2="{x:.1f}" y2="{h - 14}" stroke="black" '
                     f'stroke-dasharray="4 3"/><text x="{x + 4:.1f}" y="{h - 2}" font-size="11">min {line:g}</text>')
    return "\n".join(parts + ["</svg>"])


def _text(value: Any) -> str:
    """One field of a pair, escaped: the first HEAD_CHARS characters, the rest folded away."""
    esc = html.escape
    text = value if isinstance(value, str) else "" if value is None else str(value)
    if len(text) <= HEAD_CHARS:
        return f"<div class='text'>{esc(text)}</div>"
    cut = (f"<p class='note'>… cut here: {len(text) - FOLD_CHARS:,} more characters in the data</p>"
           if len(text) > FOLD_CHARS else "")
    return (f"<div class='text'>{esc(text[:HEAD_CHARS])}…<details><summary>read on ({len(text) - HEAD_CHARS:,} more "
            f"characters)</summary>{esc(text[HEAD_CHARS:FOLD_CHARS])}{cut}</details></div>")


def _examples_section(r: CheckResult, rows: Mapping[str, Mapping[str, Any]]) -> str:
    """Under a failing check: its first offending pairs, or for a duplicate check each duplicate
    beside the row it repeats."""
    esc = html.escape
    fields = [f for f in PAIR_FIELDS if any(f in row for row in rows.values())]
    duplicates = [(d, o) for d, o in duplicate_examples(r) if d in rows and o in rows]
    if duplicates:
        tables = []
        for dup, original in duplicates:
            body = "".join(f"<tr><th>{f}</th><td>{_text(rows[dup].get(f))}</td><td>{_text(rows[original].get(f))}</td></tr>"
                           for f in fields)
            tables.append(f"<table class='dup'><tr><th></th><th>duplicate <code>{esc(dup)}</code></th>"
                          f"<th>duplicates <code>{esc(original)}</code></th></tr>{body}</table>")
        content = "\n".join(tables)
        note = f"{len(duplicates)} of {r.n_offending} offending, each beside the row it repeats."
    else:
        shown = [i for i in r.offending[:LOOKUP_IDS] if i in rows][:MAX_EXAMPLES]
        if shown:
            head = "".join(f"<th>{f}</th>" for f in fields)
            body = "".join(f"<tr class='pair'><td><code>{esc(i)}</code></td>"
                           + "".join(f"<td>{_text(rows[i].get(f))}</td>" for f in fields) + "</tr>" for i in shown)
            content = f"<table class='pairs'><tr><th>id</th>{head}</tr>{body}</table>"
            note = f"{len(shown)} of {r.n_offending} offending."
        else:
            content, note = "", ("Its first offending ids are not pairs of this data (the check names other "
                                 "things: see its message and list).")
    return (f"<section id='examples-{esc(r.id)}'><h2>{esc(r.id)}: examples ({r.status})</h2>"
            f"<p class='note'>{note}</p>{content}</section>")


def _plot_section(title: str, data: Any, draw: Any) -> str:
    if data is None or len(data) == 0:
        return f"<h2>{html.escape(title)}</h2><p class='note'>No data for this plot.</p>"
    more = f"<p class='note'>Showing the {MAX_BARS} lowest of {len(data)}.</p>" \
        if isinstance(data, Mapping) and len(data) > MAX_BARS else ""
    return f"<h2>{html.escape(title)}</h2>{more}<figure>{draw(data)}</figure>"


def write_html(results: Sequence[CheckResult], path: Path, plots: Mapping[str, Any] | None = None,
               title: str = "prefdata checklist", rows: Mapping[str, Any] | None = None) -> Path:
    """`rows` (example_rows): the pairs shown under each failing check; None shows none."""
    plots = plots or {}
    esc = html.escape
    lines = []
    for r in results:
        ids = ", ".join(r.offending[:5]) + (" …" if r.n_offending > 5 else "")
        # the complete list sits beside the page (write_reports writes it): a link, not 1M ids inline
        full = (f" <a href='{OFFENDING_DIR}/{esc(offending_name(r.id))}'>all {len(r.offending)}</a>"
                if r.offending else "")
        lines.append(f"<tr class='{esc(r.status)}'><td><code>{esc(r.id)}</code></td>"
                    f"<td>{esc(r.status)}</td><td>{_fmt(r.metric)}</td><td>{_fmt(r.threshold)}</td>"
                    f"<td>{r.n_offending}</td>"
                    f"<td>{esc(r.message)}</td><td><code>{esc(ids)}</code>{full}</td></tr>")
    style = "".join(f"tr.{s} td:nth-child(2){{color:#fff;background:{c}}}" for s, c in COLOURS.items())
    gx_link = "<p><a href='gx/index.html'>Great Expectations Data Docs</a></p>" if plots.get("gx_docs") else ""
    threshold = float(plots.get("max_length_ratio") or DEFAULT_MAX_LENGTH_RATIO)  # None when the ratio check was skipped
    min_share = plots.get("min_category_share")
    sections = [
        _plot_section("Length ratio (longer / shorter response)", plots.get("length_ratios"),
                      lambda d: _svg_histogram(d, threshold)),
        _plot_section("Annotator agreement with the majority", plots.get("annotator_agreement"),
                      _svg_bars),
        _plot_section("Annotator quality (Dawid-Skene; flagged ones are named in the agreement row)",
                      plots.get("annotator_quality"), _svg_bars),
        _plot_section("Category coverage", plots.get("category_shares"),
                      lambda d: _svg_bars(d, None if min_share is None else float(min_share))),
    ]
    examples = [_examples_section(r, rows) for r in results if _shows_examples(r)] if rows is not None else []
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}
table{{border-collapse:collapse}}
td,th{{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}}
.note{{color:#6e7781}}.text{{white-space:pre-wrap;max-width:40em}}
table.dup,table.pairs{{margin-bottom:1em}}{style}</style></head>
<body><h1>{esc(title)}</h1><p><strong>{esc(_summary(results))}</strong></p>{gx_link}
<table><tr><th>id</th><th>status</th><th>metric</th><th>threshold</th><th>offending</th>
<th>message</th><th>first ids</th></tr>
{chr(10).join(lines)}
</table>
{chr(10).join(examples)}
{chr(10).join(sections)}
</body></html>
"""
    Path(path).write_text(page, encoding="utf-8")
    return Path(path)


def write_reports(results: Sequence[CheckResult], report_dir: Path, plots: Mapping[str, Any] | None = None,
                  title: str = "prefdata checklist", pairs: Any = None) -> dict[str, Path]:
    """`pairs`: the pairs frame the checks ran on, for the example pairs (None: ids only)."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    rows = example_rows(results, pairs) if pairs is not None else None
    return {
        "markdown": write_markdown(results, report_dir / "report.md", title, rows),
        "junit": write_junit(results, report_dir / "junit.xml"),
        "html": write_html(results, report_dir / "report.html", plots, title, rows),
        "offending": write_offending(results, report_dir),
    }
