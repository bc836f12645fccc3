"""Quality checks: the 12-point checklist as pure functions over polars frames.

One rule file per area (structure, content, dedup, agreement, direction, isolation, template_fit,
gx_suite); the engines they need apart (ngrams, tfidf, minhash, frames); the registry of every
check and its traits (registry); the runner (checklist); the same checks over Parquet shards
(batched, shards) and on Dask (distributed).

May import: prefdata.base, prefdata.data (the record's columns and ids), prefdata.models
(template_fit loads the tokenizer whose template it checks).
"""
