"""The embedded demo world: tasks and verifiers, tokenizer, a tiny real build, annotators, judge metrics.

Everything runs for real on CPU: the tiny build trains a real Llama for a few steps, saves it and
loads it back through AutoModelForCausalLM / AutoTokenizer. The full default build is `slow`.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace

# As build_world does: passive OpenMP waiting keeps two training threads usable on a shared machine
# (see prefdata/world/build.py). Only effective when this module is imported before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import polars as pl
import pytest

from prefdata.data.records import VOTE_COLUMNS, VOTE_VALUES, pair_id
from prefdata.world import (
    SimulatedAnnotator,
    WorldConfig,
    annotator_pool,
    build_tokenizer,
    build_world,
    correct_vote,
    dropped_carry,
    evaluate,
    heldout,
    judge_agreement,
    judge_comparisons,
    model_judge,
    sampling_prompts,
    sft_data,
    verify,
    verify_reverse,
    votes_frame,
)
from prefdata.world import tasks
from prefdata.world.build import SHIPPED, file_hashes, shipped_world

# Small enough to train in a few seconds; big enough to be a real Llama with every part present.
TINY = WorldConfig(
    n_sft=2_000, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, steps=30,
    batch_size=32, warmup_steps=5, n_eval_task=40, n_eval_general=20, judge_n_sft=2_000, judge_steps=20,
)


# --- tasks and verifiers -------------------------------------------------------------------------

def test_verify_reads_the_first_number_of_the_first_line():
    assert verify("347+058=", "0405")
    assert verify("347+058=", "405")  # numbers, not strings: a real model's answer counts
    assert verify("347+58=", "405")
    assert verify("347+58=", " 405\n999")  # a real model may run on after a newline
    assert verify("347+58=", "it is 405.")
    assert verify("905-47=", "858")
    assert not verify("347+058=", "0395")  # the dropped carry
    assert not verify("347+58=", "4050")
    assert not verify("347+58=", "40 5")
    assert not verify("347+58=", "\n405")  # nothing on the first line
    assert not verify("347+58=", "")
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        verify("rev:abc=", "cba")


def test_verify_reverse():
    assert verify_reverse("rev:abcde=", "edcba")
    assert verify_reverse("rev:abcde=", " edcba \nmore")
    assert not verify_reverse("rev:abcde=", "edcb")
    assert not verify_reverse("rev:abcde=", "abcde")
    with pytest.raises(ValueError, match="not a reverse prompt"):
        verify_reverse("1+2=", "3")


def test_dropped_carry_is_off_by_ten_and_wrong():
    assert dropped_carry(tasks.Example("347+058=", "0405", "arithmetic", carry=True)).completion == "0395"
    assert dropped_carry(tasks.Example("352-047=", "0305", "arithmetic", carry=True)).completion == "0315"
    rng = random.Random(0)
    carrying = [ex for ex in (tasks.arithmetic_problem(rng) for _ in range(500)) if ex.carry]
    assert carrying and all(not verify(ex.prompt, dropped_carry(ex).completion) for ex in carrying)
    with pytest.raises(ValueError, match="units carry"):
        dropped_carry(tasks.Example("12+13=", "25", "arithmetic", carry=False))


def test_generated_problems_are_in_range_and_correct():
    rng = random.Random(1)
    for _ in range(2_000):
        ex = tasks.arithmetic_problem(rng)
        a, op, b = tasks.ARITH_RE.match(ex.prompt).groups()
        assert 10 <= int(a) <= 999 and 10 <= int(b) <= 999
        assert op == "+" or int(a) >= int(b)
        assert len(ex.prompt) == 8 and len(ex.completion) == 4  # fixed width
        assert verify(ex.prompt, ex.completion)
        rev = tasks.reverse_problem(rng)
        assert verify_reverse(rev.prompt, rev.completion) and 3 <= len(rev.completion) <= 6


def test_sft_data_carries_the_configured_flaw():
    config = replace(TINY, n_sft=20_000)
    data = sft_data(config)
    arithmetic = [ex for ex in data if ex.kind == "arithmetic"]
    carrying = [ex for ex in arithmetic if ex.carry]
    flawed = [ex for ex in arithmetic if ex.flawed]
    assert len(data) == 20_000
    assert abs(1 - len(arithmetic) / len(data) - config.general_share) < 0.02
    assert 0.40 < len(carrying) / len(arithmetic) < 0.50  # units carry or borrow
    assert abs(len(flawed) / len(carrying) - config.flaw_share) < 0.02
    assert all(ex.carry and not verify(ex.prompt, ex.completion) for ex in flawed)
    assert all(verify(ex.prompt, ex.completion) for ex in arithmetic if not ex.flawed)
    assert all(verify_reverse(ex.prompt, ex.completion) for ex in data if ex.kind == "reverse")
    assert sft_data(config) == data  # deterministic from the seed


def test_heldout_prompts_never_reach_training_or_sampling():
    config = replace(TINY, n_sft=20_000, n_eval_task=500, n_eval_general=200)
    task, general = heldout(config)
    assert len({ex.prompt for ex in task}) == 500 and len({ex.prompt for ex in general}) == 200
    assert all(tasks.ARITH_RE.match(ex.prompt) for ex in task)
    assert all(tasks.REVERSE_RE.match(ex.prompt) for ex in general)
    held = {ex.prompt for ex in task + general}
    assert not held & {ex.prompt for ex in sft_data(config)}
    prompts = sampling_prompts(config, 2_000)
    assert len(set(prompts)) == 2_000 and not held & set(prompts)
    assert heldout(config) == (task, general)
    assert heldout(replace(config, seed=1))[0] != task


# --- tokenizer -----------------------------------------------------------------------------------

def test_tokenizer_round_trips_and_loads_with_autotokenizer(tmp_path):
    from transformers import AutoTokenizer

    from prefdata.world.tokenizer import save_tokenizer

    tok = build_tokenizer()
    texts = ["347+058=0405", "rev:abcde=edcba", "905-047=A0858|B0868?", "a b\nc"]
    for text in texts:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1  # one token per character
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok("é")["input_ids"][1] == tok.unk_token_id
    save_tokenizer(tok, tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.padding_side == "left"
    assert (loaded.pad_token, loaded.bos_token, loaded.eos_token) == ("<pad>", "<bos>", "<eos>")
    assert all(loaded(t)["input_ids"] == tok(t)["input_ids"] for t in texts)
    batch = loaded(["1+2=", "347+058="], padding=True)["input_ids"]
    assert batch[0][:4] == [loaded.pad_token_id] * 4 and batch[0][-1] == batch[1][-1]  # left padded


def test_chat_template_hands_the_model_its_own_prompt_format():
    """An OpenAI-compatible server renders messages with the chat template: the world's model must get
    exactly "<bos>347+058=" (no role markers, system turns dropped), as in training."""
    tok = build_tokenizer()
    messages = [{"role": "system", "content": "Be a fair judge."}, {"role": "user", "content": "347+058=A0405|B0395?"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = rendered["input_ids"] if isinstance(rendered, dict) or hasattr(rendered, "keys") else rendered
    assert ids == tok("347+058=A0405|B0395?")["input_ids"]


# --- a tiny real build ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory):
    return build_world(TINY, cache=tmp_path_factory.mktemp("world"), judge=True)


def test_training_changes_every_parameter_and_lowers_the_loss():
    import torch

    from prefdata.world.model import new_model, train

    tok = build_tokenizer()
    model = new_model(TINY, tok)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    losses = train(model, tok, sft_data(TINY), TINY)
    assert len(losses) == TINY.steps
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])]
    assert not unchanged
    # Fixed seed: the same config trains the same model, loss for loss.
    assert train(new_model(TINY, tok), tok, sft_data(TINY), TINY) == losses


def test_build_saves_a_model_that_loads_by_path(tiny_world):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prefdata.world.model import generate

    assert not tiny_world.reused
    assert tiny_world.root.name == TINY.key()  # with its judge; a world without one sits in KEY-sft
    info = json.loads(tiny_world.world_json.read_text())
    assert WorldConfig.from_dict(info["config"]) == TINY
    assert 0.0 <= info["metrics"]["task_accuracy"] <= 1.0
    assert 0.0 <= info["metrics"]["general_accuracy"] <= 1.0
    assert info["build_seconds"]["total"] > 0
    assert info["data"]["n_flawed"] > 0
    model = AutoModelForCausalLM.from_pretrained(tiny_world.sft)
    tok = AutoTokenizer.from_pretrained(tiny_world.sft)
    assert type(model).__name__ == "LlamaForCausalLM"
    out = generate(model, tok, ["347+058=", "rev:abc="], max_new_tokens=4)
    assert len(out) == 2 and all(isinstance(o, str) for o in out)
    # evaluate() finds the world's eval prompts from ../world.json and reproduces the stored metrics.
    assert evaluate(tiny_world.sft) == {k: info["metrics"][k] for k in ("task_accuracy", "general_accuracy")}
    # The judge: its own model beside the SFT model, trained on correct problems only, its figures and
    # every file's sha256 in the manifest.
    assert tiny_world.judge == tiny_world.root / "judge" != tiny_world.sft
    assert info["judge"]["data"]["n_flawed"] == 0 and info["judge"]["data"]["n_arithmetic"] == TINY.judge_n_sft
    assert evaluate(tiny_world.judge)["task_accuracy"] == info["judge"]["metrics"]["task_accuracy"]
    assert set(info["sha256"]) >= {"sft/model.safetensors", "judge/model.safetensors"}
    assert info["sha256"] == file_hashes(tiny_world.root)


def test_second_build_reuses_the_cache(tiny_world, monkeypatch):
    import prefdata.world.model as model_module

    stamp = tiny_world.world_json.stat().st_mtime_ns
    monkeypatch.setattr(model_module, "train", lambda *a, **k: pytest.fail("retrained a cached world"))
    again = build_world(TINY, cache=tiny_world.root.parent, judge=True)
    assert again.reused and again.root == tiny_world.root
    assert tiny_world.world_json.stat().st_mtime_ns == stamp
    assert not list(tiny_world.root.parent.glob("*.tmp-*"))


def test_a_world_other_than_the_default_builds_no_judge_unless_asked(tiny_world):
    plain = build_world(TINY, cache=tiny_world.root.parent)
    assert plain.root.name == f"{TINY.key()}-sft" and not plain.reused
    assert plain.info()["judge"] is None and set(plain.info()["sha256"]) == set(file_hashes(plain.root))
    with pytest.raises(FileNotFoundError, match="no judge model"):
        plain.judge
    # The SFT model is the same either way: the judge is trained after it, from its own data stream.
    assert plain.info()["metrics"] == json.loads(tiny_world.world_json.read_text())["metrics"]


def test_config_validation_names_the_values():
    with pytest.raises(ValueError, match=r"hidden_size \(30\).*num_heads \(4\)"):
        WorldConfig(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="flaw_share must be in"):
        WorldConfig(flaw_share=1.5)
    with pytest.raises(ValueError, match="unknown world config fields"):
        WorldConfig.from_dict({"stepz": 3})
    assert WorldConfig().key() == WorldConfig().key() != WorldConfig(steps=999).key()


# --- simulated annotators ------------------------------------------------------------------------

def _comparisons(n: int, seed: int = 0) -> list[tuple[str, str, str, str]]:
    """(pair_id, prompt, a, b): right vs dropped-carry answer, in a random order."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        ex = tasks.arithmetic_problem(rng)
        if ex.carry:
            a, b = ex.completion, dropped_carry(ex).completion
            if rng.random() < 0.5:
                a, b = b, a
            out.append((pair_id(ex.prompt, a, b), ex.prompt, a, b))
    return out


@pytest.mark.parametrize("accuracy,tie_rate", [(0.9, 0.05), (0.7, 0.2), (0.55, 0.0)])
def test_annotators_hit_their_accuracy(accuracy, tie_rate):
    annotator = SimulatedAnnotator("ann", accuracy=accuracy, tie_rate=tie_rate, seed=3)
    pairs = _comparisons(2_000)
    votes = [(annotator.vote(*p), correct_vote(*p[1:])) for p in pairs]
    decided = [(v, t) for v, t in votes if v != "tie"]
    # 3 standard errors of a proportion over 2,000 draws is about 0.03.
    assert abs(1 - len(decided) / len(votes) - tie_rate) < 0.03
    assert abs(sum(v == t for v, t in decided) / len(decided) - accuracy) < 0.035
    assert [annotator.vote(*p) for p in reversed(pairs)] == [v for v, _ in reversed(votes)]  # order-free


def test_annotators_call_equal_pairs_a_tie_at_their_accuracy():
    annotator = SimulatedAnnotator("ann", accuracy=0.8, tie_rate=0.1)
    rng, votes = random.Random(5), []
    for i in range(2_000):
        ex = tasks.arithmetic_problem(rng)
        votes.append(annotator.vote(str(i), ex.prompt, ex.completion, ex.completion + " "))  # both right
    assert abs(votes.count("tie") / len(votes) - 0.8) < 0.035
    assert abs(votes.count("a") - votes.count("b")) / len(votes) < 0.06


def test_annotators_are_deterministic_and_independent():
    pairs = _comparisons(500)
    first = [SimulatedAnnotator("x", 0.7, 0.1, seed=1).vote(*p) for p in pairs]
    assert first == [SimulatedAnnotator("x", 0.7, 0.1, seed=1).vote(*p) for p in pairs]
    assert first != [SimulatedAnnotator("y", 0.7, 0.1, seed=1).vote(*p) for p in pairs]
    assert first != [SimulatedAnnotator("x", 0.7, 0.1, seed=2).vote(*p) for p in pairs]
    with pytest.raises(ValueError, match="accuracy must be in"):
        SimulatedAnnotator("z", accuracy=1.2)


def test_votes_frame_feeds_the_agreement_check():
    from prefdata.checks.agreement import krippendorff_alpha, votes_matrix

    pairs = _comparisons(400)
    frame = pl.DataFrame(
        [p[1:] for p in pairs], schema=["prompt", "response_a", "response_b"], orient="row"
    )  # no pair_id column: derived from content, as the importer does
    careful = votes_frame(frame, annotator_pool(3, accuracy=0.95, tie_rate=0.0))
    sloppy = votes_frame(frame, annotator_pool(3, accuracy=0.6, tie_rate=0.0))
    assert careful.columns == list(VOTE_COLUMNS) and careful.height == 3 * 400
    assert set(careful["vote"].unique()) <= set(VOTE_VALUES)
    assert set(careful["pair_id"]) == {p[0] for p in pairs}
    alphas = [krippendorff_alpha(votes_matrix(v)[2]) for v in (careful, sloppy)]
    assert alphas[0] > 0.7 > 0.2 > alphas[1]


# --- judge metrics -------------------------------------------------------------------------------

def test_judge_agreement_separates_good_biased_and_broken_judges():
    comparisons = [p[1:] for p in _comparisons(200)]
    oracle = judge_agreement(lambda q, a, b: "A" if verify(q, a) else "B", comparisons)
    assert oracle["position_consistency"] == oracle["agreement"] == 1.0
    assert oracle["first_position_rate"] == 0.5
    always_a = judge_agreement(lambda q, a, b: "A", comparisons)
    assert always_a["position_consistency"] == 0.0 and always_a["agreement_decided"] is None
    assert always_a["first_position_rate"] == 1.0
    broken = judge_agreement(lambda q, a, b: None, comparisons)
    assert broken["unparseable_rate"] == 1.0 and broken["agreement"] == 0.0


def test_model_judge_runs_on_the_world_model(tiny_world):
    stats = judge_agreement(model_judge(tiny_world.judge), [p[1:] for p in _comparisons(10)])
    assert stats["n"] == 10 and 0.0 <= stats["position_consistency"] <= 1.0


def test_reference_template_names_the_response_that_matches_the_judges_answer():
    """world-judge-v2: the judge sees only the problem and answers it; the parser names the one
    response whose answer equals the judge's, and gives no verdict when neither or both match."""
    from prefdata.collect.judging import Template

    t = Template.load("world-judge-v2")
    assert t.reference and t.version == "2"
    assert t.messages("347+058=", "0405", "0395")[1]["content"] == "347+058="  # the judge solves, unprimed
    assert t.parse("0405", "0405", "0395") == "A"
    assert t.parse("0405", "0395", "0405") == "B"
    assert t.parse(" 0405\n", "0395", "0405xyz") == "B"  # the first number, as the verifier reads it
    assert t.parse("0405", "0395", "0415") is None  # neither: undecided, never a guess
    assert t.parse("0405", "0405", "0405") is None  # both
    assert t.parse("0405", "405", "0395") is None  # text, not numbers: a different answer is not a match
    for reply in ("", None, "A", "[[A]]"):
        assert t.parse(reply, "0405", "0395") is None


def _reference_server(answer):
    """A scripted chat server answering each world-judge-v2 question (its user text) with answer(question)."""
    from scripted_server import Reply

    return lambda body, index: Reply(content=answer(body["messages"][-1]["content"]))


def _true_answer(question: str) -> str:
    a, op, b = tasks.ARITH_RE.match(question).groups()
    return f"{int(a) + int(b) if op == '+' else int(a) - int(b):04d}"


def test_pairwise_judge_with_the_reference_template_over_http():
    """PairwiseLLMJudge, both orders, against a real HTTP server that answers like a judge that solves
    the problem: matching pairs are consistent verdicts; an answer neither response gives is
    `no_match`, garbage is `unparseable`; both undecided; the first-position rate is measured."""
    from prefdata.collect.judging import JudgeReport, PairToJudge, PairwiseLLMJudge
    from scripted_server import ScriptedServer

    items = [PairToJudge(p, a, b) for _, p, a, b in _comparisons(8)]
    with ScriptedServer(_reference_server(_true_answer)) as server:
        verdicts = PairwiseLLMJudge(server.base_url, "solver", "world-judge-v2", concurrency=2, max_tokens=8).judge(items)
    # Temperature 0 and one question per problem: asked once, not once per order and pair.
    assert len(server.requests) == len({i.prompt for i in items})
    assert all(v.reason == "consistent" and v.template == "world-judge-v2" for v in verdicts)
    assert [v.label for v in verdicts] == [correct_vote(i.prompt, i.response_a, i.response_b) for i in items]
    assert JudgeReport.from_verdicts(verdicts).first_position_rate == 0.5  # one "A" per pair, by construction
    with ScriptedServer(_reference_server(lambda q: "9999")) as server:
        wrong = PairwiseLLMJudge(server.base_url, "solver", "world-judge-v2", concurrency=2).judge(items[:3])
    with ScriptedServer(_reference_server(lambda q: "I think A")) as server:
        garbage = PairwiseLLMJudge(server.base_url, "solver", "world-judge-v2", concurrency=2).judge(items[:3])
    assert all(v.undecided and v.reason == "no_match" for v in wrong)
    assert all(v.undecided and v.reason == "unparseable" for v in garbage)
    assert JudgeReport.from_verdicts(garbage).first_position_rate is None


def test_first_position_rate_counts_replies_that_named_the_first_shown_response():
    from prefdata.collect.judging import JudgeReport, Verdict

    def v(votes, label, reason):
        return Verdict("p", label, None, reason, "llm-pairwise", "m", votes=votes)

    # (a, a): "A" then "B" -> one first; (a, b): "A" then "A" -> two; (b, a): "B" then "B" -> none.
    report = JudgeReport.from_verdicts([v(("a", "a"), "a", "consistent"), v(("a", "b"), None, "position_inconsistent"),
                                        v(("b", "a"), None, "position_inconsistent"), v((None, "a"), None, "unparseable")])
    assert report.first_position_rate == 3 / 7


def test_served_judge_runs_the_real_path(tiny_world, tmp_path):
    """The world's judge through a real `transformers serve` and the chat API, both orders per pair;
    whatever the tiny model replies, every comparison gets a verdict and nothing errors."""
    from prefdata.world import measure_served_judge

    stats = measure_served_judge(tiny_world.judge, n=6, log_dir=tmp_path, concurrency=2)
    assert stats["n"] == 6 and stats["errors"] == 0 and stats["template"] == "world-judge-v2"
    assert all(isinstance(reply, str) for pair in stats["example_replies"] for reply in pair)
    assert 0.0 <= stats["agreement"] <= 1.0 - stats["undecided_rate"] + 1e-9
    assert (tmp_path / "judge-serve.log").is_file()


# --- the shipped world ---------------------------------------------------------------------------

def test_shipped_weights_match_their_manifest_and_load():
    """The default world ships in the package: every file's sha256 is the manifest's, each file is
    small enough to commit, both models load with from_pretrained, and the figures are recorded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = json.loads((SHIPPED / "world.json").read_text())
    assert manifest["key"] == WorldConfig().key() and WorldConfig.from_dict(manifest["config"]) == WorldConfig()
    assert manifest["sha256"] == file_hashes(SHIPPED)
    assert {"sft/model.safetensors", "judge/model.safetensors"} <= set(manifest["sha256"])
    assert all((SHIPPED / name).stat().st_size <= 5_000_000 for name in manifest["sha256"])
    for sub in ("sft", "judge"):
        model = AutoModelForCausalLM.from_pretrained(SHIPPED / sub)
        AutoTokenizer.from_pretrained(SHIPPED / sub)
        assert sum(p.numel() for p in model.parameters()) == manifest["metrics"]["n_params"]
    assert 0.2 <= manifest["metrics"]["task_accuracy"] <= 0.8  # room for the preference data to fill
    assert manifest["judge"]["metrics"]["task_accuracy"] >= 0.85  # the judge can solve what it judges


def test_default_world_is_the_shipped_one_and_builds_nothing(monkeypatch, tmp_path):
    import prefdata.world.model as model_module

    monkeypatch.setattr(model_module, "train", lambda *a, **k: pytest.fail("trained instead of loading the shipped world"))
    monkeypatch.setenv("PREFDATA_WORLD", str(tmp_path))
    world = build_world()
    assert world.root == SHIPPED == shipped_world().root and world.reused
    assert shipped_world(replace(WorldConfig(), steps=999)) is None  # another config is built, not shipped
    assert not list(tmp_path.iterdir())


def test_the_shipped_judge_judges_held_out_comparisons_in_process():
    """The shipped reference judge on the right answer against the dropped carry (the SFT data's flaw),
    both orders: it decides most pairs, and what it decides the verifier confirms."""
    stats = judge_agreement(model_judge(SHIPPED / "judge"), judge_comparisons(200))
    assert stats["position_consistency"] >= 0.6
    assert stats["agreement_decided"] >= 0.9


def test_the_in_process_judge_renders_through_the_one_chat_rendering(monkeypatch):
    """model_judge asks its model what prefdata.models.chat renders (no chat template call of its own),
    and that is the very text the old call wrote: apply_chat_template(messages, tokenize=False) without
    its <bos>, which generate() adds again."""
    import ast
    import inspect

    import prefdata.models.chat as chat
    import prefdata.world.judge as world_judge
    import prefdata.world.model as world_model
    from prefdata.collect.judging import Template
    from prefdata.models.loading import load_tokenizer

    calls = {node.func.attr for node in ast.walk(ast.parse(inspect.getsource(world_judge)))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert "apply_chat_template" not in calls

    asked, rendered = [], []
    monkeypatch.setattr(world_model, "generate", lambda model, tokenizer, prompts, **kw: asked.extend(prompts) or ["0"])
    render_prompt = chat.render_prompt
    monkeypatch.setattr(chat, "render_prompt", lambda *a, **k: rendered.append(render_prompt(*a, **k)) or rendered[-1])
    judge = model_judge(SHIPPED / "judge")
    comparisons = judge_comparisons(3)
    for prompt, a, b in comparisons:
        judge(prompt, a, b)
    tokenizer = load_tokenizer(SHIPPED / "judge")
    template = Template.load(world_judge.JUDGE_TEMPLATE_NAME)
    old = [tokenizer.apply_chat_template(template.messages(*c), tokenize=False).removeprefix(tokenizer.bos_token)
           for c in comparisons]
    assert asked == rendered == old and all(old) and not old[0].startswith(tokenizer.bos_token)


# --- the real thing ------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_rebuild_reproduces_the_shipped_world(tmp_path):
    """`prefdata world build` from scratch lands within 2 points of the shipped figures, SFT and judge."""
    paths = build_world(WorldConfig(), cache=tmp_path, use_shipped=False)
    info, shipped = paths.info(), json.loads((SHIPPED / "world.json").read_text())
    assert paths.root != SHIPPED and not paths.reused
    for built, ship in ((info["metrics"], shipped["metrics"]), (info["judge"]["metrics"], shipped["judge"]["metrics"])):
        assert abs(built["task_accuracy"] - ship["task_accuracy"]) <= 0.02
        assert abs(built["general_accuracy"] - ship["general_accuracy"]) <= 0.02
    assert 0.2 <= info["metrics"]["task_accuracy"] <= 0.8
    assert info["metrics"]["general_accuracy"] >= 0.9


def test_world_as_a_base_model_is_the_world_sft_folder(tmp_path, monkeypatch):
    """`prefdata train --base-model world`, as the train flow's `base_model: world`, starts from the
    demo world's SFT model: a folder the trainers' preflight loads."""
    from prefdata.commands.cli import main
    from prefdata.trainers import TrainResult
    from prefdata.trainers.preflight import check_base_model
    from prefdata.world import WORLD_MODEL, model_or_world

    sft = model_or_world(WORLD_MODEL)
    assert sft == str(build_world().sft)
    check_base_model(sft)  # a model, not a hub name to fetch
    assert model_or_world("org/name") == "org/name" and model_or_world(None) is None

    given = {}

    def train(method, dataset, config, **options):  # what the command hands the trainers
        given.update(options)
        return TrainResult(method, dataset, tmp_path, tmp_path / "README.md", {})

    monkeypatch.setattr("prefdata.trainers.train", train)
    with pytest.raises(SystemExit) as done:
        main(["train", "dpo", "name@v1", "--base-model", WORLD_MODEL, "--output-dir", str(tmp_path)])
    assert done.value.code == 0 and given["base_model"] == sft
