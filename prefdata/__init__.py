"""prefdata: preference data you can trust.

The layers, bottom to top; each imports only layers below it (tests/test_layers.py holds the
rules, docs/architecture.md says why):

    base      errors, output paths, scratch folders, processes, progress, specs, targets
    models    loading models (GGUF too), reward scores, sequence log-probabilities
    data      records, readers, formats, votes, import, the store
    checks    the 12-point checklist (source folder checks/)
    collect   sampling, pairing, judging, routing, the draft version
    argilla   human labels in Argilla, the local server
    gate      check, filter, publish: the checklist as a build gate
    trainers  reward model, DPO, GRPO, PPO, SFT from a validated version (source folder trainers/)
    world     the embedded demo world
    flows     Prefect flows: wiring only (source folder flows/)
    commands  the command line
"""

__version__ = "0.1.0"
