"""The demo world's two skills, their verifiers, and the deliberately flawed SFT data.

Formats (one line each, no chat template, so a char-level model needs no special handling):

    arithmetic  prompt "347+058="    completion "0405"    2- or 3-digit operands, + or -;
                prompt "352-047="    completion "0305"    subtraction keeps a >= b (no negatives)
    reverse     prompt "rev:abcde="  completion "edcba"   3 to 6 lowercase letters

Arithmetic is fixed-width: operands zero-padded to three digits, answers to four, so each answer
digit sits at the same offset from the operand digits it depends on, for + and - alike. Measured
here on a 0.86M model (1,000 steps of 64): 3% held-out accuracy in the free-width format
"347+58=" -> "405", 57% (98% on problems without a units carry) zero-padded. A model this small
learns the units digit last, in a sudden jump; one width for both operations makes that jump come
sooner. The verifier compares numbers, not strings, so a real model that answers "405" scores.

The model ends a completion with its EOS token. A verifier reads the completion's first line (up to
a newline; EOS is stripped by decoding) and compares the first number (arithmetic) or the whole
stripped line (reverse) with the exact answer, so a real model that appends "\n..." still scores.

The flaw. Real SFT data carries systematic mistakes that more SFT only entrenches. Here, among
problems whose units column carries (addition) or borrows (subtraction), about 45% of them, a
`flaw_share` of the SFT examples drop that carry: the written answer is 10 too small (addition) or
10 too large (subtraction). With `flaw_share` > 0.5 the wrong answer is the *mode* of the data on
those prompts, so a model that fits its data well answers them wrong when greedy, yet still samples
the right answer now and then: exactly the gap that a verifier reward or preference pairs can close
and more SFT cannot.

Everything is a pure function of a seed: `random.Random` seeded with a string is stable across
processes and Python versions. Eval prompts are drawn first from their own stream; every other
stream skips them, so held-out prompts never leak into training.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from typing import Callable

ARITH_RE = re.compile(r"^(\d+)([+-])(\d+)=$")
REVERSE_RE = re.compile(r"^rev:([a-z]+)=$")
_FIRST_NUMBER = re.compile(r"-?\d+")
REVERSE_LENGTHS = (3, 6)


@dataclass(frozen=True)
class Example:
    prompt: str
    completion: str
    kind: str  # "arithmetic" | "reverse"
    carry: bool = False  # the units column carries or borrows (the flaw can only hit these)
    flawed: bool = False  # the completion is the dropped-carry answer, not the true one


def _operand(rng: random.Random) -> int:
    # Pick the digit count first, so 2-digit operands are as common as 3-digit ones.
    return rng.randint(10, 99) if rng.random() < 0.5 else rng.randint(100, 999)


def _answer(value: int) -> str:
    # Four digits for both operations (999+999 = 1998), so each answer digit sits at the same
    # offset from its operand digits whether the problem adds or subtracts.
    return f"{value:04d}"


def arithmetic_problem(rng: random.Random) -> Example:
    a, b, op = _operand(rng), _operand(rng), rng.choice("+-")
    if op == "-" and a < b:
        a, b = b, a
    answer = a + b if op == "+" else a - b
    carry = (a % 10 + b % 10 >= 10) if op == "+" else (a % 10 < b % 10)
    return Example(f"{a:03d}{op}{b:03d}=", _answer(answer), "arithmetic", carry=carry)


def dropped_carry(example: Example) -> Example:
    """The same problem answered with the units carry (borrow) dropped: off by exactly 10."""
    if example.kind != "arithmetic" or not example.carry:
        raise ValueError(f"only arithmetic problems with a units carry can drop it, got {example}")
    op = ARITH_RE.match(example.prompt).group(2)
    wrong = int(example.completion) + (-10 if op == "+" else 10)
    return Example(example.prompt, _answer(wrong), "arithmetic", carry=True, flawed=True)


def reverse_problem(rng: random.Random) -> Example:
    word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(*REVERSE_LENGTHS)))
    return Example(f"rev:{word}=", word[::-1], "reverse")


def _first_line(completion: str) -> str:
    return completion.split("\n", 1)[0]


def verify(prompt: str, completion: str) -> bool:
    """Exact-answer check for an arithmetic prompt: the completion's first number is the answer.

    Accepts any arithmetic prompt "<a>+<b>=" or "<a>-<b>=", padded or not.
    """
    m = ARITH_RE.match(prompt)
    if m is None:
        raise ValueError(f"not an arithmetic prompt: {prompt!r} (expected like '347+058=')")
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    found = _FIRST_NUMBER.search(_first_line(completion))
    return found is not None and int(found.group()) == (a + b if op == "+" else a - b)


def verify_reverse(prompt: str, completion: str) -> bool:
    """Exact check for a reverse prompt: the completion's first line, stripped, is the reversal."""
    m = REVERSE_RE.match(prompt)
    if m is None:
        raise ValueError(f"not a reverse prompt: {prompt!r} (expected like 'rev:abcde=')")
    return _first_line(completion).strip() == m.group(1)[::-1]


def _distinct(make: Callable[[random.Random], Example], rng: random.Random, n: int, exclude: set[str]) -> list[Example]:
    """n examples with distinct prompts, none of them in `exclude`."""
    seen, out = set(exclude), []
    while len(out) < n:
        ex = make(rng)
        if ex.prompt not in seen:
            seen.add(ex.prompt)
            out.append(ex)
    return out


def eval_examples(seed: int, n_task: int, n_general: int) -> tuple[list[Example], list[Example]]:
    """The fixed held-out sets (arithmetic, reverse), with true answers."""
    rng = random.Random(f"prefdata-world:{seed}:eval")
    return _distinct(arithmetic_problem, rng, n_task, set()), _distinct(reverse_problem, rng, n_general, set())


def heldout_prompts(seed: int, n_task: int, n_general: int) -> set[str]:
    task, general = eval_examples(seed, n_task, n_general)
    return {ex.prompt for ex in task + general}


def sft_examples(
    seed: int, n: int, general_share: float, flaw_share: float, exclude: set[str]
) -> list[Example]:
    """The flawed SFT mix: arithmetic (a `flaw_share` of carrying problems answered wrong) and reverse.

    Prompts may repeat across examples, as in real data; none is in `exclude` (the eval prompts).
    """
    rng = random.Random(f"prefdata-world:{seed}:sft")
    out = []
    while len(out) < n:
        ex = reverse_problem(rng) if rng.random() < general_share else arithmetic_problem(rng)
        if ex.prompt in exclude:
            continue
        # Drawn for every carrying problem, so the flawed set does not shift when flaw_share moves.
        if ex.carry and rng.random() < flaw_share:
            ex = dropped_carry(ex)
        out.append(ex)
    return out


def task_prompts(seed: int, n: int, exclude: set[str]) -> list[str]:
    """Fresh distinct arithmetic prompts for sampling candidates, preference pairs and RL."""
    rng = random.Random(f"prefdata-world:{seed}:prompts")
    return [ex.prompt for ex in _distinct(arithmetic_problem, rng, n, exclude)]
