"""The chat demo's general-skill set: enough items of several kinds to see an alignment tax.

168 facts (facts.py) give one standard error of ~3.9 points: a 5-point tax is barely visible. This
set adds three kinds, each written by a rule from hand-checked word lists, so every answer is right
by construction and the set can be as large as the measure needs (issue 47):

    facts       facts.py's hand-checked questions (capitals, colours, arithmetic, calendar...)
    reasoning   one-step word problems: sums, differences, products, shares, ages, times and prices
    reading     a short text about two people and a question about one of them; the other person's
                answer is a wrong answer, and a reply scores by which of the two it names first
    words       irregular plurals, irregular past tenses, and opposites facts.py does not ask

Each kind is far from both 0 and 1 on the base model (SmolLM2-135M-Instruct: facts 0.48, reading
0.51, words 0.47, word problems 0.37 with 96-token replies), so training can move its items either
way. A fourth kind, the
next number of a sequence, was dropped: the base model explains the sequence instead of answering
within the reply's 32 tokens (0 of 60), and an item never answered cannot show a tax.

Scoring is facts.correct: an accepted answer as a whole word; with `wrong` answers, the accepted one
must come first. No accepted answer occurs in a question outside `reading` (a reply that repeats the
question never scores); in `reading` the passage names both answers in an order drawn at random, so
a reply that repeats the text scores at chance, the same before training as after.

`general_rows()` is the source (seeded: the same rows every time, in an order drawn once so that the
first N items mix the kinds); `chat_data/general.jsonl` is written from it by
`python -m prefdata.world.instructions` and read back by `load_general()`.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

from prefdata.world.facts import correct, fact_rows

GENERAL_FILE = Path(__file__).parent / "chat_data" / "general.jsonl"
SEED = "general-skill"

NAMES = ("Anna", "Tom", "Maria", "Peter", "Lena", "Sam", "Ravi", "Yuki", "Omar", "Sofia", "Jack", "Mia", "Leo",
         "Nina", "Carlos", "Emma", "Ben", "Zoe", "Ali", "Grace")
THINGS = ("apples", "pencils", "stickers", "books", "marbles", "cookies", "stamps", "shells", "balloons", "cards")

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def number_answers(n: int) -> list[str]:
    """The forms a reply may give a whole number from 0 to 100 in: digits and words ("21",
    "twenty-one", "twenty one")."""
    if not 0 <= n <= 100:
        raise ValueError(f"{n} is outside 0..100")
    if n < 20:
        return [str(n), _ONES[n]]
    if n == 100:
        return ["100", "one hundred", "a hundred"]
    tens, ones = divmod(n, 10)
    if not ones:
        return [str(n), _TENS[tens]]
    return [str(n), f"{_TENS[tens]}-{_ONES[ones]}", f"{_TENS[tens]} {_ONES[ones]}"]


# --------------------------------------------------------------------------------------- reasoning
# (template, answer from (a, b), the range of a, the range of b); every template names a and b in
# digits, so an answer that equals neither cannot score by repeating the question.
_PROBLEMS = (
    ("{name} has {a} {things}. {name} gets {b} more {things}. How many {things} does {name} have now?",
     lambda a, b: a + b, (2, 15), (2, 9)),
    ("{name} had {a} {things} and gave {b} of them away. How many {things} does {name} have left?",
     lambda a, b: a - b, (8, 20), (2, 7)),
    ("There are {a} boxes with {b} {things} in each box. How many {things} are there in all?",
     lambda a, b: a * b, (2, 9), (2, 9)),
    ("{a} {things} are shared equally among {b} friends. How many {things} does each friend get?",
     lambda a, b: a // b, None, (2, 6)),
    ("{name} is {a} years old. {other} is {b} years older than {name}. How old is {other}?",
     lambda a, b: a + b, (5, 30), (2, 12)),
    ("{name}'s film starts at {a} o'clock and lasts {b} hours. At what o'clock does it end?",
     lambda a, b: a + b, (1, 8), (1, 4)),
    ("One pen costs {a} dollars. How many dollars do {b} pens cost?",
     lambda a, b: a * b, (2, 9), (2, 6)),
)


def reasoning_rows(rng: random.Random, per_template: int = 30) -> list[dict]:
    rows, seen = [], set()
    for index, (template, answer_of, a_range, b_range) in enumerate(_PROBLEMS):
        made = 0
        for _ in range(100 * per_template):  # a template with fewer distinct questions fails, never hangs
            if made == per_template:
                break
            b = rng.randint(*b_range)
            a = b * rng.randint(2, 9) if a_range is None else rng.randint(*a_range)  # shares come out whole
            answer = answer_of(a, b)
            name, other = rng.sample(NAMES, 2)
            question = template.format(name=name, other=other, things=rng.choice(THINGS), a=a, b=b)
            if answer in (a, b) or question in seen:
                continue
            seen.add(question)
            rows.append({"question": question, "answers": number_answers(answer), "kind": "reasoning",
                         "category": f"problem {index + 1}"})
            made += 1
        else:
            raise ValueError(f"word problem {index + 1} has fewer than {per_template} distinct questions")
    return rows


# ----------------------------------------------------------------------------------------- reading
CITIES = ("Oslo", "Lima", "Cairo", "Dublin", "Madrid", "Nairobi", "Lisbon", "Vienna", "Tokyo", "Havana",
          "Seoul", "Prague", "Athens", "Warsaw", "Bangkok", "Helsinki", "Boston", "Sydney", "Toronto", "Munich")
JOBS = ("nurse", "baker", "teacher", "farmer", "pilot", "doctor", "painter", "plumber", "singer", "dentist",
        "lawyer", "gardener", "chef", "tailor", "judge", "librarian")
SPORTS = ("tennis", "football", "chess", "golf", "hockey", "basketball", "volleyball", "cricket", "rugby",
          "baseball", "badminton")
PETS = ("dog", "cat", "rabbit", "parrot", "hamster", "goat", "pony", "turtle")
# attribute -> (the sentence the text says it in, the question that asks for it, the values)
_FACTS_OF_PEOPLE = {
    "city": ("{who} lives in {value}.", "In which city does {who} live?", CITIES),
    "job": ("{who} works as a {value}.", "What is {who}'s job?", JOBS),
    "sport": ("{who} plays {value} every weekend.", "Which game does {who} play every weekend?", SPORTS),
    "pet": ("{who} has a {value} at home.", "Which animal does {who} have at home?", PETS),
}


def reading_rows(rng: random.Random, n: int = 160) -> list[dict]:
    """Two people, two facts of each; the question asks one fact of one of them. The text gives the
    facts person by person, the asked one first or second at random."""
    rows, seen = [], set()
    attributes = list(_FACTS_OF_PEOPLE)
    while len(rows) < n:
        first, second = rng.sample(NAMES, 2)
        told = rng.sample(attributes, 2)
        values = {who: {} for who in (first, second)}
        for attribute in told:
            a, b = rng.sample(_FACTS_OF_PEOPLE[attribute][2], 2)
            values[first][attribute], values[second][attribute] = a, b
        text = " ".join(_FACTS_OF_PEOPLE[attribute][0].format(who=who, value=values[who][attribute])
                        for who in (first, second) for attribute in told)
        asked, attribute = rng.choice((first, second)), rng.choice(told)
        other = second if asked == first else first
        question = f"Read the text, then answer the question.\n\nText: {text}\n\n" \
                   f"Question: {_FACTS_OF_PEOPLE[attribute][1].format(who=asked)}"
        if question in seen:
            continue
        seen.add(question)
        rows.append({"question": question, "answers": [values[asked][attribute]], "kind": "reading",
                     "category": attribute, "wrong": [values[other][attribute]]})
    return rows


# ------------------------------------------------------------------------------------------- words
PLURALS = (("mouse", "mice"), ("child", "children"), ("foot", "feet"), ("tooth", "teeth"), ("man", "men"),
           ("woman", "women"), ("goose", "geese"), ("person", "people"), ("ox", "oxen"), ("leaf", "leaves"),
           ("knife", "knives"), ("wolf", "wolves"), ("life", "lives"), ("half", "halves"), ("wife", "wives"),
           ("loaf", "loaves"), ("shelf", "shelves"), ("thief", "thieves"), ("potato", "potatoes"),
           ("tomato", "tomatoes"), ("hero", "heroes"), ("city", "cities"), ("baby", "babies"), ("box", "boxes"),
           ("bus", "buses"), ("church", "churches"), ("fox", "foxes"), ("louse", "lice"), ("fungus", "fungi"),
           ("cactus", "cacti"))
PAST_TENSES = (("go", "went"), ("eat", "ate"), ("see", "saw"), ("run", "ran"), ("write", "wrote"),
               ("take", "took"), ("give", "gave"), ("buy", "bought"), ("think", "thought"), ("bring", "brought"),
               ("swim", "swam"), ("sing", "sang"), ("drink", "drank"), ("begin", "began"), ("fly", "flew"),
               ("know", "knew"), ("grow", "grew"), ("throw", "threw"), ("drive", "drove"), ("ride", "rode"),
               ("speak", "spoke"), ("break", "broke"), ("choose", "chose"), ("forget", "forgot"),
               ("sleep", "slept"), ("keep", "kept"), ("feel", "felt"), ("teach", "taught"), ("catch", "caught"),
               ("fight", "fought"), ("sell", "sold"), ("tell", "told"), ("find", "found"), ("stand", "stood"),
               ("win", "won"), ("sit", "sat"), ("make", "made"), ("hear", "heard"), ("meet", "met"),
               ("pay", "paid"), ("say", "said"), ("lose", "lost"), ("fall", "fell"), ("draw", "drew"),
               ("wear", "wore"), ("build", "built"), ("send", "sent"), ("spend", "spent"))
# word -> accepted opposites; only pairs with one clear opposite (not "light", "old", "hard")
OPPOSITES = (("cold", ("hot",)), ("down", ("up",)), ("small", ("big", "large")), ("night", ("day",)),
             ("white", ("black",)), ("slow", ("fast", "quick")), ("sad", ("happy",)), ("dry", ("wet",)),
             ("empty", ("full",)), ("late", ("early",)), ("south", ("north",)), ("west", ("east",)),
             ("pull", ("push",)), ("poor", ("rich",)), ("hate", ("love",)), ("last", ("first",)),
             ("top", ("bottom",)), ("inside", ("outside",)), ("buy", ("sell",)), ("strong", ("weak",)),
             ("thick", ("thin",)), ("clean", ("dirty",)), ("alive", ("dead",)), ("true", ("false",)),
             ("always", ("never",)), ("before", ("after",)), ("cheap", ("expensive", "dear")),
             ("friend", ("enemy", "foe")), ("remember", ("forget",)), ("increase", ("decrease",)),
             ("maximum", ("minimum",)), ("floor", ("ceiling",)), ("laugh", ("cry",)), ("win", ("lose",)),
             ("question", ("answer",)), ("arrive", ("leave", "depart")), ("noisy", ("quiet", "silent")),
             ("above", ("below", "beneath", "under")), ("begin", ("end", "finish")), ("young", ("old",)))


def word_rows(known_questions: set[str]) -> list[dict]:
    rows = [{"question": f"What is the plural of the word '{word}'?", "answers": [plural], "kind": "words",
             "category": "plural"} for word, plural in PLURALS]
    rows += [{"question": f"What is the past tense of the verb '{verb}'?", "answers": [past], "kind": "words",
              "category": "past tense"} for verb, past in PAST_TENSES]
    rows += [{"question": f"What is the opposite of {word}?", "answers": list(opposites), "kind": "words",
              "category": "opposite"} for word, opposites in OPPOSITES]
    return [row for row in rows if row["question"] not in known_questions]  # facts.py asks some opposites


def general_rows(seed: str = SEED) -> list[dict]:
    """Every item of the set, in the shipped order (shuffled once, so the first N mix the kinds)."""
    rng = random.Random(seed)
    facts = [{**row, "kind": "facts"} for row in fact_rows()]
    rows = facts + reasoning_rows(rng) + reading_rows(rng) + word_rows({row["question"] for row in facts})
    rng.shuffle(rows)
    return rows


def replay_rows(n: int, shipped: Sequence[dict], seed: str = "general-replay") -> list[dict]:
    """`n` items of the rule-made kinds (word problems and reading, half each) drawn with another seed
    and none of whose questions is in `shipped`: questions the measure never asks, for a replay of the
    base model's own answers (its working on word problems among them) to mix into training. They
    share the measure's templates and word lists (other numbers, names and pairings), so a replay of
    them anchors the model on those two kinds in particular; facts and word forms come from fixed
    lists the measure uses whole, have no held-out items, and show what the replay does elsewhere."""
    rng, asked = random.Random(seed), {row["question"] for row in shipped}
    reasoning = [row for row in reasoning_rows(rng) if row["question"] not in asked]
    reading = [row for row in reading_rows(rng) if row["question"] not in asked]
    rng.shuffle(reasoning)  # made template by template: the first n would be the first templates' alone
    half = n // 2
    if len(reasoning) < n - half or len(reading) < half:
        raise ValueError(f"{n} replay items asked for, but the general-skill set holds out at most "
                         f"{2 * min(len(reasoning), len(reading))} word problems and reading questions: ask for fewer")
    rows = reasoning[:n - half] + reading[:half]
    rng.shuffle(rows)
    return rows


def load_general(path: Path = GENERAL_FILE) -> list[dict]:
    """The shipped general-skill set: rows {"question", "answers", "kind", "category"} (+ "wrong")."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ----------------------------------------------------------------------------------------- figures
def outcomes(rows: Sequence[dict], replies: Sequence[str]) -> list[int]:
    """1 where the reply to the row's question is correct (facts.correct), else 0."""
    if len(rows) != len(replies):
        raise ValueError(f"{len(rows)} questions but {len(replies)} replies")
    return [int(correct(row, reply)) for row, reply in zip(rows, replies)]


def standard_error(scores: Sequence[int]) -> float:
    """The standard error of the share of 1s: sqrt(p (1 - p) / n)."""
    n = len(scores)
    if not n:
        return math.nan
    p = sum(scores) / n
    return math.sqrt(p * (1 - p) / n)


def paired_change(before: Sequence[int], after: Sequence[int]) -> tuple[float, float]:
    """(mean change, its standard error) over the same items before and after: the differences'
    standard deviation over sqrt(n). Paired, it is smaller than the two figures' own errors
    combined, because most items are answered the same way both times."""
    if len(before) != len(after):
        raise ValueError(f"{len(before)} items before but {len(after)} after: not the same items")
    n = len(before)
    if n < 2:
        return math.nan, math.nan
    diffs = [b - a for a, b in zip(before, after)]
    mean = sum(diffs) / n
    variance = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return mean, math.sqrt(variance / n)
