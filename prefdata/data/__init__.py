"""Preference data on disk and in memory: the record, reading and importing files, the store.

    records     the pair and comparison columns, content ids, text normalisation
    card        the dataset card (README.md with its Hugging Face header)
    readers     rows of JSONL, JSON, CSV and Parquet files, compressed or not
    formats     TRL, TRL chat, HH-RLHF and comparisons rows -> canonical records
    votes       several annotators' votes -> a label (majority, Dawid-Skene)
    rows        the per-row checks and quarantine entry both import paths share
    importer    `import_to_store`: the one path from a file to a draft version (row by row)
    columnar    the same import as whole columns, for Parquet, JSON Lines, CSV and TSV
    comparison_batches  the comparisons format in batches for it: labels once every vote is read
    ndjson      JSON Lines a block of lines at a time for it: polars parses, the row reader takes odd lines
    delimited   CSV and TSV a batch of lines at a time for it: the row reader's records as text columns
    jsonarray   JSON files (an array, {"data": [...]}, one object) for the columnar import, a batch at a time
    writers     normalised rows and quarantine files
    store       immutable, content-addressed, signed versions with their lineage
    onto        a version grown from a validated parent (`import --onto`): the parent's files shared
    export      a validated version's pairs as TRL, TRL chat, OpenRLHF or LLaMA-Factory JSON Lines

May import: prefdata.base.
"""
