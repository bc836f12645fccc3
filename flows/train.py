"""The train flow: a trainer plugin (prefdata.trainers) on a validated dataset version.

Training is local compute, not network I/O: no retries (a crash reruns from the trainer's own
checkpoints, not from a Prefect cache). Only validated versions train; the gate is the point.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task

from prefdata.flows.gate import artifact_key
from prefdata.flows.params import Training, check_reach


@task(name="train-model")
def train_model(ref: str, training: Training, store: str | None) -> dict:
    from prefdata.trainers import train as run_trainer

    logger = get_run_logger()
    from prefdata.world.build import model_or_world

    result = run_trainer(training.method, ref, training.config, store=store, output_dir=training.output_dir,
                         base_model=model_or_world(training.base_model), chat=training.chat,
                         system_prompt=training.system_prompt, log=logger.info)
    return {"model_dir": str(result.model_dir), "metrics": dict(result.metrics), "card": str(result.card)}


@flow(name="train", description="Train a model with a trainer plugin on a validated dataset version.")
def train(dataset: str, training: Training = Training(), store: str | None = None) -> dict:
    """A trainer plugin on a validated version (only a validated version whose files and signed status
    verify trains).

    Args:
        dataset: NAME@VERSION of a validated version.
        training: The method, its config, the base model and where the model goes.
        store: The store root or fsspec URL, as every command's --store; None: $PREFDATA_STORE, else
            .prefdata/store in the run's working folder.
    """
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.runtime import deployment

    from prefdata.base.errors import GateFailed
    from prefdata.data.store import Store

    if deployment.id:  # a run anyone with the API could create: only what the operator allowed
        check_reach(training=training, store=store)
    st = Store(store)
    v = st.get(dataset)
    if v.status != "validated":
        raise GateFailed(f"{v.ref} is {v.status}: only a validated version trains (run the publish flow first)")
    problems = st.verify(v.ref)  # the files, and the signature on the status: a typed-in "validated" stops here
    if problems:
        raise GateFailed(f"{v.ref} fails verification ({problems[0]}): run `prefdata verify {v.ref}`")
    result = train_model(v.ref, training, store)
    figures = {k: val for k, val in result["metrics"].items() if k != "log"}
    metrics = "\n".join(f"| {k} | {val} |" for k, val in figures.items())
    curves = Path(result["model_dir"]) / "curves.png"
    create_markdown_artifact(
        key=artifact_key(f"train-{v.name}"),
        markdown=f"# {training.method} on {v.ref}\n\nModel: `{result['model_dir']}`  \nCard: `{result['card']}`  \n"
                 + (f"Curves: `{curves}` (on the card); `tensorboard --logdir {result['model_dir']}`\n\n" if curves.is_file() else "\n")
                 + f"| metric | value |\n|---|---|\n{metrics}\n",
        description=f"{training.method} on {v.ref}")
    steps = [{k: val for k, val in row.items() if isinstance(val, (int, float, str))} for row in result["metrics"].get("log") or []]
    if steps:  # each logged step's figures: the curves, as a table the Prefect UI shows
        create_table_artifact(key=artifact_key(f"train-{v.name}-steps"), table=steps,
                              description=f"{training.method} on {v.ref}: each logged step")
    return {"dataset": v.ref, **result}
