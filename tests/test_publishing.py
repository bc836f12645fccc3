"""prefdata.gate.publishing: the one publish path of `prefdata publish` and the publish flow."""

from __future__ import annotations

import json

import pytest

from prefdata.base.errors import GateFailed
from prefdata.data.store import Store


def _draft(tmp_path, name: str):
    from prefdata.data.importer import import_file, import_to_store

    src = tmp_path / f"{name}.jsonl"
    src.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "chosen": str(2 * i), "rejected": str(2 * i + 1)}) + "\n"
                           for i in range(5)))
    result = import_file(src)
    st = Store(str(tmp_path / "store"))
    return st, import_to_store(result, name, st)


def test_a_refused_version_is_shown_then_marked_rejected_with_reports_in_the_default_folder(tmp_path, monkeypatch):
    from prefdata.gate.publishing import publish_version

    monkeypatch.chdir(tmp_path)
    st, v = _draft(tmp_path, "tiny")
    seen = []
    with pytest.raises(GateFailed, match=r"not published: the checklist failed \(.*min_size.*\); marked rejected"):
        publish_version(st, v.ref, show=lambda validation: seen.append((validation, st.get(v.ref).status)))
    [(validation, status_when_shown)] = seen
    assert status_when_shown == "draft" and not validation.passed and "min_size" in validation.failing
    folder = (tmp_path / ".prefdata" / "reports" / f"tiny-{v.version}").resolve()
    assert validation.report_dir == folder and (folder / "report.md").is_file()
    assert st.get(v.ref).status == "rejected" and st.get(v.ref).manifest["check_report"]["passed"] is False


def test_a_passing_version_is_validated_once(tmp_path):
    from prefdata.checks.checklist import _registry
    from prefdata.gate.publishing import publish_version

    st, v = _draft(tmp_path, "waived")
    config = tmp_path / "all-waived.yaml"
    config.write_text("checks:\n" + "".join(f"  {c}: {{waive: a test}}\n" for c in _registry()))
    published = publish_version(st, v.ref, config=config, report_dir=tmp_path / "rep")
    assert published.status == "validated" and published.validation.passed
    assert published.validation.report_dir == (tmp_path / "rep").resolve() and st.get(v.ref).status == "validated"
    again = publish_version(st, v.ref, config=config, show=lambda _: pytest.fail("nothing runs for a validated version"))
    assert again.status == "validated" and again.validation is None


def test_a_refusal_names_every_way_out(tmp_path):
    """Filter the rows the row checks name, waive with a reason, or bring new data: in publish's refusal
    and again when train is pointed at the rejected version."""
    from prefdata.gate.publishing import publish_version
    from prefdata.trainers.data import load_validated

    from prefdata.data.importer import import_file, import_to_store

    src = tmp_path / "long.jsonl"  # every chosen answer 10x its rejected one: length_ratio fails
    src.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "chosen": f"{2 * i} " * 10, "rejected": f"{2 * i + 1} "})
                           + "\n" for i in range(5)))
    st = Store(str(tmp_path / "store"))
    v = import_to_store(import_file(src), "tiny", st)
    with pytest.raises(GateFailed) as refused:
        publish_version(st, v.ref, report_dir=tmp_path / "rep")
    message = str(refused.value)
    assert f"`prefdata filter {v.ref} --drop length_ratio`" in message
    assert "waived with its reason in a --config file (checks: {category_coverage: {waive:" in message
    assert "new version of tiny" in message
    with pytest.raises(GateFailed) as trained:
        load_validated(v.ref, st.url)
    assert "is rejected: its checklist failed (" in str(trained.value) and "--drop length_ratio" in str(trained.value)
