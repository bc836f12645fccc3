"""The chat demo's general-skill set (prefdata/world/general.py): large enough to see a tax, right by
construction, scored so that repeating the question cannot score, with standard errors."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from prefdata.data.records import normalise_text
from prefdata.world.facts import correct
from prefdata.world.general import (_PROBLEMS, GENERAL_FILE, general_rows, load_general, number_answers,
                                    paired_change, replay_rows, standard_error)
from prefdata.world.instructions import load_prompts

ROWS = load_general()


def test_the_shipped_set_is_what_the_generator_writes_and_it_is_seeded():
    assert ROWS == general_rows()
    assert general_rows("another seed") != ROWS
    assert GENERAL_FILE.stat().st_size < 1_000_000


def test_it_is_large_enough_to_see_a_five_point_tax_and_mixes_its_kinds():
    assert len(ROWS) >= 600
    kinds = Counter(row["kind"] for row in ROWS)
    assert set(kinds) == {"facts", "reasoning", "reading", "words"}
    assert min(kinds.values()) >= 60
    assert len({row["question"] for row in ROWS}) == len(ROWS)
    # shuffled once: the first 120 items (a demo's smaller `general`) hold every kind
    assert {row["kind"] for row in ROWS[:120]} == set(kinds)
    # at p = 0.5, one standard error of the whole set is under 2 points
    assert standard_error([0, 1] * (len(ROWS) // 2)) < 0.02


def test_no_question_outside_reading_scores_by_repeating_itself():
    for row in ROWS:
        if row["kind"] != "reading":
            assert not correct(row, row["question"]), row


def test_a_reading_text_names_both_answers_and_the_first_named_is_the_replys_answer():
    reading = [row for row in ROWS if row["kind"] == "reading"]
    for row in reading:
        (right,), (wrong,) = row["answers"], row["wrong"]
        assert right != wrong and re.search(rf"\b{right}\b", row["question"]) and re.search(rf"\b{wrong}\b", row["question"])
        assert correct(row, f"The answer is {right}.") and not correct(row, f"The answer is {wrong}.")
        assert correct(row, f"{right}, not {wrong}") and not correct(row, f"{wrong}, not {right}")
    # a reply that repeats the text scores when the asked person comes first: about half the time
    echoed = sum(correct(row, row["question"]) for row in reading) / len(reading)
    assert 0.3 < echoed < 0.7


def test_word_problems_answer_what_their_numbers_make():
    for row in ROWS:
        if row["kind"] == "reasoning":
            index = int(row["category"].split()[-1]) - 1
            a, b = map(int, re.findall(r"\d+", row["question"]))
            assert row["answers"] == number_answers(_PROBLEMS[index][1](a, b)), row


def test_number_answers_give_digits_and_words():
    assert number_answers(7) == ["7", "seven"]
    assert number_answers(21) == ["21", "twenty-one", "twenty one"]
    assert number_answers(40) == ["40", "forty"]
    assert correct({"answers": number_answers(21)}, "She has twenty one apples.")
    with pytest.raises(ValueError):
        number_answers(101)


def test_no_general_question_is_among_the_instruction_prompts():
    prompts = [normalise_text(r["prompt"]) for r in load_prompts("train") + load_prompts("heldout")]
    for row in ROWS:
        question = normalise_text(row["question"])
        assert not any(question in prompt for prompt in prompts), row["question"]


def test_standard_errors_single_and_paired():
    assert standard_error([1, 1, 0, 0]) == pytest.approx(0.25)
    assert math.isnan(standard_error([]))
    # differences 0, -1, +1, +1: mean 0.25, sample variance 2.75 / 3
    change, se = paired_change([1, 1, 0, 0], [1, 0, 1, 1])
    assert change == pytest.approx(0.25) and se == pytest.approx(math.sqrt(2.75 / 3 / 4))
    # the same items answered the same way: no change and no error, where unpaired errors would add up
    assert paired_change([1, 0] * 50, [1, 0] * 50) == (0.0, 0.0)
    with pytest.raises(ValueError, match="not the same items"):
        paired_change([1, 0], [1])


def test_measure_scores_every_item_and_evaluate_reports_numbers(monkeypatch):
    import prefdata.world.chat_world as chat_world

    items = ROWS[:40]

    right = {row["question"]: row["answers"][0] if i % 2 == 0 else "I do not know." for i, row in enumerate(items)}
    lengths = {}

    def replies(model_dir, prompts, max_new_tokens, batch_size=32):
        # the right answer to the even items, a wrong one to the odd; the held-out prompts get nothing
        lengths.update({prompt: max_new_tokens for prompt in prompts})
        return [right.get(prompt, "") for prompt in prompts]

    monkeypatch.setattr(chat_world, "replies", replies)
    figures = chat_world.measure("model", heldout=4, general=40)
    assert figures["general_items"] == [1 - i % 2 for i in range(40)]
    assert figures["general"] == 0.5 and figures["general_se"] == pytest.approx(math.sqrt(0.25 / 40))
    # each kind at its reply length: a word problem's working needs more than a fact
    assert {row["kind"] for row in items} >= {"reasoning", "facts"}
    for row in items:
        assert lengths[row["question"]] == chat_world.GENERAL_TOKENS_BY_KIND.get(row["kind"], chat_world.GENERAL_TOKENS)
    assert set(chat_world.evaluate("model", heldout=4, general=40)) == {"follow", "general", "general_se"}


def test_follow_outcomes_mark_each_held_out_prompt_whose_reply_follows(monkeypatch):
    from prefdata.world import chat_world
    from prefdata.world.instructions import verify

    prompts = [row["prompt"] for row in load_prompts("heldout")[:24]]
    following = {}
    for prompt in prompts:
        made = chat_world.following_reply(prompt, "Yes. A short plain answer to the question.")
        if made is not None:
            following[prompt] = made[1]
    assert len(following) >= 4  # enough prompts the repair can make follow, to see the 1s

    def replies(model_dir, asked, max_new_tokens, batch_size=32):
        # a following reply where the repair makes one, a reply breaking a word limit elsewhere
        return [following.get(prompt, "word " * 300) for prompt in asked]

    monkeypatch.setattr(chat_world, "replies", replies)
    outcomes = chat_world.follow_outcomes("model", heldout=24)
    assert len(outcomes) == 24
    assert all(outcomes[i] == 1 for i, prompt in enumerate(prompts) if prompt in following)
    assert outcomes == [int(verify(prompt, following.get(prompt, "word " * 300))) for prompt in prompts]
    assert 0 < sum(outcomes) < 24
    assert chat_world.measure("model", heldout=24, general=4)["follow"] == sum(outcomes) / 24


def test_replay_items_are_of_the_rule_made_kinds_and_never_asked_by_the_measure():
    rows = replay_rows(160, ROWS)
    assert Counter(row["kind"] for row in rows) == {"reasoning": 80, "reading": 80}
    assert not {row["question"] for row in rows} & {row["question"] for row in ROWS}
    assert len({row["question"] for row in rows}) == 160 and replay_rows(160, ROWS) == rows  # distinct, seeded
    # every template of both kinds is among them, so the replay covers the working the set asks for
    assert {row["category"] for row in rows if row["kind"] == "reasoning"} == {f"problem {i + 1}" for i in range(len(_PROBLEMS))}
    # with the measure's own questions as `shipped`, a question it asks is left out
    assert rows[0]["question"] not in {row["question"] for row in replay_rows(160, ROWS + rows[:1])}
    with pytest.raises(ValueError, match="holds out at most 3[0-9]{2} word problems and reading questions: ask for fewer"):
        replay_rows(10_000, ROWS)


def test_the_skill_replay_keeps_the_base_models_replies_right_or_wrong_at_the_measures_lengths(monkeypatch):
    from prefdata.world import chat_world

    rows = replay_rows(20, ROWS)
    lengths = {}

    def replies(model_dir, prompts, max_new_tokens, batch_size=32):
        lengths.update({prompt: max_new_tokens for prompt in prompts})
        return ["It is 7. It is 7. It is" if i % 2 else "I do not know" for i, _ in enumerate(prompts)]

    monkeypatch.setattr(chat_world, "replies", replies)
    examples = chat_world.skill_replay("model", rows)
    assert [question for question, _ in examples] == [row["question"] for row in rows]
    assert {reply for _, reply in examples} == {"It is 7.", "I do not know"}  # cut, wrong ones kept
    for row in rows:
        assert lengths[row["question"]] == chat_world.GENERAL_TOKENS_BY_KIND.get(row["kind"], chat_world.GENERAL_TOKENS)


def _bench_general_score(*files):
    """bench/bench_general.py --score FILE ... as a user runs it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, str(root / "bench" / "bench_general.py")]
    for path in files:
        argv += ["--score", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=root)


def test_bench_general_prints_following_as_a_paired_row(tmp_path):
    import json

    items = len(ROWS[:10])
    saved = {"outcomes": {"base": [1, 0] * (items // 2), "dpo": [1, 1] * (items // 2)},
             "follow": {"base": [0, 0, 1, 0], "dpo": [1, 1, 1, 0]}, "seconds": {}}
    path = tmp_path / "outcomes.json"
    path.write_text(json.dumps(saved))
    out = _bench_general_score(path).stdout
    row = next(line for line in out.splitlines() if line.startswith("| held-out following (4)"))
    assert "| 0.250 ± " in row and "| 0.750 ± " in row and "+0.500 ± " in row
    assert "+0.500 ± " in next(line for line in out.splitlines() if "all (10)" in line)


def test_bench_general_puts_several_runs_side_by_side_and_refuses_different_items(tmp_path):
    import json

    first, second, short = tmp_path / "first.json", tmp_path / "second.json", tmp_path / "short.json"
    first.write_text(json.dumps({"outcomes": {"base": [0] * 10}, "follow": {"base": [0, 0]}}))
    second.write_text(json.dumps({"outcomes": {"dpo": [1] * 5 + [0] * 5}, "follow": {"dpo": [1, 0]}}))
    short.write_text(json.dumps({"outcomes": {"other": [1] * 4}}))

    out = _bench_general_score(first, second).stdout
    assert "| items | base | dpo | dpo - base (paired) |" in out
    assert "+0.500 ± " in next(line for line in out.splitlines() if "all (10)" in line)
    assert "| 0.000 ± 0.000 | 0.500 ± " in next(line for line in out.splitlines() if "following (2)" in line)
    refused = _bench_general_score(first, short)
    assert refused.returncode == 2 and "different numbers of items" in refused.stderr
    assert "Traceback" not in refused.stderr
