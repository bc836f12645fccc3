"""Prefect flows that wire prefdata steps together; logic lives in prefdata, checks and trainers.

    collect   sample, pair, judge, route to Argilla, collect labels into a draft version
    gate      validate and publish a version through the checklist gate
    train     train from a validated version
    params    every flow's parameters (pydantic, a description on each field)
    progress  follow a running flow's stages through Prefect's API
    server    a temporary local Prefect server for a command's flow runs
    deployments  prefect.yaml's deployments, with their schedules

May import: every layer but the commands.
"""
