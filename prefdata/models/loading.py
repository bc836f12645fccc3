"""Where a model path becomes something transformers loads: every policy, judge, reward model and
tokenizer the library opens goes through `load_tokenizer`, `load_causal_lm`, `load_reward_model`,
`load_text_classifier` (the safety check's classifier) or `load_config` here, so a behaviour of model
paths is written once.

A model path is a folder written by `save_pretrained`, a hub name, or a GGUF file (`*.gguf`, as
llama.cpp and many model releases ship them). transformers reads GGUF (`gguf_file=`, dequantising
to float32) but refuses to save what it read, so a GGUF file is converted once into an ordinary
folder (safetensors, the tokenizer with its chat template) and cached by the file's sha256:

    prefdata model import-gguf FILE.gguf OUT_DIR      an explicit conversion
    local_model("FILE.gguf")                          the cached one, wherever a model path goes

A conversion is checked before it is kept: the saved folder's logits equal the GGUF-loaded model's
on a probe prompt. Imports only prefdata.base.errors at load; transformers, torch and gguf on use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

from prefdata.base.errors import PrefdataError, UnusableInput

GGUF_SUFFIX = ".gguf"
DEFAULT_CACHE = Path(".prefdata") / "models"
MANIFEST = "prefdata_gguf.json"  # written last: a folder without it is a crashed conversion
NEEDS_GGUF = "reading GGUF files needs the gguf package: pip install 'prefdata[gguf]'"
PROBE = [{"role": "user", "content": "Name a colour."}]


def cache_dir() -> Path:
    return Path(os.environ.get("PREFDATA_MODELS", DEFAULT_CACHE))


def is_gguf(path: str | Path) -> bool:
    return str(path).lower().endswith(GGUF_SUFFIX)


def local_model(path: str | Path) -> str:
    """`path` as from_pretrained takes it: unchanged, unless it names a GGUF file, which becomes its
    converted folder in the cache ($PREFDATA_MODELS or .prefdata/models), converted on first use."""
    if not is_gguf(path):
        return str(path)
    from filelock import FileLock

    source = _gguf_file(path)
    target = cache_dir() / f"gguf-{sha256_file(source)[:16]}"
    if not (target / MANIFEST).is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock"):
            if not (target / MANIFEST).is_file():  # another process may have converted it meanwhile
                shutil.rmtree(target, ignore_errors=True)
                import_gguf(source, target)
    return str(target)


def load_tokenizer(path: str | Path, **kwargs: Any):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(local_model(path), **kwargs)


def load_causal_lm(path: str | Path, **kwargs: Any):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(local_model(path), **kwargs)


def load_reward_model(path: str | Path, **kwargs: Any):
    """A sequence-classification model (one output per sequence: a reward model's shape)."""
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(local_model(path), **kwargs)


def load_text_classifier(path: str | Path, device: int | str | None = None):
    """A text-classification pipeline (transformers' `pipeline("text-classification")`, every label's
    score: `top_k=None`) over a sequence-classification model and its tokenizer, both loaded here: the
    safety check's optional classifier (checks.content.hf_text_classifier). `device`: the pipeline's
    (default CPU)."""
    from transformers import AutoModelForSequenceClassification, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(local_model(path))
    return pipeline("text-classification", model=model, tokenizer=load_tokenizer(path), top_k=None,
                    device=-1 if device is None else device)


def load_config(path: str | Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(local_model(path))


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def _gguf_file(path: str | Path) -> Path:
    """`path` when it is a regular GGUF file (or a symlink to one); otherwise UnusableInput with its true
    reason: missing, a FIFO or device or folder (told by its mode, never opened: a FIFO blocks, /dev/zero
    never ends), unreadable, or without the GGUF magic bytes."""
    from prefdata.base.files import open_named

    source = Path(path).expanduser()
    with open_named(source, str(path), "; give the path of a .gguf model file",
                    missing="no such GGUF file; give the path of a .gguf model file") as handle:
        if importlib.util.find_spec("gguf") is None:
            raise UnusableInput(NEEDS_GGUF)
        if handle.read(4) != b"GGUF":
            raise UnusableInput(f"{path}: not a GGUF file (it does not start with the GGUF magic bytes)")
    return source


def _output_folder(out_dir: str | Path) -> Path:
    """Where import_gguf writes: `out_dir`, or, when it is a symlink, the folder it points at (followed,
    so the converted folder replaces that empty folder and the link keeps naming it; a dangling link's
    target is made). A link that loops is refused in one line."""
    out = Path(out_dir).expanduser()
    if out.is_symlink():
        try:
            out = out.resolve(strict=False)
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            raise UnusableInput(f"{out_dir}: a symlink that loops; give a new folder for the converted model") from None
        if out.is_symlink():  # resolve(strict=False) stops at a loop on some versions
            raise UnusableInput(f"{out_dir}: a symlink that loops; give a new folder for the converted model")
    return out


def _read_gguf(source: Path):
    """The tokenizer and float32 model transformers makes of a GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name).eval()
    except Exception as exc:  # noqa: BLE001 - a truncated file (struct.error), an unknown architecture
        # (ValueError), a missing key (KeyError)...: the reader's errors are many, the user's fix is one
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise UnusableInput(f"{source}: transformers cannot read this GGUF model ({type(exc).__name__}: {detail}); "
                            "is the file complete, and its architecture one transformers reads?") from None
    return tokenizer, model


def _probe_logits(model, tokenizer):
    import torch

    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(PROBE, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        ids = ids["input_ids"]
    else:
        ids = tokenizer(PROBE[0]["content"], return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        return model(input_ids=ids).logits


def import_gguf(gguf_path: str | Path, out_dir: str | Path) -> dict:
    """Convert a GGUF file into an ordinary model folder at `out_dir` (which must not exist or be
    empty; a symlink to such a folder is followed): float32 safetensors, config, generation config and the tokenizer with its chat template.
    Kept only when the folder's logits equal the GGUF-loaded model's on a probe prompt. Returns the
    manifest it writes (source name, sha256, probe difference), never a path of this machine."""
    from transformers import AutoModelForCausalLM

    source = _gguf_file(gguf_path)
    out = _output_folder(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UnusableInput(f"{out}: exists and is not an empty folder; give a new folder for the converted model")
    tokenizer, gguf_model = _read_gguf(source)
    # The loaded model carries quantization_config (gguf), which save_pretrained refuses even though
    # its weights are plain float32 by now: build the same architecture without it and move them over.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=gguf_model.dtype)
    plain.load_state_dict(gguf_model.state_dict())
    plain.generation_config = gguf_model.generation_config
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        expected = _probe_logits(gguf_model, tokenizer)
        del plain, gguf_model
        got = _probe_logits(AutoModelForCausalLM.from_pretrained(tmp).eval(), load_tokenizer(tmp))
        difference = float((got - expected).abs().max())
        if got.shape != expected.shape or difference != 0.0:
            raise PrefdataError(f"{source.name}: the converted folder's logits differ from the GGUF model's "
                                f"(max difference {difference:g}); nothing was kept")
        manifest = {"source": source.name, "sha256": sha256_file(source), "bytes": source.stat().st_size,
                    "architecture": config.model_type, "dtype": "float32",
                    "chat_template": bool(getattr(tokenizer, "chat_template", None)),
                    "probe_max_abs_logit_difference": difference}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            out.rmdir()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest
