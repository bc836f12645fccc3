"""Every hint works as written (issue 43, item 5): the fixes the checklist's messages and publish's
refusal suggest are gathered from real runs and applied: each YAML waiver through the config loader,
each option through the command line's own parser, each spec through the spec parser (no old
spelling). A hint that names an option no command has, or a waiver the loader rejects, fails here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
import yaml

from prefdata.base.errors import ways_out
from prefdata.base.specs import KINDS, RENAMED
from prefdata.checks.checklist import load_config
from prefdata.checks.registry import CHECKS
from prefdata.commands.cli import app

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
WAIVER = re.compile(r"checks: (\{.*?\}\})")
SPEC_KIND = re.compile(r"(?<![\w:/.])([a-z]+):(?:[A-Z]|\.\.\.)")  # llm:MODEL@URL, rm:PATH, rule:NAME...
COMMAND = re.compile(r"prefdata (\w+)")


def options_of(command: str) -> set[str]:
    click_command = typer.main.get_command(app).commands[command]
    return {opt for param in click_command.params for opt in (*param.opts, *param.secondary_opts)}


def prefdata(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.fixture(scope="module")
def hints(tmp_path_factory) -> list[str]:
    """What a user is told: every check's message on a small file with problems (no card, no scorer, no
    reference prompts, no eval set, a duplicate), publish's refusal of it, and the ways out of every
    check's failure."""
    folder = tmp_path_factory.mktemp("hints")
    rows = [{"prompt": f"What is {i} plus {i}?", "chosen": f"It is {2 * i}.", "rejected": "no"} for i in range(12)]
    rows.append(dict(rows[0]))
    data = folder / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    checked = prefdata("check", str(data), "--json", str(folder / "report.json"), cwd=folder)
    assert checked.returncode == 1, checked.stderr
    messages = [c["message"] for c in json.loads((folder / "report.json").read_text())["checks"] if c.get("message")]
    imported = prefdata("import", str(data), "--name", "pairs", "--store", str(folder / "store"), cwd=folder)
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    refused = prefdata("publish", ref, "--store", str(folder / "store"), cwd=folder)
    assert refused.returncode == 1, refused.stderr
    messages.append(refused.stderr)
    messages += [ways_out(ref, [check]) for check in (*CHECKS, "gx.length_ratio", "gx.not_null.prompt")]
    return messages


def test_the_hints_were_gathered(hints):
    joined = "\n".join(hints)
    for expected in ("--scorer", "--reference-prompts", "--card", "waive", "prefdata filter"):
        assert expected in joined


def test_every_suggested_waiver_loads(hints, tmp_path):
    waivers = {m for text in hints for m in WAIVER.findall(text)}
    assert len(waivers) >= 5
    for waiver in waivers:
        config = tmp_path / "waiver.yaml"
        config.write_text(yaml.safe_dump({"checks": yaml.safe_load(waiver)}))
        loaded = load_config(config)  # UnusableInput (the test fails) for a check the loader does not know
        (check,) = yaml.safe_load(waiver)
        assert loaded["checks"][check]["waive"] == "why"


def test_every_suggested_option_exists_on_the_command_it_is_for(hints):
    named = 0
    for text in hints:
        for sentence in re.split(r"(?<=[;.])\s", text):
            command = (COMMAND.findall(sentence) or ["check"])[-1]
            for option in OPTION.findall(sentence):
                named += 1
                assert option in options_of(command), f"{option} (for `prefdata {command}`) in: {sentence}"
    assert named >= 5


def test_every_suggested_spec_uses_todays_spelling(hints):
    kinds = {kind for text in hints for kind in SPEC_KIND.findall(text)}
    assert {"rm", "llm", "rule", "verdicts"} <= kinds
    assert not kinds & set(RENAMED) and kinds <= set(KINDS), kinds
