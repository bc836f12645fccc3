"""Judging a judge against the verifier: agreement and position consistency.

A judge is any callable `judge(prompt, response_a, response_b) -> "A" | "B" | None` (None: the
reply could not be parsed). Each comparison is asked in both orders, as FastChat's two-order
judging does; a verdict that flips with the order is position-inconsistent, and counts as
undecided, never as a win for either side.

`model_judge` turns any causal LM on disk into such a judge with a one-line template,
"347+058=A0405|B0395?" -> "A". The world ships no judge of its own: `WorldPaths.judge` is the SFT
model, and its verdicts are all "undecided", routed to the verifier or to annotators. Measured on the
default world, 500 held-out comparisons (right answer vs. a wrong one, half of them the dropped
carry), each asked in both orders:

    the SFT model as judge                   replies are digits, never "A"/"B": unparseable 100%
    the SFT model after 800 steps (117 s)    always "B": first-position rate 0.4%, position
      on a 50/50 mix of SFT and judge data     consistency 0.4%, agreement with the verifier 0.2%
      with true labels

A ~1M-parameter model learns the answer format, not the comparison, within the world's budget
(the same as a 1M model on 20% judge data, which always said "A"). A real judge model replaces it
by path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from prefdata.world.tasks import verify

JUDGE_TEMPLATE = "{prompt}A{a}|B{b}?"
JUDGE_TEMPLATE_VERSION = "world-judge-1"
Judge = Callable[[str, str, str], "str | None"]


def judge_prompt(prompt: str, response_a: str, response_b: str) -> str:
    return JUDGE_TEMPLATE.format(prompt=prompt, a=response_a, b=response_b)


def parse_verdict(reply: str) -> str | None:
    """"A" or "B" when the reply's first non-blank character is one; otherwise None."""
    stripped = reply.strip()
    return stripped[0] if stripped[:1] in ("A", "B") else None


def model_judge(model_path: Path | str) -> Judge:
    """A judge backed by a local causal LM (greedy, one short reply per question)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prefdata.world.model import generate

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()

    def judge(prompt: str, response_a: str, response_b: str) -> str | None:
        reply = generate(model, tokenizer, [judge_prompt(prompt, response_a, response_b)], max_new_tokens=2)[0]
        return parse_verdict(reply)

    return judge


def judge_agreement(judge: Judge, comparisons: list[tuple[str, str, str]], verifier=verify) -> dict:
    """How a judge fares on (prompt, a, b) comparisons where the verifier prefers exactly one side.

    position_consistency  share of comparisons whose two orders name the same response
    agreement             share of comparisons whose consistent verdict is the verified side
                          (undecided counts against the judge: it is the share the judge settles right)
    agreement_decided     the same among consistent verdicts only
    first_position_rate   share of all replies that said "A": 0.5 for an unbiased judge
    unparseable_rate      share of all replies that were None
    """
    n = consistent = agree = said_a = unparseable = 0
    for prompt, a, b in comparisons:
        a_ok, b_ok = verifier(prompt, a), verifier(prompt, b)
        if a_ok == b_ok:
            continue  # the verifier has no preference to agree with
        n += 1
        forward, backward = judge(prompt, a, b), judge(prompt, b, a)
        for verdict in (forward, backward):
            said_a += verdict == "A"
            unparseable += verdict is None
        # Consistent: A then B (prefers a) or B then A (prefers b).
        if (forward, backward) in (("A", "B"), ("B", "A")):
            consistent += 1
            agree += (forward == "A") == a_ok
    if n == 0:
        raise ValueError("no comparison where the verifier prefers one side; nothing to agree with")
    return {
        "n": n,
        "position_consistency": consistent / n,
        "agreement": agree / n,
        "agreement_decided": agree / consistent if consistent else None,
        "first_position_rate": said_a / (2 * n),
        "unparseable_rate": unparseable / (2 * n),
    }
