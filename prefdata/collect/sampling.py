"""Candidate responses from a policy (the SFT model), and pairs built from them.

One method, three backends:

    sample(prompts, n, params) -> list[list[Candidate]]     n candidates for every prompt, in order

    TransformersSampler(path)      in process: batched `generate` with left padding, the KV cache and
                                   num_return_sequences=n (one forward pass serves n candidates)
    OpenAICompatibleSampler(url)   any OpenAI-compatible server (vLLM, TGI, `transformers serve`,
                                   hosted APIs), requests in a bounded thread pool
    VLLMSampler(path)              in-process vLLM, when it is installed

Every Candidate carries what the checklist's `same_policy` item needs to verify that both sides
of a pair come from one policy and one sampling setup: the model, its revision (hub commit or a
hash of the local checkpoint), the sampling params and the backend. Pairs name their models as
`model@revision`, so two checkpoints saved under one path are two policies.
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
# Pairing lives in its own module (one job each); re-exported here because it is the next step.
from prefdata.collect.pairing import build_pairs, sampler_lineage  # noqa: F401
from prefdata.data.records import Candidate

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_HUB_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{40})(/|$)")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0   # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0             # 0 = off. Explicit, because transformers otherwise applies top_k=50 silently
    max_new_tokens: int = 64
    seed: int = 0

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams: temperature={self.temperature} must be >= 0, top_p={self.top_p} in (0, 1], "
                             f"top_k={self.top_k} >= 0 and max_new_tokens={self.max_new_tokens} >= 1")

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    def as_dict(self) -> dict:
        return asdict(self)


class Sampler(Protocol):
    def sample(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Candidate]]: ...


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


def _check_n(prompts: list[str], n: int) -> None:
    if n < 1:
        raise ValueError(f"n={n}: ask for at least one candidate per prompt")
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")


class TransformersSampler:
    """Batched sampling in process. `batch_size` prompts go through one `generate` call with
    num_return_sequences=n, so a call produces batch_size * n candidates. Reproducible: one
    torch.manual_seed(params.seed) per `sample` call, so the same prompts, n, params and batch_size
    give the same candidates (a different batch_size draws the random numbers in another order)."""

    name = "transformers"

    def __init__(self, model_path: str | Path, device: str = "cpu", batch_size: int = 16):
        from prefdata.models.loading import load_causal_lm, load_tokenizer

        self.model_path, self.batch_size = str(model_path), batch_size
        # Left padding: generation appends on the right, so every row's last position must be a real token.
        self.tokenizer = load_tokenizer(model_path, padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = load_causal_lm(model_path).to(device).eval()
        self.revision = getattr(self.model.config, "_commit_hash", None) or model_revision(model_path)
        # Chat checkpoints often end turns with several ids (Llama 3: <|end_of_text|>, <|eot_id|>): stop at any.
        eos = self.model.generation_config.eos_token_id
        eos = eos if eos is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}

    def _generation_config(self, n: int, params: SamplingParams):
        from transformers import GenerationConfig

        sampling = dict(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k) if params.do_sample else {}
        return GenerationConfig(do_sample=params.do_sample, max_new_tokens=params.max_new_tokens, num_return_sequences=n,
                                use_cache=True, pad_token_id=self.tokenizer.pad_token_id,
                                eos_token_id=sorted(self.eos_ids) or None, **sampling)

    def sample(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Candidate]]:
        import torch

        _check_n(prompts, n)
        torch.manual_seed(params.seed)
        config = self._generation_config(n, params)
        out: list[list[Candidate]] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start:start + self.batch_size]
            enc = self.tokenizer(batch, return_tensors="pt", padding=True).to(self.model.device)
            with torch.inference_mode():
                ids = self.model.generate(**enc, generation_config=config)
            new = ids[:, enc["input_ids"].shape[1]:].tolist()  # rows: prompt 0 x n, prompt 1 x n, ...
            for i, prompt in enumerate(batch):
                group = []
                for j in range(n):
                    tokens = new[i * n + j]
                    # A row that stopped early is padded after its eos; cut there, not at the first pad.
                    stop = next((k for k, t in enumerate(tokens) if t in self.eos_ids), None)
                    text = self.tokenizer.decode(tokens[:stop], skip_special_tokens=True)
                    group.append(Candidate(prompt, text, self.model_path, self.revision, params.as_dict(), self.name, j,
                                           "stop" if stop is not None else "length"))
                out.append(group)
        return out


def _request_seed(seed: int, prompt_index: int, candidate_index: int) -> int:
    """A distinct, reproducible seed per request: servers that seed per request (transformers serve
    reseeds its global RNG) would otherwise return n identical samples for one prompt."""
    return int(hashlib.sha256(f"{seed}:{prompt_index}:{candidate_index}".encode()).hexdigest()[:8], 16)


@dataclass
class OpenAICompatibleSampler:
    """Candidates from an OpenAI-compatible server. `api="completions"` sends the raw prompt (a base
    or SFT policy sampled on its own format); `api="chat"` sends it as one user message through the
    server's chat template (hosted chat models). Servers may return fewer choices than `n` (transformers
    serve always returns one), so each prompt is asked again for the remainder until it has n.

    `send_generation_config`: transformers serve only switches sampling on through its own
    `generation_config` field (temperature alone leaves do_sample at the model's default), so the
    params also go there; turn it off for servers that reject unknown fields (hosted APIs).
    Reproducibility: vLLM honours per-request seeds; transformers serve reseeds one global RNG per
    request, so its samples repeat only with concurrency=1."""

    base_url: str
    model: str
    api_key_env: str | None = None
    concurrency: int = 4
    api: str = "completions"
    send_generation_config: bool = True
    revision: str | None = None  # of the served model; default: the hash of `model` when it is a local path
    timeout: float = 120.0
    max_retries: int = 3
    _client: object = field(default=None, init=False, repr=False)
    name = "openai"

    def __post_init__(self):
        from prefdata.collect.openai_http import make_client

        if self.api not in ("completions", "chat") or self.concurrency < 1:
            raise ValueError(f"OpenAICompatibleSampler: api={self.api!r} must be 'completions' or 'chat' and "
                             f"concurrency={self.concurrency} >= 1")
        self.revision = self.revision or model_revision(self.model)
        self._client = make_client(self.base_url, self.api_key_env, self.timeout)

    def _request(self, prompt: str, k: int, params: SamplingParams, seed: int) -> tuple[list[tuple[str, str | None]], str | None]:
        from prefdata.collect.openai_http import RetryPolicy, call_with_retries

        kwargs = dict(model=self.model, n=k, max_tokens=params.max_new_tokens, temperature=params.temperature,
                      top_p=params.top_p, seed=seed)
        if self.send_generation_config:
            config = {"do_sample": params.do_sample, "max_new_tokens": params.max_new_tokens}
            if params.do_sample:
                config.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
            kwargs["extra_body"] = {"generation_config": json.dumps(config)}
        if self.api == "chat":
            call = lambda: self._client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kwargs)  # noqa: E731
        else:
            call = lambda: self._client.completions.create(prompt=prompt, **kwargs)  # noqa: E731
        response, _ = call_with_retries(call, RetryPolicy(max_retries=self.max_retries))
        texts = [((c.message.content or "") if self.api == "chat" else c.text, c.finish_reason) for c in response.choices]
        return texts, getattr(response, "system_fingerprint", None)

    def sample(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Candidate]]:
        _check_n(prompts, n)
        got: list[list[Candidate]] = [[] for _ in prompts]
        with ThreadPoolExecutor(self.concurrency) as pool:
            while short := [i for i in range(len(prompts)) if len(got[i]) < n]:
                asks = {i: n - len(got[i]) for i in short}
                seeds = {i: _request_seed(params.seed, i, len(got[i])) for i in short}
                futures = {i: pool.submit(self._request, prompts[i], asks[i], params, seeds[i]) for i in short}
                for i, future in futures.items():
                    texts, fingerprint = future.result()
                    if not texts:
                        raise RuntimeError(f"{self.base_url}: the server returned no choices for prompt {i}")
                    for text, finish in texts[:asks[i]]:
                        got[i].append(Candidate(prompts[i], text, self.model, self.revision or fingerprint,
                                                params.as_dict(), self.name, len(got[i]), finish, seeds[i]))
        return got


class VLLMSampler:
    """In-process vLLM (GPU). Only constructed where `import vllm` works."""

    name = "vllm"

    def __init__(self, model_path: str | Path, **engine_kwargs):
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

    def sample(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Candidate]]:
        _check_n(prompts, n)
        sp = self._vllm.SamplingParams(n=n, temperature=params.temperature, top_p=params.top_p,
                                       top_k=params.top_k or -1, max_tokens=params.max_new_tokens, seed=params.seed)
        return [[Candidate(p, c.text, self.model_path, self.revision, params.as_dict(), self.name, j, c.finish_reason)
                 for j, c in enumerate(out.outputs)] for p, out in zip(prompts, self._llm.generate(prompts, sp))]

