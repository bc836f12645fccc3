"""One normaliser (records.normalise_text) and its polars twin (records.normalise_expr), used by ids,
exact and near duplicates, degenerate pairs, split isolation and answer leakage (issue 12, item 8);
invisible code points removed and blank ones made a space, over the whole range (issue 44, item 4)."""

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


# every code point Python's Unicode database knows (unicodedata.unidata_version); surrogates can't be in a str
KNOWN = [chr(i) for i in range(0x110000) if not 0xD800 <= i <= 0xDFFF and unicodedata.category(chr(i)) != "Cn"]


def test_polars_twin_agrees_on_every_code_point():
    """Every code point Python's Unicode database knows, alone, after a capital letter (final sigma
    is contextual in lower-casing), between spaces and between a letter and a combining accent
    (an invisible one must not block the composition): normalise_expr and normalise_series (and its
    ASCII fast path) give what normalise_text gives (and its ASCII shortcut)."""
    from prefdata.data.records import normalise_expr

    for texts in (KNOWN, [f"A{c}" for c in KNOWN], [f" {c} Σ" for c in KNOWN], [f"a{c}\u0301" for c in KNOWN]):
        expected = [normalise_text(t) for t in texts]
        got = pl.DataFrame({"t": texts}).select(normalise_expr("t")).to_series().to_list()
        bad = [(t, g, e) for t, g, e in zip(texts, got, expected) if g != e]
        assert not bad, bad[:5]
        got = normalise_series(pl.Series(texts)).to_list()
        bad = [(t, g, e) for t, g, e in zip(texts, got, expected) if g != e]
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


# -- invisible and blank code points over the whole range (issue 44, item 4) --------------------

WHITESPACE_CONTROLS = "\t\n\v\f\r\x1c\x1d\x1e\x1f\x85"  # what str.split() splits at, among the controls
BLANKS_BESIDES_ZS = "\u115f\u1160\u2800\u3164\uffa0"  # Hangul fillers, Braille pattern blank
# the audit's invisible characters, each of which a copy of a text carried after every character
AUDIT_INVISIBLE = "\x00\x01\x1b\x7f\x80\x9b\ufff9\ufffa\ufffb\U00013430\U0001d159\u200b"


def test_the_invisible_and_blank_sets():
    """records.invisible_and_blank against the definition, from the `regex` module's Unicode tables
    (limited to what Python's unicodedata knows: newer assignments are left alone, as unassigned)."""
    import regex

    from prefdata.data.records import invisible_and_blank

    def category(name):
        prop = regex.compile(rf"\p{{{name}}}")
        return {c for c in KNOWN if prop.match(c)}

    blank = category("Zs") - {" "} | set(BLANKS_BESIDES_ZS)
    invisible = (set(_default_ignorable()) | category("Cf") | (category("Cc") - set(WHITESPACE_CONTROLS))
                 | {"\U0001d159"}) - blank
    got_invisible, got_blank = ({chr(c) for c in codes} for codes in invisible_and_blank())
    assert got_blank == blank and got_invisible == invisible
    assert set(AUDIT_INVISIBLE) <= got_invisible and "\u2800" in got_blank
    left_alone = "\ue000\U000f0000\u0378\U0001fffe" + WHITESPACE_CONTROLS + " a"  # private use, unassigned
    assert not set(left_alone) & (got_invisible | got_blank)


def test_no_other_code_point_becomes_invisible_or_blank():
    """NFKC, case folding and lower-casing (polars' first step of folding) never make an invisible code
    point or a blank one but a Unicode space (whitespace anyway) from another: removing and blanking
    them first, before NFKC, is enough."""
    from prefdata.data.records import invisible_and_blank

    invisible, blank = ({chr(c) for c in codes} for codes in invisible_and_blank())
    bad = set()
    for c in KNOWN:
        if c in invisible or c in blank:
            continue
        nfkc = unicodedata.normalize("NFKC", c)
        for out in (nfkc, nfkc.casefold(), nfkc.lower(), c.casefold(), c.lower()):
            bad |= {(c, o) for o in out if o in invisible or (o in blank and not o.isspace())}
    assert not bad, sorted(bad)[:5]


def _engines():
    """Each engine path as texts -> normalised texts."""
    from prefdata.data.records import normalise_expr

    return {
        "normalise_text": lambda texts: [normalise_text(t) for t in texts],
        "normalise_expr": lambda texts: pl.DataFrame({"t": texts}, schema={"t": pl.String})
                                        .select(normalise_expr("t")).to_series().to_list(),
        "normalise_series": lambda texts: normalise_series(pl.Series(texts, dtype=pl.String)).to_list(),
    }


# an ASCII text (normalise_series' and normalise_text's fast paths), and one with compositions an
# inserted code point could block (e + combining acute, Hangul jamo L + V), final sigma and a ligature
PROPERTY_TEXTS = ("Ab c", "Cafe\u0301 \u1100\u1161 ΟΣ ﬁ")


@pytest.mark.parametrize("engine", ["normalise_text", "normalise_expr", "normalise_series"])
def test_inserting_an_invisible_code_point_anywhere_changes_nothing(engine):
    """Every invisible code point, inserted at every position of each text (and after every character
    at once): the same normalised text, on every engine path."""
    from prefdata.data.records import invisible_and_blank

    normalise = _engines()[engine]
    for text in PROPERTY_TEXTS:
        expected = normalise_text(text)
        variants = []
        for c in map(chr, sorted(invisible_and_blank()[0])):
            variants += [text[:i] + c + text[i:] for i in range(len(text) + 1)] + [c.join(text) + c]
        got = normalise(variants)
        bad = [(v, g) for v, g in zip(variants, got) if g != expected]
        assert not bad, (expected, bad[:5])


@pytest.mark.parametrize("engine", ["normalise_text", "normalise_expr", "normalise_series"])
def test_a_blank_for_a_space_or_beside_one_changes_nothing(engine):
    """Every blank code point for each space and for all of them, and inserted before and after each
    space: the same normalised text, on every engine path."""
    from prefdata.data.records import invisible_and_blank

    normalise = _engines()[engine]
    for text in (*PROPERTY_TEXTS, " a  b\u0301 \u0301c ", "\u1100 \u1161"):
        expected = normalise_text(text)
        spaces = [i for i, c in enumerate(text) if c == " "]
        variants = []
        for b in map(chr, sorted(invisible_and_blank()[1])):
            variants.append(text.replace(" ", b))
            for i in spaces:
                variants += [text[:i] + b + text[i + 1:], text[:i] + b + text[i:], text[:i + 1] + b + text[i + 1:]]
        got = normalise(variants)
        bad = [(v, g) for v, g in zip(variants, got) if g != expected]
        assert not bad, (expected, bad[:5])


# -- the audit's attack, end to end: copies that look the same pass no check -----------------------

AUDIT_PROMPT = "Name a prime number below ten."
AUDIT_CHOSEN = "Seven is a prime number below ten."
AUDIT_REJECTED = "Nine is a prime number below ten."
# U+2800 for every space, or an invisible code point after every character
AUDIT_COPIES = {"braille_blank": lambda t: t.replace(" ", "\u2800"),
                **{f"u{ord(c):04x}": (lambda t, c=c: c.join(t) + c)
                   for c in "\x01\x7f\x9b\u200b\ufff9\U00013430\U0001d159"}}


def test_copies_with_invisible_characters_or_blank_spaces_are_exact_and_near_duplicates():
    ids = ["orig", *AUDIT_COPIES]
    pairs = pl.DataFrame({"id": ids,
                          "prompt": [AUDIT_PROMPT, *(f(AUDIT_PROMPT) for f in AUDIT_COPIES.values())],
                          "chosen": [AUDIT_CHOSEN, *(f(AUDIT_CHOSEN) for f in AUDIT_COPIES.values())],
                          "rejected": [AUDIT_REJECTED, *(f(AUDIT_REJECTED) for f in AUDIT_COPIES.values())]})
    assert len(set(pairs["chosen"])) == len(ids)  # the raw texts all differ
    exact = check_exact_duplicates(pairs)
    assert exact.status == "fail" and exact.offending == tuple(ids[1:])
    assert check_near_duplicates(pairs).offending == tuple(ids[1:])
    assert check_near_duplicates(pairs, scope="prompt").offending == tuple(ids[1:])
    assert len({pair_id(*row) for row in pairs.select("prompt", "chosen", "rejected").iter_rows()}) == 1


def test_a_reply_against_its_invisibly_changed_copy_is_a_degenerate_pair():
    ids = list(AUDIT_COPIES)
    pairs = pl.DataFrame({"id": ids, "chosen": [AUDIT_CHOSEN] * len(ids),
                          "rejected": [f(AUDIT_CHOSEN) for f in AUDIT_COPIES.values()]})
    assert identical_after_normalisation(pairs).all()
    assert identical_after_normalisation(pairs, fold_case=False).all()
    assert check_degenerate_pairs(pairs).offending == tuple(ids)
