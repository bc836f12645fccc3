"""The facts of the chat demo's general-skill set: simple questions with short, unambiguous answers.

The chat demo (`prefdata demo --world chat`) trains SmolLM2-135M-Instruct to follow format
constraints (instructions.py); these questions are one kind of general.py's set, which measures
what that training costs in general skill (the alignment tax), before and after. Every answer was
checked by hand: a wrong "known answer" would corrupt the metric. Questions whose answer is
disputed (the longest river, the number of continents, the capital of the Netherlands) are left
out; `answers` lists every accepted spelling or form ("bark", "barks", "woof"). No accepted answer
occurs in its own question, so a reply that only repeats the question never scores
(tests/test_instructions.py).

`FACTS` is the source; `chat_data/facts.jsonl` is written from it by
`python -m prefdata.world.instructions` and read back by `load_facts()`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

FACTS_FILE = Path(__file__).parent / "chat_data" / "facts.jsonl"

# category -> (question, accepted answers)
FACTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "capitals": (
        ("What is the capital of France?", ("Paris",)),
        ("What is the capital of Italy?", ("Rome",)),
        ("What is the capital of Spain?", ("Madrid",)),
        ("What is the capital of Germany?", ("Berlin",)),
        ("What is the capital of Japan?", ("Tokyo",)),
        ("What is the capital of the United Kingdom?", ("London",)),
        ("What is the capital of Russia?", ("Moscow",)),
        ("What is the capital of Egypt?", ("Cairo",)),
        ("What is the capital of China?", ("Beijing", "Peking")),
        ("What is the capital of Greece?", ("Athens",)),
        ("What is the capital of Portugal?", ("Lisbon",)),
        ("What is the capital of Ireland?", ("Dublin",)),
        ("What is the capital of Norway?", ("Oslo",)),
        ("What is the capital of Sweden?", ("Stockholm",)),
        ("What is the capital of Austria?", ("Vienna",)),
        ("What is the capital of Poland?", ("Warsaw",)),
        ("What is the capital of Canada?", ("Ottawa",)),
        ("What is the capital of Kenya?", ("Nairobi",)),
        ("What is the capital of Argentina?", ("Buenos Aires",)),
        ("What is the capital of Peru?", ("Lima",)),
        ("What is the capital of Thailand?", ("Bangkok",)),
        ("What is the capital of South Korea?", ("Seoul",)),
        ("What is the capital of Denmark?", ("Copenhagen",)),
        ("What is the capital of Finland?", ("Helsinki",)),
        ("What is the capital of Hungary?", ("Budapest",)),
        ("What is the capital of Cuba?", ("Havana",)),
        ("What is the capital of Mexico?", ("Mexico City",)),
        ("What is the capital of Australia?", ("Canberra",)),
        ("What is the capital of Turkey?", ("Ankara",)),
        ("What is the capital of India?", ("New Delhi",)),
        ("What is the capital of Brazil?", ("Brasília", "Brasilia")),
        ("What is the capital of the United States?", ("Washington",)),
        ("What is the capital of Iceland?", ("Reykjavík", "Reykjavik")),
        ("What is the capital of Belgium?", ("Brussels",)),
        ("What is the capital of the Czech Republic?", ("Prague",)),
        ("What is the capital of Scotland?", ("Edinburgh",)),
    ),
    "colours": (
        ("What colour is the sky on a clear day?", ("blue",)),
        ("What colour is fresh grass?", ("green",)),
        ("What colour is snow?", ("white",)),
        ("What colour is a ripe banana?", ("yellow",)),
        ("What colour is coal?", ("black",)),
        ("What colour is blood?", ("red",)),
        ("What colour is milk?", ("white",)),
        ("What colour is a ripe lemon?", ("yellow",)),
        ("What colour is milk chocolate?", ("brown",)),
        ("What colour is a carrot?", ("orange",)),
        ("What colour do you get by mixing blue and yellow paint?", ("green",)),
        ("What colour do you get by mixing red and white paint?", ("pink",)),
        ("What colour do you get by mixing red and yellow paint?", ("orange",)),
    ),
    "animal sounds": (
        ("What sound does a dog make?", ("bark", "barks", "barking", "woof")),
        ("What sound does a cat make?", ("meow", "meows", "miaow", "mew", "purr", "purrs")),
        ("What sound does a cow make?", ("moo", "moos", "mooing")),
        ("What sound does a sheep make?", ("baa", "bleat", "bleats")),
        ("What sound does a duck make?", ("quack", "quacks")),
        ("What sound does a pig make?", ("oink", "oinks", "grunt", "grunts")),
        ("What sound does a horse make?", ("neigh", "neighs", "whinny")),
        ("What sound does a lion make?", ("roar", "roars")),
        ("What sound does a snake make?", ("hiss", "hisses")),
        ("What sound does an owl make?", ("hoot", "hoots")),
        ("What sound does a frog make?", ("croak", "croaks", "ribbit")),
        ("What sound does a bee make?", ("buzz", "buzzes", "buzzing")),
        ("What sound does a donkey make?", ("bray", "brays", "hee-haw", "hee haw")),
        ("What sound does a mouse make?", ("squeak", "squeaks")),
    ),
    "arithmetic": (
        ("What is two plus three?", ("five", "5")),
        ("What is ten minus four?", ("six", "6")),
        ("What is three times four?", ("twelve", "12")),
        ("What is ten divided by two?", ("five", "5")),
        ("What is one plus one?", ("two", "2")),
        ("What is seven plus two?", ("nine", "9")),
        ("What is eight minus three?", ("five", "5")),
        ("What is four plus four?", ("eight", "8")),
        ("What is nine minus nine?", ("zero", "0")),
        ("What is five times five?", ("twenty-five", "twenty five", "25")),
        ("What is twenty divided by four?", ("five", "5")),
        ("What is half of ten?", ("five", "5")),
        ("What is six plus one?", ("seven", "7")),
        ("What is a hundred minus one?", ("ninety-nine", "ninety nine", "99")),
        ("What is two times three?", ("six", "6")),
    ),
    "opposites": (
        ("What is the opposite of hot?", ("cold",)),
        ("What is the opposite of up?", ("down",)),
        ("What is the opposite of big?", ("small", "little", "tiny")),
        ("What is the opposite of day?", ("night",)),
        ("What is the opposite of black?", ("white",)),
        ("What is the opposite of fast?", ("slow",)),
        ("What is the opposite of happy?", ("sad", "unhappy")),
        ("What is the opposite of open?", ("closed", "close", "shut")),
        ("What is the opposite of wet?", ("dry",)),
        ("What is the opposite of left?", ("right",)),
        ("What is the opposite of tall?", ("short",)),
        ("What is the opposite of full?", ("empty",)),
        ("What is the opposite of early?", ("late",)),
        ("What is the opposite of north?", ("south",)),
        ("What is the opposite of east?", ("west",)),
        ("What is the opposite of push?", ("pull",)),
        ("What is the opposite of rich?", ("poor",)),
        ("What is the opposite of love?", ("hate",)),
        ("What is the opposite of first?", ("last",)),
    ),
    "calendar": (
        ("What day comes after Monday?", ("Tuesday",)),
        ("What day comes before Friday?", ("Thursday",)),
        ("What day comes after Saturday?", ("Sunday",)),
        ("What month comes after January?", ("February",)),
        ("What month comes before December?", ("November",)),
        ("What is the first month of the year?", ("January",)),
        ("What is the last month of the year?", ("December",)),
        ("How many days are there in a week?", ("seven", "7")),
        ("How many months are there in a year?", ("twelve", "12")),
        ("How many hours are there in a day?", ("twenty-four", "twenty four", "24")),
        ("How many minutes are there in an hour?", ("sixty", "60")),
        ("How many seconds are there in a minute?", ("sixty", "60")),
        ("How many days are there in a leap year?", ("366", "three hundred and sixty-six",
                                                     "three hundred sixty-six")),
        ("Which season comes after winter?", ("spring",)),
        ("Which season comes after summer?", ("autumn", "fall")),
    ),
    "counting": (
        ("How many legs does a spider have?", ("eight", "8")),
        ("How many legs does an insect have?", ("six", "6")),
        ("How many legs does a dog have?", ("four", "4")),
        ("How many legs does a bird have?", ("two", "2")),
        ("How many sides does a triangle have?", ("three", "3")),
        ("How many sides does a square have?", ("four", "4")),
        ("How many sides does a hexagon have?", ("six", "6")),
        ("How many sides does an octagon have?", ("eight", "8")),
        ("How many wheels does a bicycle have?", ("two", "2")),
        ("How many wheels does a tricycle have?", ("three", "3")),
        ("How many planets are there in our solar system?", ("eight", "8")),
        ("How many strings does a standard guitar have?", ("six", "6")),
        ("How many players does a football (soccer) team have on the field?", ("eleven", "11")),
    ),
    "science": (
        ("What is the largest planet in our solar system?", ("Jupiter",)),
        ("Which planet is known as the Red Planet?", ("Mars",)),
        ("Which planet is closest to the Sun?", ("Mercury",)),
        ("Which planet do we live on?", ("Earth",)),
        ("What is frozen water called?", ("ice",)),
        ("Which gas do people need to breathe in to live?", ("oxygen",)),
        ("Which gas do plants take in from the air to make food?", ("carbon dioxide", "CO2")),
        ("At how many degrees Celsius does water boil at sea level?", ("100", "one hundred", "a hundred")),
        ("At how many degrees Celsius does water freeze?", ("0", "zero")),
        ("At how many degrees Fahrenheit does water freeze?", ("32", "thirty-two", "thirty two")),
        ("What is the chemical symbol for gold?", ("Au",)),
        ("What is the chemical formula of water?", ("H2O",)),
        ("What is the hardest natural substance?", ("diamond", "diamonds")),
        ("Which organ pumps blood around the body?", ("heart",)),
        ("What is the largest ocean on Earth?", ("Pacific",)),
        ("What is the highest mountain above sea level?", ("Everest",)),
    ),
    "animals": (
        ("What do bees make?", ("honey",)),
        ("What is the fastest land animal?", ("cheetah", "cheetahs")),
        ("What is the tallest animal?", ("giraffe", "giraffes")),
        ("What is the largest mammal?", ("blue whale", "blue whales")),
        ("What is the largest bird?", ("ostrich", "ostriches")),
        ("Which animal has a trunk?", ("elephant", "elephants")),
        ("Which animal is called the king of the jungle?", ("lion", "lions")),
        ("Which animal is called the ship of the desert?", ("camel", "camels")),
        ("What do pandas mainly eat?", ("bamboo",)),
        ("What is a baby dog called?", ("puppy", "puppies", "pup", "pups")),
        ("What is a baby cat called?", ("kitten", "kittens")),
        ("What is a baby cow called?", ("calf", "calves")),
        ("What is a baby sheep called?", ("lamb", "lambs")),
        ("What is a baby horse called?", ("foal", "foals", "colt", "filly")),
        ("What is a baby frog called?", ("tadpole", "tadpoles")),
        ("What does a caterpillar turn into?", ("butterfly", "butterflies", "moth", "moths")),
    ),
    "language and culture": (
        ("What language is spoken in France?", ("French",)),
        ("What language is spoken in Spain?", ("Spanish",)),
        ("What language is spoken in Germany?", ("German",)),
        ("What language is spoken in Italy?", ("Italian",)),
        ("What language is spoken in Japan?", ("Japanese",)),
        ("What language is spoken in Brazil?", ("Portuguese",)),
        ("What is the currency of Japan?", ("yen",)),
        ("What is the currency of the United States?", ("dollar", "dollars")),
        ("What is the currency of the United Kingdom?", ("pound", "pounds", "sterling")),
        ("Who wrote Romeo and Juliet?", ("Shakespeare",)),
        ("Who painted the Mona Lisa?", ("Leonardo", "da Vinci")),
    ),
}


def fact_rows() -> list[dict]:
    """The facts as the rows of chat_data/facts.jsonl, in a fixed order."""
    return [{"question": question, "answers": list(answers), "category": category}
            for category, facts in FACTS.items() for question, answers in facts]


def load_facts(path: Path = FACTS_FILE) -> list[dict]:
    """The shipped general-skill set: rows {"question", "answers", "category"}."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _answer_pattern(answer: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(answer)}(?!\w)", re.IGNORECASE)


def _first_mention(answers, reply: str) -> int | None:
    """Where the earliest of `answers` starts in the reply, as a whole word; None if none occurs."""
    found = [m.start() for answer in answers if (m := _answer_pattern(answer).search(reply))]
    return min(found) if found else None


def correct(question_row: dict, reply: str) -> bool:
    """Does the reply contain an accepted answer as a whole word (or phrase), in any case, before any
    of the row's `wrong` answers (general.py's reading items: the other person's fact)?

    Why this rule: a chat model answers in a sentence ("The capital of France is Paris."), so an
    exact match would score right answers wrong; a plain substring would score "14" as "4" and
    "Parisian" as "Paris". Whole words, case-insensitive, accept the sentence and refuse those. A
    reply that hedges across several answers can still score; with one-line facts this is rare. Where
    a wrong answer is named too, the first named is the reply's answer ("Tom lives in Lima; Anna in
    Oslo" answers Lima).
    """
    right = _first_mention(question_row["answers"], reply)
    if right is None:
        return False
    wrong = _first_mention(question_row.get("wrong", ()), reply)
    return wrong is None or right < wrong


def accuracy(question_rows: list[dict], replies: list[str]) -> float:
    """The share of replies that are correct, one reply per question row."""
    if len(question_rows) != len(replies):
        raise ValueError(f"{len(question_rows)} questions but {len(replies)} replies")
    return sum(correct(row, reply) for row, reply in zip(question_rows, replies)) / max(len(replies), 1)
