"""Judges: one method, `judge(items: list[PairToJudge]) -> list[Verdict]`, one Verdict per item,
in order. A judge never crashes a batch and never invents a verdict: a failure, an unparseable
reply or position-inconsistent replies give an undecided Verdict (label None) with its reason and
the raw replies kept, and such pairs route to humans (prefdata.collect.routing).

    PairwiseLLMJudge(base_url, model)  an LLM over an OpenAI-compatible chat API, or in this process
                                       (base_url None: a local model path, LocalChat); every pair is judged
                                       in both orders (A/B, then swapped), FastChat-style (Zheng et al.
                                       2023, "Judging LLM-as-a-judge"): only agreeing orders give a label
    RewardModelJudge(path)             a sequence-classification reward model scores both sides
                                       (prompt + response + eos, prefdata/models/reward.py)
    RuleJudge(verifier)                a verifier (prompt, completion) -> bool | float decides

Both scoring judges turn their two scores into a verdict by the one rule `check --scorer` and the
trainers use too (prefdata.base.verdicts): the higher side wins; equal scores, NaN and a scorer's
error leave the pair undecided (never a tie, never a preference).

Every Verdict names its judge, model and (LLM) template name, version and sha256; JudgeReport
summarises a run: counts and the position-consistency rate.

A judge spec (`llm:`, `rm:`, `rule:`, or another registered backend's KIND:TARGET) becomes one of these
through its backend (prefdata.base.specs; prefdata's own: prefdata/gate/backends.py): the collect flow,
`check --scorer` and the commands never name these classes by a spec's kind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from prefdata.base.errors import UnusableInput
from prefdata.base.verdicts import Decision, attempt, decide
from prefdata.data.records import pair_id as make_pair_id

log = logging.getLogger(__name__)
TEMPLATES = Path(__file__).parent / "templates" / "judge"
_MARKER = re.compile(r"\[\[(A|B|tie)\]\]")
_PLACEHOLDER = re.compile(r"\{(prompt|response_a|response_b)\}")


@dataclass(frozen=True)
class PairToJudge:
    prompt: str
    response_a: str
    response_b: str
    pair_id: str = ""            # default: records.pair_id(prompt, response_a, response_b)
    category: str | None = None  # routing sends some categories to humans whatever the judge says
    # a conversation's turns (records.messages_json); `prompt` is their text, which is what a judge reads:
    # they ride along to the human queue, where Argilla shows them as a chat
    prompt_messages: str | None = None

    def __post_init__(self):
        if not self.pair_id:
            object.__setattr__(self, "pair_id", make_pair_id(self.prompt, self.response_a, self.response_b))


@dataclass(frozen=True)
class Verdict:
    pair_id: str
    label: str | None          # "a" | "b" | "tie"; None = undecided, never a preference
    confidence: float | None   # of the label; None when undecided
    reason: str                # consistent | position_inconsistent | unparseable | no_match | error | margin | verifier | both_pass ...
    judge: str                 # "llm-pairwise" | "reward-model" | "rule"
    judge_model: str
    template: str | None = None
    template_version: str | None = None
    template_sha256: str | None = None
    votes: tuple = ()          # LLM: the vote of each order, mapped back to the original a/b sides
    raw: tuple = ()            # LLM: the raw reply of each order (None where the call failed)
    scores: tuple = ()         # reward model / rule: (score_a, score_b)
    error: str | None = None
    attempts: int = 0          # LLM: HTTP attempts made for both orders

    @property
    def undecided(self) -> bool:
        return self.label is None

    def as_row(self) -> dict:
        return {**asdict(self), "votes": list(self.votes), "raw": list(self.raw), "scores": list(self.scores)}


class Judge(Protocol):
    def judge(self, items: list[PairToJudge]) -> list[Verdict]: ...


@dataclass(frozen=True)
class JudgeReport:
    n: int
    decided: int
    undecided: int
    consistent: int            # LLM: both orders parsed and agreed
    inconsistent: int          # LLM: both orders parsed and disagreed (position bias)
    unparseable: int
    errors: int
    consistency_rate: float | None  # consistent / (consistent + inconsistent); None when no pair had both orders parsed
    judge_model: str | None = None
    template: str | None = None
    template_version: str | None = None
    seconds: float | None = None
    first_position_rate: float | None = None  # LLM: share of parsed A/B replies naming the first-shown response

    @classmethod
    def from_verdicts(cls, verdicts: list[Verdict], seconds: float | None = None) -> "JudgeReport":
        count = lambda reason: sum(v.reason == reason for v in verdicts)  # noqa: E731
        consistent, inconsistent = count("consistent"), count("position_inconsistent")
        first = verdicts[0] if verdicts else None
        # votes are mapped back to the original sides: the first order said "A" for "a", the swapped one for "b".
        replies = [(vote, shown_first) for v in verdicts if len(v.votes) == 2
                   for vote, shown_first in zip(v.votes, ("a", "b")) if vote in ("a", "b")]
        said_first = sum(vote == shown_first for vote, shown_first in replies)
        return cls(len(verdicts), sum(not v.undecided for v in verdicts), sum(v.undecided for v in verdicts),
                   consistent, inconsistent, count("unparseable"), count("error"),
                   consistent / (consistent + inconsistent) if consistent + inconsistent else None,
                   first and first.judge_model, first and first.template, first and first.template_version, seconds,
                   said_first / len(replies) if replies else None)

    def summary(self) -> str:
        rate = "n/a" if self.consistency_rate is None else f"{self.consistency_rate:.3f}"
        return (f"{self.n} pairs: {self.decided} decided, {self.undecided} undecided ({self.inconsistent} position-"
                f"inconsistent, {self.unparseable} unparseable, {self.errors} errors); position consistency {rate}")


# -- the LLM judge -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """A judge prompt file, `templates/judge/NAME-vN.txt`:

        === system ===
        ...
        === user ===
        ... {prompt} ... {response_a} ... {response_b} ...
        === verdict ===            (optional; default: the [[A]] / [[B]] / [[tie]] markers)
        a regular expression whose one group captures A, B or tie
        or: reference: REGEX       reference-guided (MT-Bench): the judge answers the problem itself;
                                   REGEX's group captures its answer, and the verdict names the one
                                   response whose own REGEX capture equals it; neither or both: None

    The verdict pattern lives with the prompt because the prompt is what asks for that format.
    """

    name: str
    version: str
    sha256: str
    system: str
    user: str
    verdict: re.Pattern = _MARKER
    reference: bool = False  # the verdict pattern captures the judge's own answer, not A/B

    @classmethod
    def load(cls, name: str) -> "Template":
        path = TEMPLATES / f"{name}.txt"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in TEMPLATES.glob("*.txt")))
            raise UnusableInput(f"judge template {name!r} not found in {TEMPLATES}: use one of {known}")
        text = path.read_text(encoding="utf-8")
        found = re.fullmatch(r"=== system ===\n(.*?)\n=== user ===\n(.*?)(?:\n=== verdict ===\n(.*?)\n?)?", text, re.S)
        version = re.search(r"-v(\d+)$", name)
        if not found or not version:
            raise UnusableInput(f"{path}: a judge template is named NAME-vN and holds '=== system ===' then '=== user ==='")
        verdict, reference = _MARKER, False
        if found.group(3) is not None:
            source = found.group(3).strip()
            if source.startswith("reference:"):
                reference, source = True, source[len("reference:"):].strip()
            try:
                verdict = re.compile(source)
            except re.error as exc:
                raise UnusableInput(f"{path}: the verdict pattern does not compile ({exc}); fix the '=== verdict ===' section") from None
            if verdict.groups != 1:
                raise UnusableInput(f"{path}: the verdict pattern needs exactly one group capturing A, B or tie"
                                    " (or, after 'reference:', the answer)")
        return cls(name, version.group(1), hashlib.sha256(text.encode()).hexdigest()[:16], found.group(1), found.group(2),
                   verdict, reference)

    def answer(self, text: str | None) -> str | None:
        """Reference templates: the answer the pattern captures in a reply or a response, or None."""
        found = self.verdict.search(text or "")
        return found.group(1) if found else None

    def parse(self, reply: str | None, first: str | None = None, second: str | None = None) -> str | None:
        """"A" | "B" | "tie" | None for a reply to messages(prompt, first, second)."""
        if not self.reference:
            return parse_verdict(reply, self.verdict)
        answer = self.answer(reply)
        if answer is None:
            return None
        matches = [side for side, response in (("A", first), ("B", second)) if self.answer(response) == answer]
        return matches[0] if len(matches) == 1 else None  # neither or both match: no verdict, never a guess

    def messages(self, prompt: str, first: str, second: str) -> list[dict]:
        # One pass over the template, so a response containing "{response_b}" is never filled in again.
        values = {"prompt": prompt, "response_a": first, "response_b": second}
        user = _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.user)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def parse_verdict(reply: str | None, pattern: re.Pattern = _MARKER) -> str | None:
    """"A" | "B" | "tie" when the reply holds exactly one kind of verdict marker ([[A]], [[B]], [[tie]]
    by default); None when it holds none or several kinds (a reply naming both is no verdict)."""
    kinds = set(pattern.findall(reply or ""))
    return kinds.pop() if len(kinds) == 1 and kinds <= {"A", "B", "tie"} else None


@dataclass(frozen=True)
class _Call:
    reply: str | None
    error: str | None
    attempts: int


class LocalChat:
    """Greedy chat replies in this process: an LLM judge without a server, served by one of
    sampling's in-process backends (prefdata.collect.sampling: `engine` "transformers", the
    TransformersSampler, or "vllm", the VLLMSampler) built as a judge's. Each conversation is rendered
    by the one chat rendering (prefdata.models.chat, its chat template on; a judge only reads prompts,
    so a template that drops the assistant's turn, as the demo world's judge's, serves) and tokenised
    as `chat.encode` does, one BOS whether the template writes it or the tokenizer adds it;
    `batch_size` conversations share one generate. A model without a chat template is refused in
    one line: a judge must be asked as a chat model is."""

    ENGINES = ("transformers", "vllm")

    def __init__(self, model_path: str, max_tokens: int = 512, batch_size: int = 8, engine: str = "transformers"):
        from prefdata.collect.sampling import TransformersSampler, VLLMSampler

        if engine not in self.ENGINES:
            raise ValueError(f"LocalChat: engine={engine!r} is not one of {', '.join(self.ENGINES)}")
        self.max_tokens, self.batch_size = max_tokens, batch_size
        if engine == "vllm":
            self.backend = VLLMSampler(model_path, judge=True)
        else:
            self.backend = TransformersSampler(model_path, batch_size=batch_size, judge=True)
        # one batch at a time: torch spreads one generate over the cores, and a fast tokenizer shared
        # by threads fails ("Already borrowed") when two calls pad at once
        self._lock = threading.Lock()

    @property
    def tokenizer(self):
        return self.backend.tokenizer

    @property
    def rendering(self):
        return self.backend.rendering

    @property
    def model(self):
        return getattr(self.backend, "model", None)  # the transformers backend's; vLLM's engine holds its own

    def replies(self, conversations: list[list[dict]]) -> list[_Call]:
        out: list[_Call] = []
        for start in range(0, len(conversations), self.batch_size):
            batch = conversations[start:start + self.batch_size]
            try:
                with self._lock:
                    out += [_Call(text, None, 1) for text in self.backend.greedy(batch, self.max_tokens)]
            except Exception as error:  # noqa: BLE001 - a failed batch is its pairs' problem, never a crash
                out += [_Call(None, f"{type(error).__name__}: {error}", 1) for _ in batch]
        return out


class PairwiseLLMJudge:
    """An LLM judge, every pair asked in both orders. `base_url`: an OpenAI-compatible chat API
    (`concurrency` requests in flight, retries with backoff); None: the model at path `model` runs in
    this process (LocalChat), batched."""

    name = "llm-pairwise"

    def __init__(self, base_url: str | None, model: str, template: str = "pairwise-v1", concurrency: int = 8,
                 timeout: float = 60.0, max_retries: int = 4, backoff_base: float = 0.5, backoff_max: float = 8.0,
                 max_tokens: int = 512, api_key_env: str | None = None):
        from prefdata.collect.openai_http import RetryPolicy, make_client

        if concurrency < 1:
            raise ValueError(f"PairwiseLLMJudge: concurrency={concurrency} must be >= 1")
        self.model, self.concurrency, self.max_tokens = model, concurrency, max_tokens
        self.template = Template.load(template)
        self.retry = RetryPolicy(max_retries, backoff_base, backoff_max)
        self._local = LocalChat(model, max_tokens) if base_url is None else None
        self._client = make_client(base_url, api_key_env, timeout) if base_url is not None else None
        self.last_report: JudgeReport | None = None

    def _call(self, messages: list[dict]) -> _Call:
        from prefdata.collect.openai_http import RetriesExhausted, call_with_retries

        # temperature 0: the judge's verdict should depend on the pair, not on the sampler's luck.
        request = lambda: self._client.chat.completions.create(  # noqa: E731
            model=self.model, messages=messages, temperature=0.0, max_tokens=self.max_tokens)
        try:
            response, attempts = call_with_retries(request, self.retry)
            return _Call(response.choices[0].message.content or "", None, attempts)
        except RetriesExhausted as failure:
            return _Call(None, str(failure), failure.attempts)
        except Exception as error:  # noqa: BLE001 - a malformed response is this pair's problem, not the batch's
            return _Call(None, f"{type(error).__name__}: {error}", 1)

    def _verdict(self, item: PairToJudge, ab: _Call, ba: _Call) -> Verdict:
        swap = {"A": "b", "B": "a", "tie": "tie", None: None}  # in the swapped order, "A" is response_b
        t = self.template
        first = t.parse(ab.reply, item.response_a, item.response_b)
        second = t.parse(ba.reply, item.response_b, item.response_a)
        votes = ({"A": "a", "B": "b", "tie": "tie", None: None}[first], swap[second])
        if ab.error or ba.error:
            label, reason = None, "error"
        elif None in votes:
            # A reference judge that answered, but not as exactly one response did: no_match, not garbage.
            answered = t.reference and None not in (t.answer(ab.reply), t.answer(ba.reply))
            label, reason = None, "no_match" if answered else "unparseable"
        elif votes[0] == votes[1]:
            label, reason = votes[0], "consistent"
        else:
            label, reason = None, "position_inconsistent"
        error = "; ".join(f"{order}: {c.error}" for order, c in (("a/b", ab), ("b/a", ba)) if c.error) or None
        # Two agreeing votes are all the evidence there is: a chat API gives no calibrated probability.
        return Verdict(item.pair_id, label, 1.0 if label is not None else None, reason, self.name, self.model,
                       t.name, t.version, t.sha256, votes, (ab.reply, ba.reply), (), error, ab.attempts + ba.attempts)

    def _ask(self, questions: list[list[dict]]) -> list[_Call]:
        if self._local is not None:
            return self._local.replies(questions)
        with ThreadPoolExecutor(self.concurrency) as pool:  # bounded: at most `concurrency` requests in flight
            return list(pool.map(self._call, questions))

    def judge(self, items: list[PairToJudge]) -> list[Verdict]:
        start = time.perf_counter()
        # At temperature 0 the same messages get the same reply: ask each distinct question once. A
        # reference template shows only the problem, so both orders and every pair of one prompt
        # share one question; a comparing template's questions are all distinct anyway.
        questions: dict[str, list[dict]] = {}
        ab, ba = [], []
        for i in items:
            for order, (x, y) in ((ab, (i.response_a, i.response_b)), (ba, (i.response_b, i.response_a))):
                messages = self.template.messages(i.prompt, x, y)
                key = json.dumps(messages, sort_keys=True)
                questions.setdefault(key, messages)
                order.append(key)
        replies = dict(zip(questions, self._ask(list(questions.values()))))
        verdicts = [self._verdict(item, replies[x], replies[y]) for item, x, y in zip(items, ab, ba)]
        self.last_report = JudgeReport.from_verdicts(verdicts, time.perf_counter() - start)
        log.info("judge %s (%s v%s): %s", self.model, self.template.name, self.template.version, self.last_report.summary())
        return verdicts


# -- reward model and rule -----------------------------------------------------------------------


def _by_scores(item: PairToJudge, decision: Decision, judge: str, model: str) -> Verdict:
    """A judge's Verdict of a pair's two scores, decided by the one rule (prefdata.base.verdicts)."""
    return Verdict(item.pair_id, decision.label, decision.confidence, decision.reason, judge, model,
                   scores=decision.scores, error=decision.error)


class RewardModelJudge:
    """Both sides scored by a reward model; the higher wins (confidence sigmoid(|margin|)), scores within
    `tie_margin` of each other (equal, by default) or NaN leave the pair undecided (prefdata.base.verdicts)."""

    name = "reward-model"

    def __init__(self, model_path: str | Path, batch_size: int = 16, tie_margin: float = 0.0, device: str = "cpu"):
        from prefdata.models.reward import RewardModelScorer

        self.model_path, self.batch_size, self.tie_margin = str(model_path), batch_size, tie_margin
        # prompt + response + eos, as TRL's RewardTrainer trained it (prefdata/models/reward.py)
        self.scorer = RewardModelScorer(model_path, device=device, batch_size=2 * batch_size)
        self.last_report: JudgeReport | None = None

    def judge(self, items: list[PairToJudge]) -> list[Verdict]:
        start, verdicts = time.perf_counter(), []
        for lo in range(0, len(items), self.batch_size):
            chunk = items[lo:lo + self.batch_size]
            try:
                prompts = [i.prompt for i in chunk]
                scores = self.scorer(prompts + prompts, [i.response_a for i in chunk] + [i.response_b for i in chunk])
                # Bradley-Terry: sigmoid(|margin|) is the modelled probability that the higher-scored side wins
                verdicts += [_by_scores(item, decide(scores[k], scores[len(chunk) + k], self.tie_margin, "margin",
                                                     bradley_terry=True), self.name, self.model_path)
                             for k, item in enumerate(chunk)]
            except Exception as error:  # noqa: BLE001 - one bad batch leaves its pairs undecided, not the run dead
                verdicts += [_by_scores(i, decide(error, error), self.name, self.model_path) for i in chunk]
        self.last_report = JudgeReport.from_verdicts(verdicts, time.perf_counter() - start)
        return verdicts


@dataclass
class RuleJudge:
    """A verifier decides, by the one rule of two scores (prefdata.base.verdicts, as `check --scorer
    rule:NAME` decides): the side it passes (bool) or scores higher (float) wins with confidence 1.0 (a
    rule is not uncertain). When both sides pass, both fail or score the same, the rule cannot order
    them: undecided ("both_pass", "both_fail", "equal_scores"). A verifier that raises, or returns NaN,
    an infinity or what is not a number, leaves that pair undecided ("error", the error kept)."""

    verifier: Callable[[str, str], bool | float]
    rule_name: str | None = None
    last_report: JudgeReport | None = field(default=None, init=False)
    name = "rule"

    def _one(self, item: PairToJudge, model: str) -> Verdict:
        decision = decide(attempt(self.verifier, item.prompt, item.response_a),
                          attempt(self.verifier, item.prompt, item.response_b), reason="verifier")
        return _by_scores(item, decision, self.name, model)

    def judge(self, items: list[PairToJudge]) -> list[Verdict]:
        model = f"rule:{self.rule_name or getattr(self.verifier, '__qualname__', 'verifier')}"
        start = time.perf_counter()
        verdicts = [self._one(item, model) for item in items]
        self.last_report = JudgeReport.from_verdicts(verdicts, time.perf_counter() - start)
        return verdicts
