"""The world's reference judge, and judging a judge against the verifier.

The world's LLM judge runs the real path: `transformers serve` loads the judge model, and
prefdata.collect.judging.PairwiseLLMJudge asks it over the OpenAI-compatible chat API, both orders per pair,
with the template `templates/judge/world-judge-v2.txt`. It is reference-guided judging (MT-Bench,
Zheng et al. 2023): the judge solves the problem itself ("347+058=" -> "0405") and the template's
parser names the response whose answer equals the judge's; neither or both -> undecided, routed to
humans, never a guessed label. `measure_served_judge` does that on held-out comparisons (the right
answer against the dropped carry) and `verdict_agreement` scores the verdicts against the verifier.
A callable judge `judge(prompt, response_a, response_b) -> "A" | "B" | None` is scored in-process
by `judge_agreement`; `model_judge` is the same reference judge in-process.

Why a reference judge. The first template (world-judge-v1, "347+058=A0405|B0395?" -> "A") asked a
~1M-parameter model to compare; measured on the default world, 500 held-out comparisons in both orders:

    the SFT model as judge                   replies are digits, never "A"/"B": unparseable 100%
    the SFT model after 800 steps on a       always "B": first-position rate 0.4%, position
      50/50 mix of SFT and judge data          consistency 0.4%, agreement with the verifier 0.2%

A model this small learns the answer format, not the comparison. Solving is what it can learn: the
world's judge (`WorldPaths.judge`) has the SFT model's shape and seed but trains longer on correct
problems only (`WorldConfig.judge_recipe()`), unlike the flawed SFT policy; its held-out exact
accuracy is in world.json (`judge.metrics.task_accuracy`). A real judge model replaces it by path
or endpoint, with a template of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from prefdata.world.tasks import arithmetic_problem, dropped_carry, verify

JUDGE_TEMPLATE_NAME = "world-judge-v2"  # reference-guided: the judge answers, the parser matches
JUDGE_MAX_TOKENS = 8  # a four-digit answer and <eos>, with room to spare
Judge = Callable[[str, str, str], "str | None"]


def model_judge(model_path: Path | str, template: str = JUDGE_TEMPLATE_NAME) -> Judge:
    """The reference judge in-process: a local causal LM answers the rendered template (greedy), and
    the template's parser names the matching response. Answers are cached per question."""
    from prefdata.collect.judging import Template
    from prefdata.models.chat import render_prompt, resolve
    from prefdata.models.loading import load_causal_lm, load_tokenizer
    from prefdata.world.model import generate

    tokenizer = load_tokenizer(model_path)
    model = load_causal_lm(model_path).eval()
    # the one chat rendering, as the served judge's LocalChat renders (a judge reads prompts only): the
    # template's text without its <bos>, which generate() adds again when it tokenizes
    rendering = resolve(tokenizer, "true", replies=False)
    spec = Template.load(template)
    replies: dict[str, str] = {}

    def judge(prompt: str, response_a: str, response_b: str) -> str | None:
        question = render_prompt(tokenizer, rendering, spec.messages(prompt, response_a, response_b))
        if question not in replies:
            replies[question] = generate(model, tokenizer, [question], max_new_tokens=JUDGE_MAX_TOKENS)[0]
        return spec.parse(replies[question], response_a, response_b)

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


def judge_comparisons(n: int, seed: int = 1) -> list[tuple[str, str, str]]:
    """n (prompt, a, b) carrying problems, the right answer against the dropped carry in a random
    order: the mistake the world's SFT data teaches, so the one a useful judge must catch."""
    import random

    rng, out = random.Random(seed), []
    while len(out) < n:
        ex = arithmetic_problem(rng)
        if ex.carry:
            a, b = ex.completion, dropped_carry(ex).completion
            out.append((ex.prompt, a, b) if rng.random() < 0.5 else (ex.prompt, b, a))
    return out


def verdict_agreement(items, verdicts, verifier=verify) -> dict:
    """How prefdata.collect.judging verdicts (label "a" | "b" | "tie" | None) fare against the verifier, over
    the items (PairToJudge) where it prefers exactly one side. Same keys as judge_agreement, with
    position consistency among pairs whose two orders both parsed, and the undecided share."""
    n = agree = decided = consistent = inconsistent = unparseable = 0
    for item, verdict in zip(items, verdicts, strict=True):
        a_ok, b_ok = verifier(item.prompt, item.response_a), verifier(item.prompt, item.response_b)
        if a_ok == b_ok:
            continue
        n += 1
        decided += verdict.label is not None
        agree += verdict.label == ("a" if a_ok else "b")
        consistent += verdict.reason == "consistent"
        inconsistent += verdict.reason == "position_inconsistent"
        unparseable += verdict.reason == "unparseable"
    if n == 0:
        raise ValueError("no comparison where the verifier prefers one side; nothing to agree with")
    return {
        "n": n,
        "agreement": agree / n,  # undecided counts against the judge: the share it settles right
        "agreement_decided": agree / decided if decided else None,
        "position_consistency": consistent / (consistent + inconsistent) if consistent + inconsistent else None,
        "undecided_rate": 1 - decided / n,
        "unparseable_rate": unparseable / n,
    }


def measure_served_judge(model_path: Path | str, n: int = 100, log_dir: Path | str = ".", concurrency: int = 4) -> dict:
    """Serve `model_path` with a real `transformers serve`, judge n held-out comparisons in both orders
    through the chat API, and score the verdicts against the verifier. The server is stopped by its pid."""
    import time

    from prefdata.collect.judging import PairToJudge, PairwiseLLMJudge
    from prefdata.collect.local_serve import TransformersServe

    model_path = Path(model_path).resolve() if Path(model_path).exists() else model_path  # the server resolves names itself
    items = [PairToJudge(*c) for c in judge_comparisons(n)]
    started = time.perf_counter()
    with TransformersServe(Path(log_dir) / "judge-serve.log") as server:
        judge = PairwiseLLMJudge(server.base_url, str(model_path), template=JUDGE_TEMPLATE_NAME,
                                 concurrency=concurrency, max_tokens=JUDGE_MAX_TOKENS, timeout=120)
        verdicts = judge.judge(items)
    stats = verdict_agreement(items, verdicts)
    report = judge.last_report
    return {**stats, "judge_model": str(model_path), "template": JUDGE_TEMPLATE_NAME, "errors": report.errors,
            "example_replies": [list(v.raw) for v in verdicts[:3]], "seconds": round(time.perf_counter() - started, 1)}
