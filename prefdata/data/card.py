"""The dataset card: README.md with a Hugging Face YAML header, so `datasets.load_dataset(folder)`
finds every config and the folder can be pushed to the Hub as it is.

Checklist item 12 wants the annotation guidelines, rubric and edge cases documented; the card
carries those sections, from the user's guideline document when one is given.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import yaml

GUIDELINE_SECTIONS = ("Annotation guidelines", "Rubric", "Edge cases")
PLACEHOLDER = "_Not documented yet._"


def sections(markdown: str) -> dict[str, str]:
    """Level-2 sections of a Markdown document: {title: body}."""
    found: dict[str, str] = {}
    parts = re.split(r"^##\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    for title, body in zip(parts[1::2], parts[2::2]):
        found[title.strip()] = body.strip()
    return found


def strip_front_matter(markdown: str) -> str:
    if markdown.startswith("---\n"):
        end = markdown.find("\n---", 4)
        if end >= 0:
            return markdown[end + 4 :].lstrip("\n")
    return markdown


def render_card(name: str, configs: dict[str, dict[str, str]], counts: dict[str, Any], guidelines: str | None,
                notes: Sequence[str] = ()) -> str:
    """configs: {config_name: {split: path_glob}}; counts: rows per config and split, quarantine;
    notes: lines stated after the counts (a collected version: how its prompts reached the policy)."""
    header = {
        "configs": [
            {"config_name": config, "data_files": [{"split": s, "path": p} for s, p in sorted(splits.items())]}
            for config, splits in configs.items()
        ],
        "tags": ["preference", "rlhf", "dpo", "prefdata"],
    }
    given = sections(strip_front_matter(guidelines)) if guidelines else {}
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False).rstrip(),
        "---",
        f"# {name}",
        "",
        "Preference pairs (`prompt`, `chosen`, `rejected`, TRL standard format) made with prefdata.",
        "",
        "| config | split | rows |",
        "|---|---|---|",
    ]
    for config, splits in counts["rows"].items():
        for split, n in splits.items():
            lines.append(f"| {config} | {split} | {n} |")
    lines += ["", f"Rows read: {counts['read']}, kept: {counts['kept']}, quarantined: {counts['quarantined']}.", ""]
    for note in notes:
        lines += [note, ""]
    for title in GUIDELINE_SECTIONS:
        lines += [f"## {title}", "", given.pop(title, "") or PLACEHOLDER, ""]
    for title, body in given.items():  # any other section of the user's document
        lines += [f"## {title}", "", body, ""]
    return "\n".join(lines)
