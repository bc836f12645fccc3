"""The chat demo's data: constraints and their verifiers, the shipped prompts, the general-skill facts.

Fast and model-free. The IFEval-backed verifiers run if-verifiable's own checkers (the `chat` extra).
"""

from __future__ import annotations

import json
import re
import sys

import polars as pl
import pytest

from prefdata.base.errors import UnusableInput
from prefdata.checks.isolation import check_split_isolation
from prefdata.data.records import normalise_text
from prefdata.world.facts import FACTS, accuracy, correct, fact_rows, load_facts
from prefdata.world.instructions import (
    CHAT_DATA, CONFLICTS, KIND_BY_ID, KINDS, OPEN, TASKS, Constraint, build_prompts, chat_data_files, constraint,
    constraint_of, constraints_of, load_prompts, repair, request_of, split_topics, verify,
)

# kind -> (its parameters, a reply that follows, a reply that does not). Each pair sits on the edge
# the verifier must draw, so a wrong verifier fails here.
CASES = {
    # "apple" and "YES": langdetect calls neither English, so IFEval's english_* checkers would refuse them
    "lowercase": ({}, "apple", "Apple"),
    "capitals": ({}, "YES", "YES, it is."),
    "numbered_list": ({"n": 3}, "Three things:\n1. Waves\n2. Salt\n3) Fish", "1. Waves\n2. Salt\n4. Fish"),
    "one_word": ({}, "Blue.", "Deep blue."),
    "yes_or_no": ({}, "Yes.", "Yes, it is."),
    "no_comma": ({}, "The sea is wide and deep.", "The sea is wide, deep and blue."),
    "end_with": ({"word": "done"}, "The sea is wide. Done", "The sea is wide. done."),
    "double_quotes": ({}, '"The sea is wide."', 'The sea is "wide".'),
    "max_words": ({"n": 5}, "The sea is very wide.", "The sea is very wide indeed."),
    "start_with": ({"word": "Well"}, '"Well, the sea is wide."', "Wellness is the sea."),
    "bullets": ({"n": 2}, "Two things:\n* Waves\n* Salt", "* Waves\n* Salt\n* Fish"),
    "include_word": ({"word": "happy"}, "The sea makes me Happy.", "The sea makes me glad."),
    "avoid_word": ({"word": "the"}, "There is salt in every sea.", "There is salt in the sea."),
    # the request is what the prompt says before the instruction: "Describe the sea." in these tests
    "repeat_request": ({}, "describe the sea.\n\nIt is wide.", "It is wide. Describe the sea."),
    "end_phrase": ({"phrase": "Any other questions?"}, 'The sea is wide. "any other questions?"',
                   "Any other questions? The sea is wide."),
    "title": ({}, "<<The Sea>>\nIt is wide.", "<< >> The sea is wide. <The Sea>"),
    "highlights": ({"n": 2}, "The sea is *wide* and **deep**.", "The sea is *wide* and * *."),
    "postscript": ({"marker": "P.P.S"}, "The sea is wide.\n\nP.P.S Bring a coat.", "The sea is wide. P.S. Bring a coat."),
    "placeholders": ({"n": 2}, "Meet me at [place] on [date].", "Meet me at [place] on the beach."),
}


def test_there_are_at_least_ten_kinds_and_each_has_a_case():
    assert len(KINDS) >= 10
    assert set(CASES) == set(KIND_BY_ID)


WORDED = [(kind_id, wording) for kind_id in sorted(CASES) for wording in range(len(KIND_BY_ID[kind_id].templates))]


@pytest.mark.parametrize("kind_id, wording", WORDED)
def test_each_verifier_accepts_a_following_reply_and_refuses_a_violating_one_in_every_wording(kind_id, wording):
    params, follows, violates = CASES[kind_id]
    written = Constraint(KIND_BY_ID[kind_id], params, wording)
    prompt = f"Describe the sea. {written.instruction}"
    (found,) = constraints_of(prompt)
    assert (found.kind.id, found.wording, {k: v for k, v in found.params.items() if k != "request"}) == \
        (kind_id, wording, params)
    assert verify(prompt, follows) is True
    assert verify(prompt, violates) is False


REPAIRABLE = {"double_quotes", "lowercase", "capitals", "no_comma", "end_with", "end_phrase", "repeat_request", "bullets",
              "title", "highlights", "postscript", "placeholders"}


@pytest.mark.parametrize("kind_id", sorted(CASES))
def test_a_repair_makes_a_violating_reply_follow_and_leaves_a_following_one_alone(kind_id):
    params, follows, violates = CASES[kind_id]
    prompt = f"Describe the sea. {constraint(kind_id, **params).instruction}"
    assert repair(prompt, follows) is None  # nothing to repair
    edited = repair(prompt, violates)
    if kind_id not in REPAIRABLE:
        assert edited is None
        return
    assert verify(prompt, edited) is True
    # the edit keeps the reply's words, in order; it may add an end word, or the request before them
    words = lambda text: re.findall(r"\w+", normalise_text(text))  # noqa: E731
    added = {"repeat_request": len(words("Describe the sea.")), "end_phrase": len(words(params.get("phrase", ""))),
             "title": 4, "postscript": len(words("P.P.S I hope you enjoyed this.")), "placeholders": params.get("n"),
             "bullets": 0, "highlights": 0}
    added = added.get(kind_id, 1)
    assert " ".join(words(violates)) in " ".join(words(edited))
    assert len(words(edited)) <= len(words(violates)) + added


@pytest.mark.parametrize("kind_id", sorted(REPAIRABLE))
def test_an_empty_reply_is_repaired_or_refused_never_an_error(kind_id):
    """Sampling can return an empty reply; a repair adds what its kind asks for, or gives None."""
    params, _, _ = CASES[kind_id]
    prompt = f"Describe the sea. {constraint(kind_id, **params).instruction}"
    edited = repair(prompt, "")
    assert edited is None or verify(prompt, edited)


def test_a_prompt_with_two_constraints_is_followed_only_when_both_are_and_repaired_for_both():
    prompt = ("Write a poem about the sea. Wrap your entire response with double quotation marks. "
              "Finish your response with the exact word 'done'. No other words should follow it.")
    assert [c.kind.id for c in constraints_of(prompt)] == ["double_quotes", "end_with"]
    assert verify(prompt, '"The sea is wide. Done"') and verify(prompt, '"The sea is wide done"')
    assert not verify(prompt, '"The sea is wide."') and not verify(prompt, "The sea is wide. done")
    edited = repair(prompt, "The sea is wide.")
    assert edited == '"The sea is wide. done"' and verify(prompt, edited)
    # the case edit runs last, so the repeated request is in capitals too
    shout = f"Write a tweet about snow. Use only capital letters in your response. {KIND_BY_ID['repeat_request'].template}"
    edited = repair(shout, "Snow is cold.")
    assert edited == "WRITE A TWEET ABOUT SNOW. USE ONLY CAPITAL LETTERS IN YOUR RESPONSE.\n\nSNOW IS COLD."
    assert verify(shout, edited)
    # a constraint without a rule cannot be repaired, so neither is the prompt
    keyword = ("Write a song about snow. Include the keyword 'happy' in your response. "
               "Do not use any capital letters in your response.")
    assert repair(keyword, "Snow is cold.") is None and repair(keyword, "Snow makes me Happy.") == "snow makes me happy."


def test_the_request_is_the_prompt_without_its_instructions():
    prompt = ("Write a riddle about a cat. Do not include any commas in your response. Before you answer, repeat the "
              "request above word for word (not this sentence), then answer it.")
    assert request_of(prompt) == "Write a riddle about a cat."
    (_, repeat) = constraints_of(prompt)
    assert repeat.params["request"] == "Write a riddle about a cat. Do not include any commas in your response."


def test_ifeval_backed_kinds_name_checkers_that_exist():
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

    assert len([kind for kind in KINDS if kind.ifeval_id]) >= 8
    backed = {kind.id: kind.ifeval_id for kind in KIND_BY_ID.values() if kind.ifeval_id}
    assert set(backed.values()) <= set(INSTRUCTION_DICT)


def test_a_missing_if_verifiable_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "if_verifiable.ifeval.instructions_registry", None)  # import fails
    with pytest.raises(UnusableInput, match=r"pip install 'prefdata\[chat\]'"):
        verify("Describe the sea. Do not use any commas in your answer.", "Wide and deep.")


def test_a_prompt_without_a_constraint_or_with_two_is_refused():
    with pytest.raises(ValueError, match="no known constraint"):
        constraint_of("Describe the sea.")
    with pytest.raises(ValueError, match="2 constraints"):
        constraint_of("Describe the sea. Answer only yes or no. Answer with one word only.")


# ------------------------------------------------------------------------------ the shipped prompts

TRAIN, HELDOUT = load_prompts("train"), load_prompts("heldout")


def test_the_shipped_files_are_what_the_generator_writes_now():
    # `python -m prefdata.world.instructions` rewrites them
    for name, text in chat_data_files().items():
        assert (CHAT_DATA / name).read_text(encoding="utf-8") == text, f"{name} is stale"
        assert len(text.encode()) < 1_000_000


def test_counts():
    assert len(TRAIN) >= 1000 and len(HELDOUT) >= 300 and len(load_facts()) >= 100


def test_verify_recovers_every_shipped_prompts_constraint():
    for row in TRAIN + HELDOUT:
        found = constraint_of(row["prompt"])
        assert (found.kind.id, found.params) == (row["constraint"], row["params"]), row["prompt"]
        assert row["prompt"].endswith(found.instruction)


def test_every_kind_is_in_both_splits():
    assert {r["constraint"] for r in TRAIN} == {r["constraint"] for r in HELDOUT} == {kind.id for kind in KINDS}


IFEVAL_STYLE = load_prompts("ifeval_style")


def test_ifeval_style_prompts_parse_back_to_their_constraints_on_train_topics_only():
    assert len(IFEVAL_STYLE) >= 1000
    assert {r["topic"] for r in IFEVAL_STYLE} == set(split_topics()[0])
    for row in IFEVAL_STYLE:
        found = constraints_of(row["prompt"])
        assert [(c.kind.id, c.params) for c in found] == [(c["kind"], c["params"]) for c in row["constraints"]]
        assert 1 <= len(found) <= 2 and frozenset(c.kind.id for c in found) not in CONFLICTS
        assert all(c.kind.id != "repeat_request" for c in found[:-1])  # the request is all before it
        assert request_of(row["prompt"]) in {task.format(topic=row["topic"]) for task in TASKS}
    kinds = {c["kind"] for r in IFEVAL_STYLE for c in r["constraints"]}
    wordings = {(c.kind.id, c.wording) for r in IFEVAL_STYLE for c in constraints_of(r["prompt"])}
    assert "repeat_request" in kinds and len(wordings) > 2 * len(kinds)  # several wordings of each kind
    # only what IFEval scores: every IFEval-backed kind that suits a writing task, and no other
    assert kinds == {kind.id for kind in KIND_BY_ID.values() if kind.ifeval_id and OPEN in kind.shapes}


def test_train_and_heldout_share_no_topic_and_no_prompt():
    assert not {r["topic"] for r in TRAIN} & {r["topic"] for r in HELDOUT}
    train_prompts = {normalise_text(r["prompt"]) for r in TRAIN}
    heldout_prompts = {normalise_text(r["prompt"]) for r in HELDOUT}
    assert len(train_prompts) == len(TRAIN) and len(heldout_prompts) == len(HELDOUT)  # no repeats either
    assert not train_prompts & heldout_prompts


def test_the_generator_is_seeded():
    assert build_prompts("another seed") != build_prompts()


def test_no_shipped_prompt_is_or_nearly_is_an_ifeval_prompt(shared_data):
    """The project's own split_isolation check: IFEval's 541 prompts as the eval side, ours as train."""
    lines = (shared_data / "ifeval" / "input_data.jsonl").read_text(encoding="utf-8").splitlines()
    ifeval = [json.loads(line)["prompt"] for line in lines if line]
    assert len(ifeval) == 541
    ours = [r["prompt"] for r in TRAIN + HELDOUT + IFEVAL_STYLE]
    result = check_split_isolation(pl.DataFrame({"id": [f"ours-{i}" for i in range(len(ours))], "prompt": ours}),
                                   pl.DataFrame({"id": [f"ifeval-{i}" for i in range(len(ifeval))], "prompt": ifeval}))
    assert result.status == "pass", result.message
    assert (result.details["n_exact"], result.details["n_near"]) == (0, 0)


# ------------------------------------------------------------------------------ the general-skill facts

def test_facts_file_holds_the_facts():
    assert load_facts() == fact_rows()
    questions = [row["question"] for row in fact_rows()]
    assert len(set(questions)) == len(questions) == sum(len(facts) for facts in FACTS.values())


def test_no_fact_question_scores_by_repeating_itself():
    for row in fact_rows():
        assert not correct(row, row["question"]), row


def test_no_fact_question_is_among_the_instruction_prompts():
    prompts = [normalise_text(r["prompt"]) for r in TRAIN + HELDOUT]
    for row in fact_rows():
        question = normalise_text(row["question"])
        assert not any(question in prompt for prompt in prompts), row["question"]


def test_a_reply_scores_by_whole_words_in_any_case():
    france = {"question": "What is the capital of France?", "answers": ["Paris"]}
    assert correct(france, "The capital of France is paris.")
    assert not correct(france, "The capital of France is Lyon.")
    assert not correct(france, "Parisian cafes are famous.")
    sums = {"question": "What is two plus three?", "answers": ["five", "5"]}
    assert correct(sums, "2 + 3 = 5") and correct(sums, "Five!")
    assert not correct(sums, "It is 15.")
    donkey = {"question": "What sound does a donkey make?", "answers": ["bray", "hee-haw"]}
    assert correct(donkey, "It goes HEE-HAW.") and not correct(donkey, "It goes hee.")
    assert accuracy([france, sums], ["Paris", "four"]) == 0.5


def test_simulated_annotators_order_graded_scores():
    """world.correct_vote takes a verifier's bool or a graded score: the higher side is right, equal
    sides tie (the chat demo's annotators go by verify, a bool)."""
    from prefdata.world.annotators import correct_vote

    prompt = "Describe the sea. Write your whole answer in lowercase letters only."
    assert correct_vote(prompt, "the sea.", "The sea.", verify) == "a"
    assert correct_vote(prompt, "The sea.", "It Is.", verify) == "tie"
    words = lambda p, c: float(len(c.split()))  # noqa: E731 - a graded verifier
    assert correct_vote(prompt, "one", "one two", words) == "b" and correct_vote(prompt, "a b", "c d", words) == "tie"
