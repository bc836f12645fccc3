"""The embedded demo world: the whole pipeline in miniature, with no GPU and no hub.

Two skills (tasks.py): 2-3 digit arithmetic, "347+058=" -> "0405", scored by an exact verifier; and
string reversal, "rev:abcde=" -> "edcba", used only to measure the alignment tax. The SFT data drops
the units carry in a `flaw_share` of carrying problems, so the SFT model (a ~1.1M-parameter Llama
with a char-level tokenizer, trained from scratch on two CPU threads) leaves room that a verifier
reward or preference pairs can fill and more SFT cannot. A judge model of the same shape, trained
longer on correct problems only, solves them (reference-guided judging, judge.py). The default
world ships in the package (weights/, with its manifest weights/world.json), so `build_world()`
returns it; any other config is trained once and cached under .prefdata/world/<config key>/, and
`prefdata world build` rebuilds the default from scratch. The saved models and tokenizer load with
the ordinary `AutoModelForCausalLM` / `AutoTokenizer.from_pretrained(path)`, so a real model can
take their place by path. Simulated annotators (annotators.py) vote with a known accuracy; judge.py
measures any pairwise judge against the verifier.

The chat demo's data (for SmolLM2-135M-Instruct, not the tiny models): instructions.py holds format
constraints (IFEval's checkers from if-verifiable where they overlap), the train and held-out prompts
that carry them (disjoint topics, shipped in chat_data/) and `verify(prompt, completion)`, which
recovers the constraint from the prompt; facts.py holds the general-skill questions and their scorer;
chat_world.py finds and converts the model and scores it (held-out following, general skill).

Modules: config (WorldConfig), tasks, tokenizer (the char-level tokenizer), model (the Llama
config, training and greedy decoding through prefdata.models.generation), build (build_world,
the shipped weights and the cache), judge, annotators, instructions, facts, chat_world.

Heavy libraries (torch, transformers, polars) are imported only inside the functions that use them.

May import: prefdata.base, prefdata.models, prefdata.data, prefdata.collect (its judge is a pairwise judge).
"""

from prefdata.world.annotators import SimulatedAnnotator, annotator_pool, correct_vote, votes_frame
from prefdata.world.build import (WORLD_MODEL, WorldPaths, build_world, evaluate, heldout, model_or_world,
                                  sampling_prompts, sft_data)
from prefdata.world.config import WorldConfig
from prefdata.world.judge import judge_agreement, judge_comparisons, measure_served_judge, model_judge, verdict_agreement
from prefdata.world.model import general_accuracy, generate, task_accuracy
from prefdata.world.tasks import Example, dropped_carry, verify, verify_reverse
from prefdata.world.tokenizer import build_tokenizer

__all__ = [
    "Example", "SimulatedAnnotator", "WORLD_MODEL", "WorldConfig", "WorldPaths", "annotator_pool", "build_tokenizer",
    "build_world", "correct_vote", "dropped_carry", "evaluate", "general_accuracy", "generate", "heldout",
    "judge_agreement", "judge_comparisons", "measure_served_judge", "model_judge", "model_or_world", "sampling_prompts", "sft_data", "task_accuracy", "verify",
    "verdict_agreement", "verify_reverse", "votes_frame",
]
