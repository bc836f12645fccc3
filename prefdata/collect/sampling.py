"""Candidate responses from a policy (the SFT model), and pairs built from them.

One method, three backends:

    sample(prompts, n, params) -> list[list[Candidate]]     n candidates for every prompt, in order

    TransformersSampler(path)      in process: the one generate loop (prefdata.models.generation),
                                   left-padded batches, num_return_sequences=n (one forward pass
                                   serves n candidates)
    OpenAICompatibleSampler(url)   any OpenAI-compatible server (vLLM, TGI, `transformers serve`,
                                   hosted APIs), requests in a bounded thread pool
    VLLMSampler(path)              in-process vLLM, when it is installed (its own engine's generate)

The two in-process backends also serve an LLM judge (judging.LocalChat): built with `judge=True`
(the chat template on, a template that drops the assistant's turn accepted: a judge's replies are
read, never trained on), `greedy(prompts, max_new_tokens)` gives one greedy reply per prompt and
leaves torch's RNG alone.

Every Candidate carries what the checklist's `same_policy` item needs to verify that both sides
of a pair come from one policy and one sampling setup: the model, its revision (hub commit or a
hash of the local checkpoint), the sampling params and the backend. Pairs name their models as
`model@revision`, so two checkpoints saved under one path are two policies.

Prompts reach the model through the one chat rendering (prefdata.models.chat): every sampler takes
`chat` (auto, true, false) and a `system` prompt, resolves them once into `.rendering` (what a draft
version's lineage records as `lineage["rendering"]`, and what the trainers render their data with)
and renders each prompt with `chat.render_prompt`. A prompt is plain text or a list of `{role,
content}` messages (TRL's conversational format); a candidate keeps the prompt as the user gave it:
its text (`prompt_text`) and, for messages, their JSON (`prompt_messages`), never the rendered input.
"""

from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from prefdata.base.errors import UnusableInput
from prefdata.models.chat import Rendering, chat_mode, render_prompt, resolve, template_sha256, turns
# Pairing lives in its own module (one job each); re-exported here because it is the next step.
from prefdata.collect.pairing import build_pairs, sampler_lineage  # noqa: F401
from prefdata.data.records import Candidate, messages_json, render_turns

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_HUB_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{40})(/|$)")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0   # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0             # 0 = off. Explicit, because transformers otherwise applies top_k=50 silently
    # Required (None is refused): how long a policy's answers may be has one default, the collect flow's
    # and `prefdata collect`'s (Policy.max_new_tokens, resolved by the model it samples), never one here.
    max_new_tokens: int | None = None
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens is None:
            raise TypeError("SamplingParams: max_new_tokens is required (the caller's, e.g. the collect policy's "
                            "max_new_tokens): there is no default here")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams: temperature={self.temperature} must be >= 0, top_p={self.top_p} in (0, 1], "
                             f"top_k={self.top_k} >= 0 and max_new_tokens={self.max_new_tokens} >= 1")

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    def as_dict(self) -> dict:
        return asdict(self)


Prompt = str | list[dict[str, str]]  # plain text, or {role, content} messages


class Sampler(Protocol):
    rendering: Rendering

    def sample(self, prompts: list[Prompt], n: int, params: SamplingParams) -> list[list[Candidate]]: ...


def prompt_text(prompt: Prompt) -> str:
    """The text a record carries for a prompt: plain text as it is; messages as an imported
    conversation's prompt reads (records.render_turns), their turns kept beside it in `prompt_messages`."""
    return prompt if isinstance(prompt, str) else render_turns(prompt)


def prompt_messages(prompt: Prompt) -> str | None:
    """The JSON of a message prompt's turns (a record's `prompt_messages`); None for plain text."""
    return None if isinstance(prompt, str) else messages_json(prompt)


def _resolved(tokenizer, chat: str, system: str | None, model: str, judge: bool = False) -> Rendering:
    """The rendering of a policy's prompts; `judge`: of a judge's conversations, always through the
    chat template (a judge is asked as a chat model is), which need not write the assistant's turn."""
    if judge:
        try:
            return resolve(tokenizer, "true", system, replies=False)
        except ValueError:
            raise UnusableInput(f"judge model {model}: its tokenizer has no chat template; an LLM judge needs a chat "
                                "(instruct) model, or use a verifier (rule:NAME)") from None
    try:
        return resolve(tokenizer, chat, system)
    except ValueError as error:  # chat: true without a usable template: one line, with the fix
        raise UnusableInput(f"policy {model}: {error}") from None


def model_revision(path: str | Path) -> str | None:
    """The hub commit when `path` is a hub-cache snapshot; else a hash of config.json and the weight
    files' names and sizes (cheap, and changes whenever a checkpoint is re-saved with new shapes or
    shards; weights retrained in place to identical sizes need the commit or a content hash); for a
    GGUF file, the hash of its content; None when `path` is no local directory or GGUF file."""
    from prefdata.models.loading import is_gguf, sha256_file

    path = Path(path)
    if is_gguf(path) and path.is_file():
        return "sha256:" + sha256_file(path)[:16]
    if not path.is_dir():
        return None
    found = _HUB_SNAPSHOT.search(path.resolve().as_posix())
    if found:
        return found.group(1)
    h = hashlib.sha256()
    config = path / "config.json"
    h.update(config.read_bytes() if config.is_file() else b"")
    for f in sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES):
        h.update(f"{f.name}:{f.stat().st_size}\n".encode())
    return "sha256:" + h.hexdigest()[:16]


def _check_n(prompts: list[Prompt], n: int) -> None:
    if n < 1:
        raise ValueError(f"n={n}: ask for at least one candidate per prompt")
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")
    bad = next((p for p in prompts if not (isinstance(p, str) or (isinstance(p, list) and p and all(
        isinstance(m, dict) and {"role", "content"} <= m.keys() for m in p)))), None)
    if bad is not None:
        raise TypeError(f"a prompt is a string or a non-empty list of {{role, content}} messages, not {bad!r:.80}")


class TransformersSampler:
    """Batched sampling in process, through the one generate loop (prefdata.models.generation):
    `batch_size` prompts go through one `generate` call with num_return_sequences=n, so a call
    produces batch_size * n candidates, each cut at the model's first stop id (chat checkpoints often
    have several: Llama 3's <|end_of_text|> and <|eot_id|>). Reproducible: torch's RNG is seeded
    once per `sample` call (params.seed), so the same prompts, n, params and batch_size give the same
    candidates (a different batch_size draws the random numbers in another order).

    Each prompt is rendered (`chat`, `system`: prefdata.models.chat) and tokenised as the trainers
    tokenise it, `tokenizer(text)` with its special tokens, so a row's ids are
    `chat.encode(tokenizer, chat.render_prompt(...))` behind its left padding. `judge=True`: the
    backend of an in-process LLM judge (see the module doc)."""

    name = "transformers"

    def __init__(self, model_path: str | Path, device: str = "cpu", batch_size: int = 16, chat: str = "auto",
                 system: str | None = None, judge: bool = False):
        from prefdata.models.generation import stop_ids
        from prefdata.models.loading import load_causal_lm, load_tokenizer

        self.model_path, self.batch_size = str(model_path), batch_size
        self.tokenizer = load_tokenizer(model_path, padding_side="left")
        self.rendering = _resolved(self.tokenizer, chat, system, self.model_path, judge)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = load_causal_lm(model_path).to(device).eval()
        self.revision = getattr(self.model.config, "_commit_hash", None) or model_revision(model_path)
        self.stop_ids = stop_ids(self.model, self.tokenizer)

    def _generate(self, prompts: list[Prompt], decoding, seed: int | None):
        from prefdata.models.generation import generate

        texts = [render_prompt(self.tokenizer, self.rendering, p) for p in prompts]
        return generate(self.model, self.tokenizer, texts, decoding, self.stop_ids, seed=seed,
                        batch_size=self.batch_size)

    def sample(self, prompts: list[Prompt], n: int, params: SamplingParams) -> list[list[Candidate]]:
        from prefdata.models.generation import Decoding

        _check_n(prompts, n)
        decoding = Decoding(params.max_new_tokens, params.temperature, params.top_p, params.top_k, n)
        rows = self._generate(prompts, decoding, params.seed)  # prompt 0 x n, prompt 1 x n, ...
        return [[Candidate(prompt_text(prompt), row.text, self.model_path, self.revision, params.as_dict(), self.name,
                           j, row.finish, prompt_messages=prompt_messages(prompt))
                 for j, row in enumerate(rows[i * n:(i + 1) * n])] for i, prompt in enumerate(prompts)]

    def greedy(self, prompts: list[Prompt], max_new_tokens: int) -> list[str]:
        """One greedy reply per prompt, torch's RNG left as it is (a judge runs beside sampling)."""
        from prefdata.models.generation import Decoding

        return [row.text for row in self._generate(prompts, Decoding(max_new_tokens), seed=None)]


def _request_seed(seed: int, prompt_index: int, candidate_index: int) -> int:
    """A distinct, reproducible seed per request: servers that seed per request (transformers serve
    reseeds its global RNG) would otherwise return n identical samples for one prompt."""
    return int(hashlib.sha256(f"{seed}:{prompt_index}:{candidate_index}".encode()).hexdigest()[:8], 16)


@dataclass
class OpenAICompatibleSampler:
    """Candidates from an OpenAI-compatible server, each prompt rendered by the one chat rendering
    (prefdata.models.chat) wherever that can be done here:

      `model` a local folder (or .gguf file) with a tokenizer: `chat` (auto, true, false) resolves on
          that tokenizer as in-process sampling does (auto: the template when it writes the
          assistant's turn, so the demo world's policy stays on plain text), the prompt is rendered
          here and sent as text to the completions API, which tokenises it as `chat.encode` does:
          the served policy reads the very tokens the in-process sampler and the trainers give it
          (a server's chat API tokenises its template without special tokens, one BOS short where
          the tokenizer adds it and the template does not write it);
      a hosted name (no local tokenizer): chat on (auto, true) sends the prompt as messages
          (`chat.turns`, the system prompt first) to the chat completions API, whose server applies
          its own template; chat false sends the plain rendering to the completions API.

    `api` ("chat" or "completions"), when given, wins (the older spelling): "chat" always sends
    messages; "completions" sends the plain rendering, or with chat="true" the local template's.
    `.api` is the API used and `.rendering` what the draft's lineage records (the template's sha256
    only when the tokenizer is local). Servers may return fewer choices than `n` (transformers serve
    always returns one), so each prompt is asked again for the remainder until it has n.

    `send_generation_config`: transformers serve only switches sampling on through its own
    `generation_config` field (temperature alone leaves do_sample at the model's default), so the
    params also go there; turn it off for servers that reject unknown fields (hosted APIs).
    Reproducibility: vLLM honours per-request seeds; transformers serve reseeds one global RNG per
    request, so its samples repeat only with concurrency=1."""

    base_url: str
    model: str
    api_key_env: str | None = None
    concurrency: int = 4
    api: str | None = None  # None: `chat` decides; "chat" | "completions": this API, whatever `chat` says
    send_generation_config: bool = True
    revision: str | None = None  # of the served model; default: the hash of `model` when it is a local path
    timeout: float = 120.0
    max_retries: int = 3
    chat: str = "auto"
    system: str | None = None
    rendering: Rendering = field(default=None, init=False)
    _tokenizer: object = field(default=None, init=False, repr=False)
    _client: object = field(default=None, init=False, repr=False)
    name = "openai"

    def __post_init__(self):
        from prefdata.collect.openai_http import make_client

        mode = chat_mode(self.chat)
        if self.api not in (None, "completions", "chat") or self.concurrency < 1:
            raise ValueError(f"OpenAICompatibleSampler: api={self.api!r} must be 'completions', 'chat' or None and "
                             f"concurrency={self.concurrency} >= 1")
        self._tokenizer = _local_tokenizer(self.model)
        self.rendering, self.api = self._rendering(mode)
        self.revision = self.revision or model_revision(self.model)
        self._client = make_client(self.base_url, self.api_key_env, self.timeout)

    def _rendering(self, mode: str) -> tuple[Rendering, str]:
        tok, system, who = self._tokenizer, self.system or None, f"policy {self.model}"
        if self.api == "chat":  # messages: the server applies its template, whatever it writes
            return Rendering(True, template_sha256(tok) if tok is not None else None, system, "api: chat"), "chat"
        if tok is not None and (self.api is None or mode == "true"):  # rendered here, sent as text
            return _resolved(tok, mode, system, who), "completions"
        if self.api == "completions":
            if mode == "true":
                raise UnusableInput(f"{who}: api completions with chat: true renders the prompt here, and needs the "
                                    "model's tokenizer in a local folder; give its path as the model, or use api chat")
            return Rendering(False, None, system, "api: completions"), "completions"
        chat = mode != "false"  # a hosted name: its server holds the template
        why = "a served model without a local tokenizer" + ("" if chat else ", chat: false")
        return Rendering(chat, None, system, why), "chat" if chat else "completions"

    def _input(self, prompt: Prompt) -> list[dict[str, str]] | str:
        """What the API is sent for a prompt: its messages (chat) or its rendered text (completions)."""
        if self.api == "chat":
            return turns(prompt, self.rendering.system)
        return render_prompt(self._tokenizer, self.rendering, prompt)

    def _request(self, given: list[dict[str, str]] | str, k: int, params: SamplingParams,
                 seed: int) -> tuple[list[tuple[str, str | None]], str | None]:
        from prefdata.collect.openai_http import RetryPolicy, call_with_retries

        kwargs = dict(model=self.model, n=k, max_tokens=params.max_new_tokens, temperature=params.temperature,
                      top_p=params.top_p, seed=seed)
        if self.send_generation_config:
            config = {"do_sample": params.do_sample, "max_new_tokens": params.max_new_tokens}
            if params.do_sample:
                config.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
            kwargs["extra_body"] = {"generation_config": json.dumps(config)}
        if self.api == "chat":
            call = lambda: self._client.chat.completions.create(messages=given, **kwargs)  # noqa: E731
        else:
            call = lambda: self._client.completions.create(prompt=given, **kwargs)  # noqa: E731
        response, _ = call_with_retries(call, RetryPolicy(max_retries=self.max_retries))
        texts = [((c.message.content or "") if self.api == "chat" else c.text, c.finish_reason) for c in response.choices]
        return texts, getattr(response, "system_fingerprint", None)

    def sample(self, prompts: list[Prompt], n: int, params: SamplingParams) -> list[list[Candidate]]:
        _check_n(prompts, n)
        got: list[list[Candidate]] = [[] for _ in prompts]
        given = [self._input(p) for p in prompts]  # here, not in the threads: one tokenizer is never shared by two
        with ThreadPoolExecutor(self.concurrency) as pool:
            while short := [i for i in range(len(prompts)) if len(got[i]) < n]:
                asks = {i: n - len(got[i]) for i in short}
                seeds = {i: _request_seed(params.seed, i, len(got[i])) for i in short}
                futures = {i: pool.submit(self._request, given[i], asks[i], params, seeds[i]) for i in short}
                for i, future in futures.items():
                    texts, fingerprint = future.result()
                    if not texts:
                        raise RuntimeError(f"{self.base_url}: the server returned no choices for prompt {i}")
                    for text, finish in texts[:asks[i]]:
                        got[i].append(Candidate(prompt_text(prompts[i]), text, self.model, self.revision or fingerprint,
                                                params.as_dict(), self.name, len(got[i]), finish, seeds[i],
                                                prompt_messages(prompts[i])))
        return got


def _local_tokenizer(model: str):
    """The tokenizer of a served model named by its local folder (or .gguf file); None for a hosted
    name, or a folder without a tokenizer."""
    from prefdata.models.loading import is_gguf, load_tokenizer

    path = Path(model)
    if not (path.is_dir() or (is_gguf(path) and path.is_file())):
        return None
    try:
        return load_tokenizer(path)
    except Exception:  # noqa: BLE001 - no readable tokenizer there: the server's template decides, as for a hosted name
        return None


class VLLMSampler:
    """In-process vLLM (GPU). Only constructed where `import vllm` works. Prompts are rendered with
    the engine's tokenizer (`chat`, `system`: prefdata.models.chat) and given to `generate` as text,
    which vLLM tokenises with the special tokens added, as `chat.encode` does."""

    name = "vllm"

    def __init__(self, model_path: str | Path, chat: str = "auto", system: str | None = None, judge: bool = False,
                 **engine_kwargs):
        try:
            import vllm
        except ImportError as error:
            raise UnusableInput(
                "VLLMSampler needs vLLM, which is not installed in this environment: `pip install vllm` (Linux, "
                "CUDA GPU). Without it, serve the model (`vllm serve PATH` or `transformers serve`) and use "
                "OpenAICompatibleSampler(base_url=...)") from error
        self.model_path = str(model_path)
        self.revision = model_revision(model_path)
        self._vllm, self._llm = vllm, vllm.LLM(model=self.model_path, **engine_kwargs)
        self.tokenizer = self._llm.get_tokenizer()
        self.rendering = _resolved(self.tokenizer, chat, system, self.model_path, judge)

    def sample(self, prompts: list[Prompt], n: int, params: SamplingParams) -> list[list[Candidate]]:
        _check_n(prompts, n)
        sp = self._vllm.SamplingParams(n=n, temperature=params.temperature, top_p=params.top_p,
                                       top_k=params.top_k or -1, max_tokens=params.max_new_tokens, seed=params.seed)
        texts = [render_prompt(self.tokenizer, self.rendering, p) for p in prompts]
        return [[Candidate(prompt_text(p), c.text, self.model_path, self.revision, params.as_dict(), self.name, j,
                           c.finish_reason, prompt_messages=prompt_messages(p))
                 for j, c in enumerate(out.outputs)] for p, out in zip(prompts, self._llm.generate(texts, sp))]

    def greedy(self, prompts: list[Prompt], max_new_tokens: int) -> list[str]:
        """One greedy reply per prompt (temperature 0): an in-process judge's backend."""
        sp = self._vllm.SamplingParams(n=1, temperature=0.0, max_tokens=max_new_tokens)
        texts = [render_prompt(self.tokenizer, self.rendering, p) for p in prompts]
        # vLLM's own engine, not transformers' generate: prefdata.models.generation does not drive it
        return [out.outputs[0].text for out in self._llm.generate(texts, sp)]
