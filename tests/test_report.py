"""Report writers: JUnit XML that parses with the right counts, markdown, self-contained HTML."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest

from prefdata.checks.base import CheckResult, skip
from prefdata.gate.report import report_json, write_html, write_junit, write_markdown, write_reports

MANY = tuple(f"id{i:04d}" for i in range(1500))
RESULTS = [
    CheckResult("gx.not_null.prompt", "pass", metric=0.0, message="all 10 rows satisfy not_null.prompt"),
    CheckResult("gx.length_ratio", "fail", metric=0.2, threshold=2.0, offending=("r1", "r2"),
                message="2 of 10 rows break length_ratio <script>alert(1)</script> | piped"),
    CheckResult("dedup.near", "fail", metric=0.15, threshold=0.05, offending=MANY, message="near duplicates"),
    CheckResult("agreement", "error", message="votes frame \x01 unreadable"),
    skip("category_coverage", "no category column"),
]
PLOTS = {
    "length_ratios": np.array([1.0, 1.1, 1.5, 2.5, 5.0, 1e9, float("inf"), float("nan")]),
    "max_length_ratio": 2.0,
    "annotator_agreement": {"ann<1>": 0.9, "ann2": 0.55},
    "category_shares": {"chat": 0.7, "code": 0.25, "math": 0.05},
    "min_category_share": 0.1,
    "gx_docs": True,
}


def test_report_json_shape_and_cap():
    report = report_json(RESULTS, passed=False)
    assert set(report) == {"passed", "checks"} and report["passed"] is False
    assert [c["id"] for c in report["checks"]] == [r.id for r in RESULTS]
    near = report["checks"][2]
    assert (near["n_offending"], len(near["offending"])) == (1500, 1000)
    json.dumps(report)


def test_junit_parses_with_counts(tmp_path):
    root = ET.parse(write_junit(RESULTS, tmp_path / "junit.xml")).getroot()
    suite = root.find("testsuite")
    attrs = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
    assert attrs == {"tests": "5", "failures": "2", "errors": "1", "skipped": "1"}
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == [r.id for r in RESULTS]
    assert {c.get("classname") for c in cases.values()} == {"prefdata.checklist"}
    assert len(cases["gx.not_null.prompt"]) == 0
    failure = cases["gx.length_ratio"].find("failure")
    assert "<script>" in failure.get("message")  # escaped in the file, restored by the parser
    assert "threshold: 2" in failure.text and "r1, r2" in failure.text
    assert cases["agreement"].find("error") is not None  # control character did not break XML
    assert cases["category_coverage"].find("skipped").get("message") == "no category column"


def test_markdown_lists_failing_ids(tmp_path):
    text = write_markdown(RESULTS, tmp_path / "report.md", "My data").read_text()
    assert text.startswith("# My data")
    assert "FAILED: 5 checks, 1 pass, 2 fail, 1 error, 1 skip" in text
    assert "## gx.length_ratio (fail)" in text and "- `r1`" in text and "- `r2`" in text
    assert "Offending ids (20 of 1500)" in text and "`id0019`" in text and "`id0020`" not in text
    assert "\\| piped" in text  # a pipe in a message does not split the table row
    assert "## category_coverage" not in text


def test_html_is_self_contained_escaped_and_plots(tmp_path):
    page = write_html(RESULTS, tmp_path / "report.html", PLOTS).read_text()
    assert page.count("<svg") == 3
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "ann&lt;1&gt;" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page
    assert 'href=\'gx/index.html\'' in page
    ET.fromstring(page.split("<figure>")[1].split("</figure>")[0])  # each SVG is well-formed XML


@pytest.mark.parametrize("missing", ["length_ratios", "annotator_agreement", "category_shares"])
def test_html_omits_missing_plots(tmp_path, missing):
    plots = {k: v for k, v in PLOTS.items() if k not in (missing, "gx_docs")}
    page = write_html(RESULTS, tmp_path / "report.html", plots).read_text()
    assert page.count("<svg") == 2 and "No data for this plot." in page
    assert "gx/index.html" not in page


def test_write_reports(tmp_path):
    paths = write_reports(RESULTS, tmp_path / "out", {}, "checklist")
    assert {p.name for p in paths.values()} == {"report.md", "junit.xml", "report.html", "offending"}
    assert all(p.is_file() for k, p in paths.items() if k != "offending")
    assert write_html([], tmp_path / "empty.html", {}).read_text().count("<svg") == 0


def test_every_offending_id_is_written_one_per_line(tmp_path):
    write_reports(RESULTS, tmp_path, {}, "checklist")
    listed = tmp_path / "offending"
    assert (listed / "dedup.near.txt").read_text().splitlines() == list(MANY)  # all 1,500, not the first 1,000
    assert (listed / "gx.length_ratio.txt").read_text().splitlines() == ["r1", "r2"]
    assert sorted(p.name for p in listed.iterdir()) == ["dedup.near.txt", "gx.length_ratio.txt"]  # no empty lists


def test_report_json_says_where_the_complete_list_is(tmp_path):
    report = report_json(RESULTS, passed=False, report_dir=tmp_path)
    by_id = {c["id"]: c for c in report["checks"]}
    near, ratio, passing = by_id["dedup.near"], by_id["gx.length_ratio"], by_id["gx.not_null.prompt"]
    assert (len(near["offending"]), near["offending_truncated"]) == (1000, True)
    assert near["offending_file"] == str(tmp_path / "offending" / "dedup.near.txt")
    ratio_file = str(tmp_path / "offending" / "gx.length_ratio.txt")
    assert (ratio["offending_truncated"], ratio["offending_file"]) == (False, ratio_file)
    assert (passing["offending_truncated"], passing["offending_file"]) == (False, None)
    # without a report folder there is no file, but the cut is still said
    near = report_json(RESULTS, passed=False)["checks"][2]
    assert (near["offending_truncated"], near["offending_file"]) == (True, None)


def test_html_links_the_complete_lists(tmp_path):
    page = write_html(RESULTS, tmp_path / "report.html", {}).read_text()
    assert "href='offending/dedup.near.txt'" in page and "all 1500" in page
    assert "href='offending/gx.not_null.prompt.txt'" not in page


def test_check_and_filter_use_every_offending_id(tmp_path):
    """`prefdata check FILE --report-dir` lists all 1,200 repeated pairs (more than the JSON's 1,000), and
    `prefdata filter` quarantines all of them."""
    import os
    import subprocess
    import sys

    import polars as pl

    n = 1200
    words = [f"w{i}" for i in range(400)]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, 40)) for _ in range(3 * n)]
    base = pl.DataFrame({"id": [f"a{i}" for i in range(n)], "prompt": texts[:n], "chosen": texts[n:2 * n],
                         "rejected": texts[2 * n:]})
    copies = base.with_columns(pl.format("b{}", pl.int_range(n)).alias("id"), pl.col("prompt").str.to_uppercase())
    data = tmp_path / "pairs.parquet"
    pl.concat([base, copies]).write_parquet(data)
    env = {**os.environ, "PREFDATA_STORE": str(tmp_path / "store")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                              timeout=300)

    done = cli("check", str(data), "--json", str(tmp_path / "r.json"), "--report-dir", str(tmp_path / "rep"))
    assert done.returncode == 1, done.stderr
    exact = next(c for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["id"] == "exact_duplicates")
    assert (exact["n_offending"], len(exact["offending"]), exact["offending_truncated"]) == (n, 1000, True)
    listed = (tmp_path / "rep" / "offending" / "exact_duplicates.txt").read_text().splitlines()
    assert listed == [f"b{i}" for i in range(n)] and exact["offending_file"].endswith("exact_duplicates.txt")
    assert "offending/exact_duplicates.txt" in (tmp_path / "rep" / "report.html").read_text()

    imported = cli("import", str(data), "--name", "d")
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    filtered = cli("filter", ref, "--drop", "exact_duplicates", "--json", str(tmp_path / "f.json"))
    assert filtered.returncode == 0, filtered.stderr
    counts = json.loads((tmp_path / "f.json").read_text())
    assert (counts["read"], counts["kept"], counts["quarantined"]) == (2 * n, n, n)


# ---- example pairs under failing checks (issue 14 item 7) --------------------------------------

XSS = "<script>alert('pwn')</script>"


@pytest.fixture(scope="module")
def hh_gate(shared_data, tmp_path_factory):
    """`prefdata check FILE --report-dir` on 40 real HH-RLHF rows plus three injected ones: a copy of
    hh005 (exact duplicate), hh007 with its last word changed (near duplicate) and, first in the file,
    a pair whose chosen reply is long and carries a <script> tag (length ratio)."""
    import gzip

    from prefdata.checks.checklist import load_config
    from prefdata.gate.runner import load_inputs, run_gate

    with gzip.open(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [{"id": f"hh{i:03d}", **json.loads(line)} for i, line in zip(range(40), f)]
    prefix = rows[10]["chosen"].rsplit("\n\nAssistant:", 1)[0]
    xss = {"id": "xss", "chosen": f"{prefix}\n\nAssistant: {XSS} " + "Here is a long answer. " * 40,
           "rejected": f"{prefix}\n\nAssistant: No."}
    near = {**rows[7], "id": "dup-near", "chosen": rows[7]["chosen"].replace("friendly.", "kind.")}
    assert near["chosen"] != rows[7]["chosen"]
    data = tmp_path_factory.mktemp("hh") / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [xss, *rows, {**rows[5], "id": "dup-exact"}, near]))
    inputs, _ = load_inputs(str(data))
    report_dir = data.parent / "report"
    outcome = run_gate(inputs, load_config(None), report_dir=report_dir)
    return {r.id: r for r in outcome.results}, report_dir, inputs.pairs


def _section(page: str, check_id: str) -> str:
    start = page.index(f"<section id='examples-{check_id}'")
    return page[start:page.index("</section>", start)]


def test_html_shows_three_offending_pairs_escaped_and_folded(hh_gate):
    results, report_dir, pairs = hh_gate
    assert results["length_ratio"].status == "fail" and results["length_ratio"].n_offending > 3
    page = (report_dir / "report.html").read_text()
    ratio = _section(page, "length_ratio")
    shown = results["length_ratio"].offending[:3]
    assert shown[0] == "xss" and ratio.count("<tr class='pair'>") == 3
    assert all(f"<code>{i}</code>" in ratio for i in shown)
    # untrusted text is escaped, never live markup; long texts are cut with a fold holding the rest
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;pwn&#x27;)&lt;/script&gt;" in ratio
    assert "<details>" in ratio
    xss_chosen = pairs.filter(pl.col("id") == "xss")["chosen"][0]
    assert html.escape(xss_chosen[-200:]) in ratio  # the fold holds the end of the long reply
    # a failing check whose offending ids are not pairs (section names) shows no pair, and says so
    assert "<tr class='pair'>" not in _section(page, "annotation_guidelines")


def test_html_shows_each_duplicate_beside_its_original(hh_gate):
    results, report_dir, pairs = hh_gate
    assert results["exact_duplicates"].offending == ("dup-exact",)
    assert results["exact_duplicates"].details["examples"] == [{"id": "dup-exact", "duplicate_of": "hh005"}]
    assert "dup-near" in results["near_duplicates"].offending
    page = (report_dir / "report.html").read_text()
    for check_id, dup, original in [("exact_duplicates", "dup-exact", "hh005"), ("near_duplicates", "dup-near", "hh007")]:
        section = _section(page, check_id)
        # one row: the duplicate's column, then the original's
        head = f"<tr><th></th><th>duplicate <code>{dup}</code></th><th>duplicates <code>{original}</code></th></tr>"
        assert head in section, section[:500]
        row = pairs.filter(pl.col("id") == original).row(0, named=True)
        assert html.escape(row["prompt"][:100]) in section
    near = _section(page, "near_duplicates")
    assert near.count("<table class='dup'>") == len(results["near_duplicates"].offending[:3])


def test_markdown_names_the_examples_by_id(hh_gate):
    results, report_dir, _ = hh_gate
    text = (report_dir / "report.md").read_text()
    exact = text[text.index("## exact_duplicates (fail)"):]
    assert "- `dup-exact` duplicates `hh005`" in exact
    near = text[text.index("## near_duplicates (fail)"):]
    assert "- `dup-near` duplicates `hh007`" in near
    ratio = text[text.index("## length_ratio (fail)"):]
    shown = ", ".join(f"`{i}`" for i in results["length_ratio"].offending[:3])
    assert f"Example pairs in report.html: {shown}" in ratio
