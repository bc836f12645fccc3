"""Prefect flows that wire prefdata steps together; logic lives in prefdata, checks and trainers."""
