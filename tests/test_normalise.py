"""One normaliser (records.normalise_text) and its polars twin (records.normalise_expr), used by ids,
exact and near duplicates, degenerate pairs, split isolation and answer leakage (issue 12, item 8)."""

from __future__ import annotations

import gzip
import json
import unicodedata

import polars as pl
import pytest

from prefdata.checks.content import check_answer_leakage
from prefdata.checks.dedup import check_exact_duplicates, check_near_duplicates, normalise_series
from prefdata.checks.isolation import check_split_isolation, split_train_eval
from prefdata.checks.structure import check_degenerate_pairs, identical_after_normalisation
from prefdata.data.importer import import_file
from prefdata.data.records import normalise_text, pair_id, prompt_id

# Each group: texts that are one text after normalisation. Named by what they exercise.
SAME = {
    "sharp s": ["Straße", "STRASSE", "strasse", "STRAẞE", "Strasse"],
    "Turkish dotted capital I (language-neutral folding: İ -> i + U+0307)": ["İstanbul", "i\u0307stanbul",
                                                                             "I\u0307STANBUL"],
    "full-width letters, digits and space": ["ＡＢＣ　ｄｅｆ１２", "abc def12", "ABC DEF12"],
    "combining accents vs precomposed": ["Café crème", "Cafe\u0301 cre\u0300me", "CAFÉ CRÈME",
                                         "CAFE\u0301 CRE\u0300ME"],
    "non-breaking and other Unicode spaces": ["a\u00a0b\u2003c\u3000d\u202fe\u2028f\x1cg\u205fh",
                                              "  a b c d e f g h ", "a\tb\nc\rd\x0be\x0cf\x85g\u2009h"],
    "Greek sigma, final and not": ["ΟΔΟΣ ΣΟΦΟΣ", "οδος σοφος", "οδοσ σοφοσ"],
    "ligatures and compatibility forms": ["ﬁne ﬂow", "FINE FLOW", "ｆｉｎｅ ｆｌｏｗ"],
    "micro sign, long s, Kelvin sign": ["\u00b5 \u017f \u212a", "\u03bc s k", "\u039c S K"],
}
# Texts that must stay apart: the normaliser folds case and compatibility forms, not meaning.
DIFFERENT = [("ı", "i"), ("e", "é"), ("ab", "a b"), ("Straße", "Strase"), ("ss", "s")]


def unicode_list() -> list[str]:
    texts = [t for group in SAME.values() for t in group] + [t for pair in DIFFERENT for t in pair]
    return texts + ["", " ", "\u3000", "ΑΣ.", "Σ", "ꭰᏸ Ꭰ", "ǰ J\u030c", "ᾳ ᾼ", "ﬓ", "\u0345"]


@pytest.mark.parametrize("group", list(SAME))
def test_one_text_after_normalisation(group):
    texts = SAME[group]
    assert len({normalise_text(t) for t in texts}) == 1, [normalise_text(t) for t in texts]


@pytest.mark.parametrize("a,b", DIFFERENT)
def test_different_texts_stay_different(a, b):
    assert normalise_text(a) != normalise_text(b)


def test_normalise_text_is_idempotent_and_collapses_whitespace():
    for text in unicode_list():
        once = normalise_text(text)
        assert normalise_text(once) == once
        assert once == once.strip() and "  " not in once and not any(c.isspace() and c != " " for c in once)


def test_polars_twin_agrees_on_the_unicode_list():
    from prefdata.data.records import normalise_expr

    texts = unicode_list()
    expected = [normalise_text(t) for t in texts]
    frame = pl.DataFrame({"t": texts})
    assert frame.select(normalise_expr("t")).to_series().to_list() == expected
    assert frame.select(normalise_expr(pl.col("t"))).to_series().to_list() == expected
    assert normalise_series(pl.Series(texts)).to_list() == expected  # the duplicate checks' block normaliser
    assert pl.DataFrame({"t": [None]}, schema={"t": pl.String}).select(normalise_expr("t")).item() == ""


def test_polars_twin_agrees_on_every_code_point():
    """Every code point Python's Unicode database knows (unicodedata.unidata_version), alone, after a
    capital letter (final sigma is contextual in lower-casing) and between spaces."""
    from prefdata.data.records import normalise_expr

    chars = [chr(i) for i in range(0x110000)
             if not 0xD800 <= i <= 0xDFFF and unicodedata.category(chr(i)) != "Cn"]
    for texts in (chars, [f"A{c}" for c in chars], [f" {c} Σ" for c in chars]):
        got = pl.DataFrame({"t": texts}).select(normalise_expr("t")).to_series().to_list()
        bad = [(t, g, normalise_text(t)) for t, g in zip(texts, got) if g != normalise_text(t)]
        assert not bad, bad[:5]


def test_polars_twin_agrees_on_real_data(shared_data):
    from prefdata.data.records import normalise_expr

    texts: list[str] = []
    with gzip.open(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            texts += [row["chosen"], row["rejected"]]
    for row in json.loads((shared_data / "pandalm" / "testset-v1.json").read_text(encoding="utf-8")):
        texts += [row["instruction"], row["input"], row["response1"], row["response2"]]
    texts += pl.read_csv(shared_data / "xstest" / "xstest_prompts.csv")["prompt"].to_list()
    for line in (shared_data / "mtbench" / "mt_bench_question.jsonl").read_text(encoding="utf-8").splitlines():
        texts += json.loads(line)["turns"]
    texts = [t for t in texts if isinstance(t, str)]
    assert len(texts) > 8000
    expected = [normalise_text(t) for t in texts]
    assert pl.DataFrame({"t": texts}).select(normalise_expr("t")).to_series().to_list() == expected
    assert normalise_series(pl.Series(texts)).to_list() == expected


# -- the symptom, end to end: a pair and its upper-cased copy with "ß" --------------------------

PROMPT = "Wie heißt die größte Straße in Köln?"
CHOSEN = "Die längste Straße heißt Aachener Straße."
REJECTED = "Das weiß ich leider nicht."


def test_upper_cased_copy_has_the_same_ids_and_is_an_exact_duplicate():
    copy = (PROMPT.upper(), CHOSEN.upper(), REJECTED.upper())
    assert "ß" not in "".join(copy) and "SS" in copy[0]  # str.upper turns ß into SS
    assert prompt_id(copy[0]) == prompt_id(PROMPT)
    assert pair_id(*copy) == pair_id(PROMPT, CHOSEN, REJECTED)
    assert pair_id(PROMPT, REJECTED, CHOSEN) == pair_id(PROMPT, CHOSEN, REJECTED)  # still side-independent
    pairs = pl.DataFrame({"id": ["orig", "copy"], "prompt": [PROMPT, copy[0]],
                          "chosen": [CHOSEN, copy[1]], "rejected": [REJECTED, copy[2]]})
    exact = check_exact_duplicates(pairs)
    assert exact.status == "fail" and exact.offending == ("copy",)
    near = check_near_duplicates(pairs)
    assert near.offending == ("copy",)


def test_imported_copy_shares_the_pair_id_and_fails_exact_duplicates(tmp_path):
    rows = [{"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED},
            {"prompt": PROMPT.upper(), "chosen": CHOSEN.upper(), "rejected": REJECTED.upper()}]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    result = import_file(data)
    assert result.pairs.height == 2 and result.pairs["pair_id"].n_unique() == 1
    ids = result.pairs["id"].to_list()
    assert ids[1] == f"{ids[0]}-2"  # a repeat of the same content, numbered
    assert check_exact_duplicates(result.pairs).offending == (ids[1],)


def test_degenerate_pairs_fold_capital_sharp_s_and_ascii_separators():
    pairs = pl.DataFrame({"id": ["r0", "r1", "r2", "r3"],
                          "chosen": ["Straße", "a\x1cb", "ΟΔΟΣ", "ꭰ"],
                          "rejected": ["STRAẞE", "a b", "οδοσ", "Ꭰ"]})
    assert identical_after_normalisation(pairs).to_list() == [True, True, True, True]
    assert check_degenerate_pairs(pairs).offending == ("r0", "r1", "r2", "r3")


def test_split_isolation_sees_an_upper_cased_eval_prompt():
    train = pl.DataFrame({"id": ["t1", "t2"], "prompt": [PROMPT, "Nenne eine Farbe."], "split": ["train", "train"]})
    held_out = pl.DataFrame({"id": ["e1"], "prompt": [PROMPT.upper()], "split": ["test"]})
    result = check_split_isolation(*split_train_eval(pl.concat([train, held_out])))
    assert result.details["n_exact"] == 1 and result.offending == ("e1",)


def test_answer_leakage_short_answer_matches_after_case_folding():
    pairs = pl.DataFrame({"id": ["r0", "r1"],
                          "prompt": ["Frage: die Hauptstraße liegt im Zentrum. Wo liegt sie?", "Wo liegt Köln?"],
                          "chosen": ["DIE HAUPTSTRASSE LIEGT IM ZENTRUM", "Am Rhein, in Nordrhein-Westfalen."],
                          "rejected": ["Weiß nicht.", "Weiß nicht."]})
    result = check_answer_leakage(pairs)
    assert result.offending == ("r0",) and result.details["by_target"]["chosen"]["short_substring"] == 1


# -- invisible characters: default-ignorable code points and bidi controls ------------------------


def _default_ignorable() -> list[str]:
    """Every Default_Ignorable_Code_Point, from the `regex` module's Unicode tables (an oracle apart
    from records.DEFAULT_IGNORABLE; transformers depends on it)."""
    import regex

    prop = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    return [chr(c) for c in range(0x110000) if prop.match(chr(c))]


def test_the_ignorable_table_is_unicodes_default_ignorable_set():
    from prefdata.data.records import DEFAULT_IGNORABLE

    table = {chr(c) for a, b in DEFAULT_IGNORABLE for c in range(a, b + 1)}
    assert table == set(_default_ignorable())
    bidi_controls = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert set(bidi_controls) <= table


def test_every_invisible_code_point_is_no_difference():
    """Each one inside a word, at either end and alone: the same text as without it, in Python and polars."""
    from prefdata.data.records import normalise_expr

    texts, plains = [], []
    for c in _default_ignorable():
        for text, plain in ((f"Ca{c}fé{c}", "Café"), (f"{c}word", "word"), (c, ""), (f"x {c} y", "x y")):
            texts.append(text)
            plains.append(plain)
    expected = [normalise_text(p) for p in plains]
    assert [normalise_text(t) for t in texts] == expected
    assert pl.DataFrame({"t": texts}).select(normalise_expr("t")).to_series().to_list() == expected
    assert normalise_series(pl.Series(texts)).to_list() == expected


def test_a_pair_differing_by_an_invisible_character_is_degenerate_and_a_copy_is_an_exact_duplicate(tmp_path):
    # the audit's pairs: rejected = chosen + U+200B, and a copy with a soft hyphen inside a word
    rows = [{"prompt": "Name a prime.", "chosen": "Seven is prime.", "rejected": "Seven is prime.\u200b"},
            {"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "Red."},
            {"prompt": "Name a colour.", "chosen": "Bl\u00adue.", "rejected": "Red.\u2060"}]
    data = tmp_path / "invisible.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    pairs = import_file(data).pairs
    ids = pairs["id"].to_list()
    assert pairs["pair_id"][1] == pairs["pair_id"][2]
    assert check_exact_duplicates(pairs).offending == (ids[2],)
    assert check_degenerate_pairs(pairs).offending == (ids[0],)
