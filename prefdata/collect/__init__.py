"""Collecting preferences: candidates from a policy, pairs, a judge's verdicts, who labels what.

    sampling     candidate replies (transformers, OpenAI-compatible servers, vLLM)
    pairing      comparison records from one prompt's candidates
    judging      LLM, reward-model and rule judges; their prompt templates in templates/judge/
    routing      each pair to the judge, to humans (Argilla), or both
    collection   judged, routed and voted comparisons -> the tables of a draft version
    openai_http  the one client of OpenAI-compatible servers, with its retries
    local_serve  a real `transformers serve` on 127.0.0.1, stopped by its own pid

Sampling, pairing and judging never import the store or the checks.

May import: prefdata.base, prefdata.models, prefdata.data.
"""
