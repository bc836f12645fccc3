"""The checklist as a build gate, over a file or a store version.

    runner      gather a check run's inputs (a file, a version, sharded when large), run the
                checklist, write the reports: shared by `check`, `filter` and `publish`
    report      report.json, report.md, JUnit XML and the terminal table from one result list
    scoring     independent verdicts for the label-direction check (`check --scorer`)
    backends    prefdata's own backends of judge, scorer and reward specs (llm, rm, lm, rule,
                verdicts), registered by name (prefdata.base.specs)
    filtering   remove flagged rows as a new version whose parent is the old one
    publishing  verify, run the gate, set the status (validated or rejected): the one publish path

May import: prefdata.base, prefdata.models, prefdata.data, prefdata.checks, prefdata.collect
(judges, for scoring), prefdata.argilla (a label audit's votes).
"""
