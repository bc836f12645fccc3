"""General skill of chat models on the chat demo's general-skill set, side by side, with standard errors.

    python bench/bench_general.py --model base=smollm2 --model dpo=.prefdata/demo-chat/model [--general N]

Each model answers the set's items (prefdata/world/general.py: facts, word problems, reading, word
forms) greedily through its chat template (chat_world.general_replies: 32 tokens, 96 for a word
problem's working), and each reply is scored by facts.correct.
With `--follow`, each model also answers the chat demo's held-out following prompts
(chat_world.follow_outcomes), a row of the same table.
Printed per kind and in all: the share right with its standard error, and for every model after the
first, its change from the first on the same items with the paired standard error (the differences'
standard deviation over sqrt(n)): the figure that says whether a run cost general skill.
`--json J` keeps each item's outcome and reply; `--score J` prints the table again from it, and
`--score J1 --score J2` puts the models of runs made apart side by side (the same items).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def table(items: list[dict], outcomes: dict[str, list[int]], seconds: dict[str, float],
          followed: dict[str, list[int]] | None = None) -> None:
    from prefdata.world.general import paired_change, standard_error

    kinds = defaultdict(list)
    for i, item in enumerate(items):
        kinds[item["kind"]].append(i)
    groups = [(f"{kind} ({len(rows)})", outcomes, rows) for kind, rows in sorted(kinds.items())]
    groups.append((f"**all ({len(items)})**", outcomes, list(range(len(items)))))
    if followed:
        prompts = len(next(iter(followed.values())))
        groups.append((f"held-out following ({prompts})", followed, list(range(prompts))))
    names = list(outcomes)
    first = names[0]
    print("| items | " + " | ".join(names) + " | " + " | ".join(f"{n} - {first} (paired)" for n in names[1:]) + " |")
    print("|---" * (2 * len(names)) + "|")
    for label, scored, rows in groups:
        cells = []
        for name in names:
            scores = [scored[name][i] for i in rows]
            cells.append(f"{sum(scores) / len(scores):.3f} ± {standard_error(scores):.3f}")
        for name in names[1:]:
            change, se = paired_change([scored[first][i] for i in rows], [scored[name][i] for i in rows])
            cells.append(f"{change:+.3f} ± {se:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    if seconds:
        print("seconds: " + ", ".join(f"{name} {s:.0f}" for name, s in seconds.items()))


def merged(runs: list[dict], parser: argparse.ArgumentParser) -> dict:
    """The models of several --json files as one run's: each file's outcomes, following and seconds,
    in order. The files must score the same items (and the same held-out prompts, where all have them)."""
    saved: dict = {"outcomes": {}, "follow": {}, "seconds": {}}
    for run in runs:
        for key in saved:
            saved[key] |= run.get(key, {})
    for key in ("outcomes", "follow"):
        if len({len(scores) for scores in saved[key].values()}) > 1:
            parser.error(f"the files score different numbers of {'items' if key == 'outcomes' else 'held-out prompts'}"
                         ": make them with the same --general and --heldout")
    if saved["follow"] and set(saved["follow"]) != set(saved["outcomes"]):
        saved["follow"] = {}  # a file without --follow: no following row rather than a partial one
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], help="NAME=PATH (a model folder, a .gguf file, or "
                                                                          "smollm2); once per model, the first is the "
                                                                          "one the others are compared with")
    parser.add_argument("--general", type=int, default=None, help="The first N items (default: all).")
    parser.add_argument("--follow", action="store_true", help="Also score the demo's held-out following prompts "
                                                                   "(the chat demo's follow figure), paired.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, help="Write the outcomes and the replies here.")
    parser.add_argument("--heldout", type=int, default=None,
                        help="With --follow: the first N held-out prompts (default: all 450; the chat demo's 120).")
    parser.add_argument("--score", type=Path, action="append", default=[],
                        help="Print the table of a --json file instead; several: their models side by side, "
                             "the first file's first model the one compared with.")
    args = parser.parse_args()
    from prefdata.world.general import load_general, outcomes

    items = load_general()[:args.general]
    if args.score:
        missing = [str(path) for path in args.score if not path.is_file()]
        if missing:
            parser.error(f"no saved outcomes at {', '.join(missing)}: give --score the --json file of a run")
        saved = merged([json.loads(path.read_text()) for path in args.score], parser)
        items = items[:len(next(iter(saved["outcomes"].values())))]
        table(items, saved["outcomes"], saved["seconds"], saved["follow"])
        return
    if not args.model:
        parser.error("give --model NAME=PATH (or --score FILE)")
    from prefdata.world.chat_world import follow_outcomes, general_replies, model_folder

    scored, answered, seconds, followed = {}, {}, {}, {}
    for spec in args.model:
        name, _, path = spec.partition("=")
        folder = model_folder(path or name)
        started = time.perf_counter()
        answered[name] = general_replies(folder, items, args.batch_size)
        scored[name] = outcomes(items, answered[name])
        if args.follow:
            followed[name] = follow_outcomes(folder, args.heldout, args.batch_size)
        seconds[name] = time.perf_counter() - started
    table(items, scored, seconds, followed)
    if args.json:
        saved = {"outcomes": scored, "replies": answered, "seconds": seconds}
        args.json.write_text(json.dumps(saved | ({"follow": followed} if followed else {})) + "\n")


if __name__ == "__main__":
    main()
