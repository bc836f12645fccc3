"""Sampling, the served sampler and the in-process judge go through the one chat rendering
(prefdata.models.chat): what `generate` (or a server) is given is `chat.encode(tok, chat.render_prompt(...))`;
the demo world's policy, whose template does not write the assistant's turn, stays on plain text;
a collected draft records the rendering in its lineage and says it on its card.

Real tiny models throughout: `tiny_llama` (a char-level Llama whose template is a "role: content"
transcript, which does write the assistant's turn, and whose tokenizer adds <s>), the shipped demo
world, and a real `transformers serve`."""

from __future__ import annotations

import json

import pytest

from prefdata.base.errors import UnusableInput
from prefdata.collect.judging import LocalChat
from prefdata.collect.sampling import OpenAICompatibleSampler, SamplingParams, TransformersSampler
from prefdata.models import chat
from scripted_server import Reply, ScriptedServer

PROMPTS = ["12+7=", "What is 3*4? Answer:", "a"]
SYSTEM = "Be brief."
MESSAGES = [{"role": "system", "content": "You add."}, {"role": "user", "content": "2+2="},
            {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3="}]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)


class GenerateSpy:
    """Wraps a model's `generate` and keeps each row's input ids without its left padding."""

    def __init__(self, model):
        self.rows: list[list[int]] = []
        real = model.generate

        def generate(*args, **kwargs):
            ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
            self.rows += [row[m.bool()].tolist() for row, m in zip(ids, mask)]
            return real(*args, **kwargs)

        model.generate = generate


@pytest.fixture(scope="module")
def world():
    from prefdata.world import build_world

    return build_world()  # the shipped world: nothing is trained


def greedy_reference(path, ids: list[int], max_new_tokens: int = GREEDY.max_new_tokens) -> str:
    """An independent greedy decode of exactly `ids`, one prompt, no padding."""
    import torch

    from prefdata.models.loading import load_causal_lm, load_tokenizer

    tok, model = load_tokenizer(path), load_causal_lm(path).eval()
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
    return tok.decode(out[0, len(ids):], skip_special_tokens=True)


# -- in process -----------------------------------------------------------------------------------


def test_chat_on_feeds_generate_the_rendered_prompt_with_one_bos(tiny_llama):
    sampler = TransformersSampler(tiny_llama, batch_size=8, chat="true", system=SYSTEM)
    tok = sampler.tokenizer
    assert sampler.rendering.record() == {"chat": True, "template_sha256": chat.template_sha256(tok), "system": SYSTEM}
    spy = GenerateSpy(sampler.model)
    out = sampler.sample(PROMPTS + [MESSAGES], 2, SamplingParams(temperature=1.0, max_new_tokens=6, seed=1))
    expected = [chat.encode(tok, chat.render_prompt(tok, sampler.rendering, p)) for p in PROMPTS + [MESSAGES]]
    # n candidates share one row per prompt: generate repeats it inside (num_return_sequences)
    assert spy.rows == expected
    assert tok.decode(spy.rows[0]) == f"<s>system: {SYSTEM}\nuser: 12+7=\nassistant: "  # one BOS, the template's text
    assert all(row.count(tok.bos_token_id) == 1 for row in spy.rows)
    # candidates keep the prompt as given, never the rendered text
    assert [g[0].prompt for g in out[:3]] == PROMPTS and all(c.prompt_messages is None for g in out[:3] for c in g)
    turns = out[3][0]
    assert turns.prompt == "System: You add.\n\nUser: 2+2=\n\nAssistant: 4\n\nUser: 3+3="  # as an imported TRL row
    assert json.loads(turns.prompt_messages) == MESSAGES


def test_auto_is_the_template_on_a_chat_tokenizer_and_false_is_the_raw_text(tiny_llama):
    auto = TransformersSampler(tiny_llama, chat="auto")
    assert auto.rendering.chat and auto.rendering.template_sha256 == chat.template_sha256(auto.tokenizer)
    plain = TransformersSampler(tiny_llama, chat="false")
    assert plain.rendering.record() == {"chat": False, "template_sha256": None, "system": None}
    spy = GenerateSpy(plain.model)
    plain.sample(PROMPTS, 1, GREEDY)
    assert spy.rows == [plain.tokenizer(p)["input_ids"] for p in PROMPTS]  # the prompt itself, after <s>
    # greedy: each sampler's text is what an independent decode of its own rendering gives
    tok = auto.tokenizer
    for sampler in (auto, plain):
        ids = chat.encode(tok, chat.render_prompt(tok, sampler.rendering, PROMPTS[1]))
        assert sampler.sample(PROMPTS[1:2], 1, GREEDY)[0][0].text == greedy_reference(tiny_llama, ids)
    assert auto.sample(PROMPTS[1:2], 1, GREEDY)[0][0].text != plain.sample(PROMPTS[1:2], 1, GREEDY)[0][0].text


def test_the_world_policy_samples_plain_text_as_before(world):
    """Its template writes only the user's text, so auto renders plain text: generate gets the prompt's
    own ids, and the candidates are those of chat false, the same draw for draw."""
    from prefdata.models.loading import load_causal_lm, load_tokenizer
    from prefdata.world import WorldConfig, sampling_prompts
    from prefdata.world.model import generate

    prompts = sampling_prompts(WorldConfig(), 6)
    sampler = TransformersSampler(world.sft)
    assert sampler.rendering.record() == {"chat": False, "template_sha256": None, "system": None}
    assert "does not write the assistant's turn" in sampler.rendering.why
    spy = GenerateSpy(sampler.model)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    sampled = [[c.text for c in g] for g in sampler.sample(prompts, 4, params)]
    assert spy.rows == [sampler.tokenizer(p)["input_ids"] for p in prompts]
    plain = TransformersSampler(world.sft, chat="false")
    assert sampled == [[c.text for c in g] for g in plain.sample(prompts, 4, params)]
    # greedy, the world's own decoder (raw prompts, left-padded) gives the same answers
    reference = generate(load_causal_lm(world.sft).eval(), load_tokenizer(world.sft), prompts, max_new_tokens=6)
    assert [g[0].text for g in sampler.sample(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=6))] == reference
    with pytest.raises(UnusableInput, match="does not write the assistant's turn"):
        TransformersSampler(world.sft, chat="true")


# -- served ---------------------------------------------------------------------------------------


def test_served_chat_api_sends_messages_and_plain_sends_text():
    """A hosted name (no local tokenizer): auto means the chat API, the system prompt as its first turn;
    chat false the completions API with the plain rendering. An explicit api still wins."""
    with ScriptedServer(lambda body, i: Reply(content="x")) as server:
        hosted = OpenAICompatibleSampler(server.base_url, "org/hosted-chat", system=SYSTEM, concurrency=1)
        plain = OpenAICompatibleSampler(server.base_url, "org/hosted-chat", chat="false", system=SYSTEM)
        old = OpenAICompatibleSampler(server.base_url, "org/hosted-chat", api="completions")
        hosted.sample(["hi", MESSAGES], 1, GREEDY)
        plain.sample(["hi"], 1, GREEDY)
        old.sample(["hi"], 1, GREEDY)
    first, turns, text, older = server.requests
    assert first.path.endswith("/chat/completions") and first.body["messages"] == [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    assert turns.body["messages"] == MESSAGES  # a system turn of its own: the system prompt is not added
    assert text.path.endswith("/v1/completions") and text.body["prompt"] == f"{SYSTEM}\n\nhi"
    assert older.path.endswith("/v1/completions") and older.body["prompt"] == "hi"
    assert (hosted.api, plain.api, old.api) == ("chat", "completions", "completions")
    assert hosted.rendering.record() == {"chat": True, "template_sha256": None, "system": SYSTEM}
    assert plain.rendering.record() == {"chat": False, "template_sha256": None, "system": SYSTEM}
    with pytest.raises(ValueError, match="not one of auto, true, false"):
        OpenAICompatibleSampler(server.base_url, "m", chat="maybe")


def test_served_local_model_reads_the_tokens_the_in_process_sampler_gives_it(transformers_serve, tiny_llama):
    """A served model named by its local folder: the prompt is rendered here (the template on, as auto
    resolves it) and sent as text to the completions API, which tokenises it as chat.encode does: greedy
    through the server equals greedy in process, chat on and off."""
    url = transformers_serve.base_url
    for mode in ("auto", "false"):
        served = OpenAICompatibleSampler(url, str(tiny_llama), concurrency=1, chat=mode, system=SYSTEM)
        local = TransformersSampler(tiny_llama, chat=mode, system=SYSTEM)
        assert served.api == "completions" and served.rendering.record() == local.rendering.record()
        assert served.rendering.chat == (mode == "auto")
        assert ([c.text for g in served.sample(PROMPTS[:2], 1, GREEDY) for c in g]
                == [c.text for g in local.sample(PROMPTS[:2], 1, GREEDY) for c in g])


def test_served_chat_api_goes_through_the_servers_template(transformers_serve, tiny_llama):
    """api chat: the messages go to /v1/chat/completions and the server applies the template (and, as
    chat APIs do, adds no special token: no <s> with this template). The rendering records the
    template's sha256, the tokenizer being local."""
    from prefdata.models.loading import load_tokenizer

    tok = load_tokenizer(tiny_llama)
    served = OpenAICompatibleSampler(transformers_serve.base_url, str(tiny_llama), concurrency=1, api="chat",
                                     system=SYSTEM)
    assert served.api == "chat"
    assert served.rendering.record() == {"chat": True, "template_sha256": chat.template_sha256(tok), "system": SYSTEM}
    rendered = chat.render_prompt(tok, served.rendering, PROMPTS[1])
    text = served.sample(PROMPTS[1:2], 1, GREEDY)[0][0].text
    assert text == greedy_reference(tiny_llama, tok(rendered, add_special_tokens=False)["input_ids"])
    assert text != greedy_reference(tiny_llama, tok(PROMPTS[1])["input_ids"])  # not the raw prompt


def test_served_world_policy_stays_on_completions(world):
    with ScriptedServer(lambda body, i: Reply(content="1234")) as server:
        served = OpenAICompatibleSampler(server.base_url, str(world.sft))
        served.sample(["12+7="], 1, GREEDY)
        assert served.api == "completions" and server.requests[0].body["prompt"] == "12+7="
        assert served.rendering.record() == {"chat": False, "template_sha256": None, "system": None}
        with pytest.raises(UnusableInput, match="does not write the assistant's turn"):
            OpenAICompatibleSampler(server.base_url, str(world.sft), chat="true")


# -- the in-process judge -------------------------------------------------------------------------


def test_local_judge_renders_through_the_one_rendering_with_one_bos(tiny_llama):
    judge = LocalChat(str(tiny_llama), max_tokens=3)
    tok = judge.tokenizer
    assert judge.rendering.chat and judge.rendering.template_sha256 == chat.template_sha256(tok)
    spy = GenerateSpy(judge.model)
    conversations = [[{"role": "system", "content": "Judge."}, {"role": "user", "content": "A or B?"}],
                     [{"role": "user", "content": "Which one?"}]]
    replies = judge.replies(conversations)
    assert all(r.error is None for r in replies)
    assert spy.rows == [chat.encode(tok, chat.render_prompt(tok, judge.rendering, c)) for c in conversations]
    # this template writes no <s>; the tokenizer adds it: exactly one, first
    assert all(row[0] == tok.bos_token_id and row.count(tok.bos_token_id) == 1 for row in spy.rows)
    assert tok.decode(spy.rows[1]) == "<s>user: Which one?\nassistant: "


def test_local_judge_keeps_one_bos_when_the_template_writes_it(world):
    """The world judge's template writes <bos> and its tokenizer adds one: the renderer drops the
    template's, so generate still sees one."""
    judge = LocalChat(str(world.judge), max_tokens=2)
    spy = GenerateSpy(judge.model)
    judge.replies([[{"role": "user", "content": "12+7= A: 19 B: 20"}]])
    bos = judge.tokenizer.bos_token_id
    assert spy.rows[0][0] == bos and spy.rows[0].count(bos) == 1


# -- prompt files in TRL's conversational format ---------------------------------------------------


def test_prompt_files_with_messages(tmp_path):
    from prefdata.collect.collection import message_prompts, prompt_key

    sft = tmp_path / "sft.jsonl"  # a messages column: the prompt is what comes before the last reply
    sft.write_text("".join(json.dumps(r) + "\n" for r in (
        {"messages": MESSAGES + [{"role": "assistant", "content": "6"}]}, {"messages": "Plain text too."})))
    assert message_prompts(sft) == [MESSAGES, "Plain text too."]
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"prompt": "Just text."}) + "\n")
    assert message_prompts(text) is None  # text prompts: read_prompts reads them, as always
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "ok"}]}) + "\n" + json.dumps({"prompt": 3}) + "\n")
    with pytest.raises(UnusableInput, match="row 2: prompt is neither text nor a list of {role, content} messages"):
        message_prompts(bad)
    assert prompt_key("a") == "a" and json.loads(prompt_key(MESSAGES)) == MESSAGES
