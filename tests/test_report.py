"""Report writers: JUnit XML that parses with the right counts, markdown, self-contained HTML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from prefdata.checks.base import CheckResult, skip
from prefdata.report import report_json, write_html, write_junit, write_markdown, write_reports

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
    assert {p.name for p in paths.values()} == {"report.md", "junit.xml", "report.html"}
    assert all(p.is_file() for p in paths.values())
    assert write_html([], tmp_path / "empty.html", {}).read_text().count("<svg") == 0
