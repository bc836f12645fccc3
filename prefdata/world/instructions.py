"""The chat demo's data: format constraints, the prompts that carry them, and their verifier.

The chat demo (`prefdata demo --world chat`) samples several replies per prompt from
SmolLM2-135M-Instruct; `verify(prompt, completion)` (the judge `rule:prefdata.world.instructions:verify`)
keeps the pairs where exactly one reply follows the prompt's constraint.

A prompt is a short base question about a topic plus one constraint's instruction, e.g.
"Describe the sea. Answer in at most 12 words.". Topics are split into disjoint train and held-out
sets, so held-out prompts ask about things training never saw. `verify` sees only the prompt and
the completion: it recovers the constraints by matching the instruction phrases, with regexes built
from the very templates the generator writes (`Kind.templates`), so the two cannot drift apart, and
a reply follows when it follows them all.

A second train set, `ifeval_style` (the chat demo's `prompt_set`), is shaped like IFEval's prompts:
a writing task ("Write a poem about the sea.") with one or two constraints, each in any of its
wordings, drawn among the kinds IFEval scores ("repeat the request", a title, a postscript... among
them); the held-out prompts are the same for both sets.

Where a kind overlaps one of IFEval's instruction types (`ifeval_id`), its verifier calls that
checker from the `if-verifiable` library (the optional extra `prefdata[chat]`, imported only when a
verifier runs). Two kinds apply only the case test of their IFEval checker (see `_all_lowercase`).
Checkers that need NLTK's punkt data (sentence counts) are not used: it cannot be downloaded here.

`python -m prefdata.world.instructions` rewrites the shipped files in chat_data/ (train, IFEval-style
and held-out prompts, the general-skill facts of facts.py and the general-skill set of general.py);
tests/test_instructions.py checks that they equal what the code generates now.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

from prefdata.base.errors import UnusableInput
from prefdata.world.facts import fact_rows
from prefdata.world.general import general_rows

CHAT_DATA = Path(__file__).parent / "chat_data"
SEED = "prefdata-chat-prompts"
HELDOUT_TOPICS = 30  # of TOPICS; the rest are train topics

# ---------------------------------------------------------------------------------------------
# Checks. Each takes the response and the constraint's parameters.


def _ifeval(instruction_id: str, response: str, **kwargs) -> bool:
    """IFEval's own checker for `instruction_id`, built with `kwargs`, applied to the response."""
    try:
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    except ImportError as error:
        raise UnusableInput("the chat demo's verifier needs if-verifiable: pip install 'prefdata[chat]'") from error
    checker = INSTRUCTION_DICT[instruction_id](instruction_id)
    checker.build_description(**kwargs)
    return bool(checker.check_following(response))


# IFEval's change_case checkers also require langdetect to call the reply English. On short replies
# that test is wrong and random (measured: "apple", "grass is green." and "yes" are never English,
# "a banana is yellow." only in 1 of 5 calls), so two replies that both follow the constraint would
# be ordered by chance. These two kinds apply the checkers' case test alone (str.islower/isupper).
def _all_lowercase(response: str, params: dict) -> bool:
    return response.islower()


def _all_capitals(response: str, params: dict) -> bool:
    return response.isupper()


def _numbered_list(response: str, params: dict) -> bool:
    """Lines "1. ...", "2. ..." (or "1) ...") numbered 1 to n in order, and no other numbered line."""
    numbers = [int(n) for n in re.findall(r"^\s*(\d+)[.)]\s+\S", response, flags=re.MULTILINE)]
    return numbers == list(range(1, params["n"] + 1))


def _one_word(response: str, params: dict) -> bool:
    # IFEval counts words as runs of \w; "one word" is fewer than 2 and at least 1
    return (_ifeval("length_constraints:number_words", response, num_words=2, relation="less than")
            and _ifeval("length_constraints:number_words", response, num_words=1, relation="at least"))


def _yes_or_no(response: str, params: dict) -> bool:
    return re.fullmatch(r"\W*(yes|no)\W*", response, flags=re.IGNORECASE) is not None


def _no_comma(response: str, params: dict) -> bool:
    return _ifeval("punctuation:no_comma", response)


def _ends_with(param: str) -> Callable[[str, dict], bool]:
    """The end check of a kind whose ending (a word, a phrase) is its parameter `param`."""
    return lambda response, params: _ifeval("startend:end_checker", response, end_phrase=params[param])


def _in_double_quotes(response: str, params: dict) -> bool:
    return _ifeval("startend:quotation", response)


def _at_most_words(response: str, params: dict) -> bool:
    return _ifeval("length_constraints:number_words", response, num_words=params["n"] + 1, relation="less than")


def _starts_with(response: str, params: dict) -> bool:
    # IFEval's ConstrainedStartChecker is not in its registry and accepts the word at the start of
    # any line, as a prefix ("Sure" in "Surely"): the first whole word of the reply is compared here.
    first = re.match(r"\W*(\w+(?:['-]\w+)*)", response)
    return first is not None and first.group(1).lower() == params["word"].lower()


def _bullets(response: str, params: dict) -> bool:
    return _ifeval("detectable_format:number_bullet_lists", response, num_bullets=params["n"])


def _includes_word(response: str, params: dict) -> bool:
    return _ifeval("keywords:existence", response, keywords=[params["word"]])


def _avoids_word(response: str, params: dict) -> bool:
    return _ifeval("keywords:forbidden_words", response, forbidden_words=[params["word"]])


def _repeats_request(response: str, params: dict) -> bool:
    return _ifeval("combination:repeat_prompt", response, prompt_to_repeat=params["request"])


def _titled(response: str, params: dict) -> bool:
    return _ifeval("detectable_format:title", response)


def _highlighted(response: str, params: dict) -> bool:
    return _ifeval("detectable_format:number_highlighted_sections", response, num_highlights=params["n"])


def _with_postscript(response: str, params: dict) -> bool:
    return _ifeval("detectable_content:postscript", response, postscript_marker=params["marker"])


def _with_placeholders(response: str, params: dict) -> bool:
    return _ifeval("detectable_content:number_placeholders", response, num_placeholders=params["n"])


# ---------------------------------------------------------------------------------------------
# Repairs: a reply edited by a rule so that it follows its constraint. Where the base model never
# follows a kind (quoting its whole answer), none of its candidates does, the verifier makes no pair
# and nothing is learnt; a repaired copy of a candidate differs from it in the constraint alone
# (the demo's `repair` option; bench/RESULTS.md, "Repaired replies"). A case repair gives the same
# text under the project's one text identity (pair ids fold case), so it takes its source's place
# among the candidates (prefdata.collect.pairing.with_repair) and is paired with the others.


def _quoted(response: str, params: dict) -> str:
    return f'"{response.strip().strip(chr(34)).strip()}"'


def _lowercased(response: str, params: dict) -> str:
    return response.lower()


def _capitalised(response: str, params: dict) -> str:
    return response.upper()


def _comma_free(response: str, params: dict) -> str:
    return response.replace(",", "")


def _ended_with(param: str) -> Callable[[str, dict], str]:
    return lambda response, params: f"{response.rstrip()} {params[param]}"


def _request_first(response: str, params: dict) -> str:
    return f"{params['request']}\n\n{response.strip()}"


_SENTENCE = re.compile(r"[^\W_][^.!?\n*]*[.!?]*")  # a run of text up to its sentence end, within a line


def _bulleted(response: str, params: dict) -> str:
    """The reply's sentences (its words, if it has fewer sentences than bullets) in `n` bullets, in order."""
    parts = [m.group(0).strip() for m in _SENTENCE.finditer(response)]
    if len(parts) < params["n"]:
        parts = response.replace("*", " ").split()
    if not parts:  # nothing to list: left as it is, so the repair fails rather than invent a reply
        return response
    per = -(-len(parts) // params["n"])  # ceil: the last bullet takes the rest
    return "\n".join(f"* {' '.join(parts[i:i + per])}" for i in range(0, len(parts), per))


def _title_added(response: str, params: dict) -> str:
    words = re.findall(r"[^\W_]+", response)[:4]
    return f"<<{' '.join(w.capitalize() for w in words) or 'Untitled'}>>\n\n{response.strip()}"


def _highlights_added(response: str, params: dict) -> str:
    """The reply with its first `n` sentences in *asterisks* (IFEval's highlighted sections)."""
    def wrap(found: re.Match) -> str:
        text = found.group(0)
        return f"*{text.rstrip()}*{text[len(text.rstrip()):]}"

    return _SENTENCE.sub(wrap, response, count=params["n"])


def _postscript_added(response: str, params: dict) -> str:
    return f"{response.rstrip()}\n\n{params['marker']} I hope you enjoyed this."


PLACEHOLDERS = ("name", "place", "date")


def _placeholders_added(response: str, params: dict) -> str:
    return f"{response.rstrip()}\n\n{' '.join(f'[{PLACEHOLDERS[i % 3]}]' for i in range(params['n']))}"


# Where a prompt carries several constraints, their repairs run in this order (any other kind first):
# the bullets rewrite the body before anything marks it, an end word goes after the postscript and
# inside the quotes, and the case edits come last, so nothing written after them (the end word, the
# repeated request) escapes them.
REPAIR_ORDER = ("bullets", "highlights", "title", "placeholders", "postscript", "no_comma", "end_with", "end_phrase",
                "double_quotes", "repeat_request", "lowercase", "capitals")


def repair_rank(kind_id: str) -> int:
    """Where a kind's repair runs among a prompt's (REPAIR_ORDER; any other kind first)."""
    return REPAIR_ORDER.index(kind_id) if kind_id in REPAIR_ORDER else -1


# ---------------------------------------------------------------------------------------------
# Kinds of constraint, and one constraint (a kind with its parameters).

OPEN, SHORT, YES_NO = "open", "short", "yes/no"  # the shapes of base question (QUESTIONS)


@dataclass(frozen=True)
class Kind:
    """A kind of constraint: its instruction template, the parameter values the generator draws
    from, the question shapes it suits, the IFEval instruction type it overlaps (or None), its
    check and, where a rule can edit any reply into one that follows, that repair. A str parameter
    is written in single quotes in the template (any value parses) or bare, as IFEval writes "P.P.S"
    (only its choices parse); an int bare. `wordings` are other phrasings of the same instruction
    (the IFEval-style prompts draw among all of them; the demo's own prompts use `template`). A kind
    `with_request` refers to the prompt before its instruction (IFEval's "repeat the request"): its
    parameter "request"."""

    id: str
    template: str
    check: Callable[[str, dict], bool]
    shapes: tuple[str, ...]
    ifeval_id: str | None = None
    choices: dict[str, tuple] = field(default_factory=dict)
    repair: Callable[[str, dict], str] | None = None
    wordings: tuple[str, ...] = ()
    with_request: bool = False

    @property
    def templates(self) -> tuple[str, ...]:
        return (self.template, *self.wordings)

    @cached_property
    def patterns(self) -> tuple[re.Pattern, ...]:
        """Each template as a regex with one named group per parameter."""
        compiled = []
        for template in self.templates:
            parts = []
            for literal, name, _, _ in string.Formatter().parse(template):
                parts.append(re.escape(literal))
                if name is not None:
                    if isinstance(self.choices[name][0], int):
                        parts.append(rf"(?P<{name}>\d+)")
                    elif literal.endswith("'"):
                        parts.append(rf"(?P<{name}>[^'\n]+)")
                    else:  # a bare str parameter parses as one of its choices only
                        parts.append(rf"(?P<{name}>{'|'.join(map(re.escape, self.choices[name]))})")
            compiled.append(re.compile("".join(parts)))
        return tuple(compiled)

    def find(self, prompt: str) -> Constraint | None:
        """This kind's constraint as written in the prompt (in whichever wording), or None."""
        for wording, pattern in enumerate(self.patterns):
            found = pattern.search(prompt)
            if found is None:
                continue
            params = {name: int(value) if isinstance(self.choices[name][0], int) else value
                      for name, value in found.groupdict().items()}
            if self.with_request:
                params["request"] = prompt[:found.start()].strip()
            return Constraint(self, params, wording, found.span())
        return None


# `wordings` are phrased the way IFEval phrases its instructions (for case, quotes, commas and
# "repeat the request" the first is its checker's own description), so that a model taught on them
# meets IFEval's phrasing; the prompts they go in are the project's own (ifeval_style_rows).
KINDS: tuple[Kind, ...] = (
    Kind("lowercase", "Write your whole answer in lowercase letters only.", _all_lowercase,
         (OPEN, SHORT, YES_NO), "change_case:english_lowercase", repair=_lowercased,
         wordings=("Your entire response should be in English, and in all lowercase letters. No capital letters are "
                   "allowed.", "Do not use any capital letters in your response.",
                   "Make sure your whole reply is in lower case, with no capital letters whatsoever.")),
    Kind("capitals", "Write your whole answer in capital letters only.", _all_capitals,
         (OPEN, SHORT, YES_NO), "change_case:english_capital", repair=_capitalised,
         wordings=("Your entire response should be in English, and in all capital letters.",
                   "Write your entire reply in uppercase letters.", "Use only capital letters in your response.")),
    Kind("numbered_list", "Answer with a numbered list of exactly {n} items.", _numbered_list,
         (OPEN,), None, {"n": (2, 3, 4)}, wordings=("Format your answer as a numbered list of exactly {n} items.",)),
    Kind("one_word", "Answer with one word only.", _one_word, (SHORT, YES_NO), "length_constraints:number_words"),
    Kind("yes_or_no", "Answer only yes or no.", _yes_or_no, (YES_NO,), None),
    Kind("no_comma", "Do not use any commas in your answer.", _no_comma, (OPEN, SHORT, YES_NO), "punctuation:no_comma",
         repair=_comma_free,
         wordings=("In your entire response, refrain from the use of any commas.",
                   "Do not include any commas in your response.", "Avoid commas anywhere in your reply.")),
    Kind("end_with", "End your answer with the word '{word}', with nothing after it.", _ends_with("word"),
         (OPEN, SHORT, YES_NO), "startend:end_checker", {"word": ("done", "thanks", "okay", "goodbye", "indeed")},
         repair=_ended_with("word"),
         wordings=("Finish your response with the exact word '{word}'. No other words should follow it.",
                   "The very last word of your reply must be '{word}'.")),
    Kind("double_quotes", "Wrap your whole answer in double quotes.", _in_double_quotes,
         (OPEN, SHORT, YES_NO), "startend:quotation", repair=_quoted,
         wordings=("Wrap your entire response with double quotation marks.",
                   "Put your whole reply inside double quotes.", "Enclose your entire answer in double quotation marks.")),
    Kind("max_words", "Answer in at most {n} words.", _at_most_words, (OPEN, SHORT),
         "length_constraints:number_words", {"n": (5, 8, 10, 12, 15)},
         wordings=("Your response should contain at most {n} words.", "Answer with no more than {n} words.")),
    Kind("start_with", "Start your answer with the word '{word}'.", _starts_with, (OPEN, SHORT, YES_NO), None,
         {"word": ("Sure", "Well", "Okay", "Indeed", "So")}, wordings=("Begin your reply with the word '{word}'.",)),
    Kind("bullets", "Answer with exactly {n} bullet points, each on its own line starting with '* '.", _bullets,
         (OPEN,), "detectable_format:number_bullet_lists", {"n": (2, 3, 4)}, repair=_bulleted,
         wordings=("Your answer must contain exactly {n} bullet points. Use the markdown bullet points such as: "
                   "* This is a point.",)),
    Kind("include_word", "Use the word '{word}' in your answer.", _includes_word, (OPEN, SHORT),
         "keywords:existence", {"word": ("happy", "today", "friend", "simple", "bright", "always")},
         wordings=("Include the keyword '{word}' in your response.", "Make sure the word '{word}' appears in your reply.")),
    Kind("avoid_word", "Do not use the word '{word}' in your answer.", _avoids_word, (OPEN, SHORT, YES_NO),
         "keywords:forbidden_words", {"word": ("the", "is", "and", "very", "it")},
         wordings=("Do not include the keyword '{word}' in the response.", "Never use the word '{word}' in your reply.")),
)
# Kinds only the IFEval-style prompts carry (the demo's own prompts stay as shipped). "Repeat the
# request" always comes last in a prompt: the request is everything before it.
IFEVAL_STYLE_KINDS: tuple[Kind, ...] = (
    # the first two phrases are the ones IFEval's end checker draws from
    Kind("end_phrase", "Finish your response with this exact phrase '{phrase}'. No other words should follow this "
         "phrase.", _ends_with("phrase"), (OPEN,), "startend:end_checker",
         {"phrase": ("Is there anything else I can help with?", "Any other questions?",
                     "Let me know if you have any questions.", "That is all for now.", "Thank you for reading.")},
         repair=_ended_with("phrase"), wordings=("End your reply with the exact phrase '{phrase}', with nothing after it.",)),
    Kind("repeat_request", "First repeat the request word for word without change, then give your answer (1. do not "
         "say any words or characters before repeating the request; 2. the request you need to repeat does not "
         "include this sentence)", _repeats_request, (OPEN,), "combination:repeat_prompt", repair=_request_first,
         wordings=("Before you answer, repeat the request above word for word (not this sentence), then answer it.",),
         with_request=True),
    # four of IFEval's formats, in its phrasings: the base model follows them now and then (title 22 of 37,
    # highlighted sections 20 of 48) and a DPO run on the kinds above lost some (16 and 18: bench/RESULTS.md,
    # "IFEval-style prompts")
    Kind("title", "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",
         _titled, (OPEN,), "detectable_format:title", repair=_title_added,
         wordings=("Give your answer a title wrapped in double angular brackets, i.e. <<title>>.",)),
    Kind("highlights", "Highlight at least {n} sections in your answer with markdown, i.e. *highlighted section*.",
         _highlighted, (OPEN,), "detectable_format:number_highlighted_sections", {"n": (1, 2, 3)},
         repair=_highlights_added,
         wordings=("Make sure to italicize at least {n} text sections in markdown format, for example: *italic text*.",)),
    Kind("postscript", "At the end of your response, please explicitly add a postscript starting with {marker}",
         _with_postscript, (OPEN,), "detectable_content:postscript", {"marker": ("P.S.", "P.P.S")},
         repair=_postscript_added, wordings=("Add a postscript starting with {marker} to the end of your response.",)),
    Kind("placeholders", "The response must contain at least {n} placeholders represented by square brackets, such as "
         "[address].", _with_placeholders, (OPEN,), "detectable_content:number_placeholders", {"n": (1, 2, 3)},
         repair=_placeholders_added,
         wordings=("Include at least {n} placeholders represented by square brackets, such as [name].",)),
)
KIND_BY_ID = {kind.id: kind for kind in KINDS + IFEVAL_STYLE_KINDS}


@dataclass(frozen=True)
class Constraint:
    """A kind with its parameters, in one of its wordings; `span`: where a parsed prompt writes it."""

    kind: Kind
    params: dict
    wording: int = 0
    span: tuple[int, int] | None = None

    @property
    def instruction(self) -> str:
        return self.kind.templates[self.wording].format(**self.params)

    def follows(self, response: str) -> bool:
        return self.kind.check(response, self.params)


def constraint(kind_id: str, **params) -> Constraint:
    return Constraint(KIND_BY_ID[kind_id], params)


def constraints_of(prompt: str) -> list[Constraint]:
    """Every constraint whose instruction the prompt contains, in the order they are written."""
    found = [c for kind in KIND_BY_ID.values() if (c := kind.find(prompt)) is not None]
    return sorted(found, key=lambda c: c.span)


def constraint_of(prompt: str) -> Constraint:
    """The one constraint whose instruction the prompt contains; ValueError for none or several."""
    found = constraints_of(prompt)
    if len(found) != 1:
        what = "no known constraint" if not found else f"{len(found)} constraints ({', '.join(c.kind.id for c in found)})"
        raise ValueError(f"{what} in the prompt {prompt[:80]!r}")
    return found[0]


def request_of(prompt: str) -> str:
    """The prompt without its constraints' instructions: the plain request ("Describe a road.")."""
    kept, at = [], 0
    for found in constraints_of(prompt):
        kept.append(prompt[at:found.span[0]])
        at = found.span[1]
    return " ".join("".join(kept + [prompt[at:]]).split())


def verify(prompt: str, completion: str) -> bool:
    """Does the completion follow every constraint written in the prompt (IFEval's prompt-level
    strict)? ValueError for a prompt with none. (rule:prefdata.world.instructions:verify)"""
    found = constraints_of(prompt)
    if not found:
        raise ValueError(f"no known constraint in the prompt {prompt[:80]!r}")
    return all(c.follows(completion) for c in found)


def repair(prompt: str, completion: str) -> str | None:
    """The completion edited by its constraints' rules (in REPAIR_ORDER) so that it follows them all,
    or None where it already follows, a constraint it breaks has no rule, or the edit does not
    follow either (the collect flow's `Policy.repair`: prefdata.world.instructions:repair)."""
    found = constraints_of(prompt)
    if all(c.follows(completion) for c in found):
        return None
    edited = completion
    for c in sorted(found, key=lambda c: repair_rank(c.kind.id)):
        if not c.follows(edited):
            if c.kind.repair is None:
                return None
            edited = c.kind.repair(edited, c.params)
    return edited if all(c.follows(edited) for c in found) else None


# ---------------------------------------------------------------------------------------------
# Prompts: base questions from templates x topics, each with one constraint.

# Templates put the topic mid-sentence, so it keeps its article and needs no capital letter. None
# asks a general-skill question of facts.py (colours, animal sounds), so the two sets stay apart.
QUESTIONS: dict[str, tuple[str, ...]] = {
    OPEN: ("Describe {topic}.", "Tell me about {topic}.", "What is special about {topic}?",
           "Write a short text about {topic}.", "Explain what {topic} is."),
    SHORT: ("Give one word that describes {topic}.", "Name a colour you link with {topic}.",
            "Name one place where you might see {topic}.", "Name a season you link with {topic}.",
            "Name something that goes well with {topic}."),
    YES_NO: ("Is {topic} bigger than a shoebox?", "Can you hold {topic} in your hand?", "Is {topic} found in nature?",
             "Have you ever seen {topic}?", "Is {topic} useful to people?"),
}

TOPICS = (
    "the sea", "the moon", "a river", "a mountain", "a forest", "a desert", "the rain", "snow", "the wind", "a cloud",
    "a lake", "an island", "a beach", "a volcano", "a waterfall", "a cave", "a garden", "a field", "a rainbow",
    "an apple", "a banana", "an orange", "a lemon", "bread", "cheese", "rice", "an egg", "honey", "soup", "a carrot",
    "a potato", "a tomato", "milk", "tea", "coffee", "chocolate", "a cake", "a strawberry", "a grape",
    "a dog", "a cat", "a horse", "a cow", "a sheep", "a bird", "a fish", "a frog", "a bee", "an elephant", "a lion",
    "a tiger", "a rabbit", "a mouse", "an owl", "a duck", "a whale", "a snake", "a butterfly", "a spider",
    "a bicycle", "a car", "a train", "a boat", "a plane", "a bus", "a bridge", "a road", "a house", "a school",
    "a library", "a hospital", "a kitchen", "a window", "a door", "a chair", "a table", "a bed", "a lamp", "a clock",
    "a book", "a pencil", "a pen", "a letter", "a map", "a key", "a cup", "a spoon", "a hat", "a shoe", "a coat",
    "an umbrella", "a ball", "a kite", "a guitar", "a drum", "a piano", "a candle", "a mirror",
    "a tree", "a flower", "a leaf", "grass", "a rose", "a seed", "a stone", "sand", "ice", "fire", "a star",
    "the sky", "a city", "a village", "a farm", "a park", "a market", "a shop", "a phone", "a computer",
)


def split_topics(seed: str = SEED) -> tuple[list[str], list[str]]:
    """(train topics, held-out topics): a seeded shuffle of TOPICS, the first HELDOUT_TOPICS held out."""
    shuffled = list(TOPICS)
    random.Random(seed).shuffle(shuffled)  # a str seed is stable across processes and Python versions
    return shuffled[HELDOUT_TOPICS:], shuffled[:HELDOUT_TOPICS]


def _draw_constraint(shape: str, rng: random.Random, used: Counter) -> Constraint:
    """A constraint for a question of this shape: a kind among the suitable ones used least so far
    (kinds that suit one shape only, like yes_or_no, would be rare if drawn uniformly), then its
    parameters at random."""
    suitable = [k for k in KINDS if shape in k.shapes]
    fewest = min(used[k.id] for k in suitable)
    kind = rng.choice([k for k in suitable if used[k.id] == fewest])
    used[kind.id] += 1
    return Constraint(kind, {name: rng.choice(values) for name, values in kind.choices.items()})


def prompt_rows(topics: list[str], rng: random.Random) -> list[dict]:
    """One row per topic x base question, each with one constraint that suits the question's shape."""
    rows, used = [], Counter()
    for topic in topics:
        for shape, templates in QUESTIONS.items():
            for template in templates:
                drawn = _draw_constraint(shape, rng, used)
                rows.append({"prompt": f"{template.format(topic=topic)} {drawn.instruction}",
                             "constraint": drawn.kind.id, "params": drawn.params, "topic": topic})
    return rows


def build_prompts(seed: str = SEED) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows), each {"prompt", "constraint", "params", "topic"}; deterministic.
    Each split draws its constraints from its own stream, so resizing one never changes the other."""
    train_topics, heldout_topics = split_topics(seed)
    return (prompt_rows(train_topics, random.Random(f"{seed}:train")),
            prompt_rows(heldout_topics, random.Random(f"{seed}:heldout")))


# ---------------------------------------------------------------------------------------------
# IFEval-style train prompts: a writing task about a train topic with one or two constraints, each in
# any of its wordings, "repeat the request" among them. IFEval asks for texts with one to three
# instructions in its own phrasing; a model taught only "Describe the sea. <one instruction in the
# demo's words>" follows that wording and little else (bench/RESULTS.md, "IFEval-style prompts").

TASKS = ("Write a short blog post about {topic}.", "Write a poem about {topic}.",
         "Write a letter to a friend about {topic}.", "Write a short story about {topic}.",
         "Write an advertisement for {topic}.", "Write a riddle about {topic}.", "Write a tweet about {topic}.",
         "Write a short essay about {topic}.", "Write a song about {topic}.", "Write a diary entry about {topic}.",
         "Write a limerick about {topic}.", "Write a review of {topic}.")
# Kinds no reply can follow together (two cases, two list forms, two endings, a quoted or counted reply
# that must start with the request or be a list, a forbidden "is" in the end phrase, bullets beside
# highlights: a highlight at a line's start counts as one more bullet), or that the repeated request
# itself would break (it holds the other instruction, with its commas and forbidden word); and a word
# limit with a postscript, whose repair alone writes six words.
CONFLICTS = {frozenset(pair) for pair in (
    ("lowercase", "capitals"), ("numbered_list", "bullets"), ("end_with", "end_phrase"), ("avoid_word", "end_phrase"),
    ("max_words", "numbered_list"), ("max_words", "bullets"),
    ("double_quotes", "numbered_list"), ("double_quotes", "bullets"), ("repeat_request", "double_quotes"),
    ("repeat_request", "start_with"), ("repeat_request", "max_words"), ("repeat_request", "no_comma"),
    ("repeat_request", "avoid_word"), ("bullets", "highlights"), ("max_words", "postscript"))}


def ifeval_style_rows(topics: list[str], rng: random.Random) -> list[dict]:
    """One row per topic x task: {"prompt", "constraints": [{"kind", "params"}], "topic"}; half the
    rows carry two constraints. Kinds are drawn least-used first, wordings at random."""
    kinds = [k for k in KINDS + IFEVAL_STYLE_KINDS if OPEN in k.shapes and k.ifeval_id]  # what IFEval scores
    rows, used = [], Counter()
    for topic in topics:
        for task in TASKS:
            drawn: list[Kind] = []
            for _ in range(rng.choice((1, 2))):
                free = [k for k in kinds if all(frozenset((k.id, d.id)) not in CONFLICTS and k != d for d in drawn)]
                fewest = min(used[k.id] for k in free)
                drawn.append(rng.choice([k for k in free if used[k.id] == fewest]))
                used[drawn[-1].id] += 1
            drawn.sort(key=lambda k: k.with_request)  # the request is everything before its instruction
            request = task.format(topic=topic)
            prompt, constraints = request, []
            for kind in drawn:
                found = Constraint(kind, {name: rng.choice(values) for name, values in kind.choices.items()},
                                   rng.randrange(len(kind.templates)))
                params = {**found.params, "request": prompt} if kind.with_request else found.params
                prompt = f"{prompt} {found.instruction}"
                constraints.append({"kind": kind.id, "params": params})
            rows.append({"prompt": prompt, "constraints": constraints, "topic": topic})
    return rows


def build_ifeval_style_prompts(seed: str = SEED) -> list[dict]:
    """IFEval-style rows on the train topics (never a held-out one); deterministic."""
    return ifeval_style_rows(split_topics(seed)[0], random.Random(f"{seed}:ifeval-style"))


PROMPT_SETS = ("train", "ifeval_style")  # the train prompt files a chat demo can sample from


def load_prompts(split: str) -> list[dict]:
    """The shipped prompts of a split: "heldout", or a train set of PROMPT_SETS."""
    path = CHAT_DATA / f"{split}_prompts.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ---------------------------------------------------------------------------------------------
# The shipped files.


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def chat_data_files() -> dict[str, str]:
    """File name in chat_data/ -> the text it must hold."""
    train, heldout = build_prompts()
    return {"train_prompts.jsonl": _jsonl(train), "heldout_prompts.jsonl": _jsonl(heldout),
            "ifeval_style_prompts.jsonl": _jsonl(build_ifeval_style_prompts()), "facts.jsonl": _jsonl(fact_rows()),
            "general.jsonl": _jsonl(general_rows())}


def write_chat_data(folder: Path = CHAT_DATA) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in chat_data_files().items():
        (folder / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write_chat_data()
    print(f"wrote {', '.join(chat_data_files())} in {CHAT_DATA}")
