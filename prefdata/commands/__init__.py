"""The commands: the `prefdata` command line, on top of everything.

    cli       the typer app: import, check, filter, publish, train, versions, the model tools
    collect   `prefdata collect` (over the collect flow)
    demo      `prefdata demo`: the whole loop on the embedded world
    demo_chat `prefdata demo --world chat`: the loop on a real chat model (SmolLM2-135M-Instruct)
    argilla   `prefdata argilla ...`: the local server, users, push and pull
    serve     `prefdata serve` and `prefdata run`: prefect.yaml's deployments
    export    `prefdata export`: a validated version for TRL, OpenRLHF or LLaMA-Factory
    console   the terminal every command writes to
    options   an option built from its flow model's or config's field (default, help, bounds)

Heavy libraries (torch, TRL, Prefect, Great Expectations) load inside the commands that use
them, so `prefdata --help` loads none.

May import: anything.
"""
