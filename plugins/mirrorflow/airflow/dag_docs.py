"""The `doc_md` shown on each generated DAG's page: what the flow does and the settings in force.

Settings come from `Flow.effective_settings()`, where secret keys already read `***`; they are masked once more
here by key name, because a DAG's docs are stored in the metadata database and shown to every UI user.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirrorflow.airflow.dag_ids import heartbeat_task_id
from mirrorflow.config.client_config import MASK
from mirrorflow.config.keys import is_secret_key
from mirrorflow.config.model import Flow

TASK_DOCS = {
    "discover": "list both clusters; plan which source topics replicate and where (no writes)",
    "sync_topics": "create missing remote topics, grow partition counts, create the internal topics",
    "sync_configs": "bring remote topic configs in line (`sync.topic.configs.enabled`)",
    "sync_acls": "copy topic ACLs to the target (`sync.topic.acls.enabled`)",
    "copy": "the Spark job: copy records per partition, exactly-once by default, with offset maps and offset syncs",
    "emit_checkpoints": "translate consumer-group offsets and write MM2 checkpoints (`emit.checkpoints.*`)",
    "sync_group_offsets": "write translated offsets into idle target groups (`sync.group.offsets.*`)",
    "heartbeats": "write heartbeats into the target's `heartbeats` topic (`emit.heartbeats.*`)",
    "loops": "continuous mode: heartbeats, checkpoints and group sync in one task, each at its MM2 cadence",
}


def settings_block(flow: Flow) -> str:
    lines = [f"{key} = {MASK if is_secret_key(key) else value}" for key, value in flow.effective_settings().items()]
    return "~~~properties\n" + "\n".join(lines) + "\n~~~"


def flow_doc(flow: Flow, config_path: str, task_ids: list[str]) -> str:
    cadence = (
        f"copies for {flow.copy_run_seconds} s per run; heartbeats and checkpoints keep their intervals meanwhile; "
        f"in exactly-once mode the next run starts {flow.copy_handover_seconds} s before the copy ends and takes "
        "over from it (mirrorflow.copy.handover.seconds)"
        if flow.copy_mode == "continuous"
        else "copies up to the end offsets seen at the start of the run, then checkpoints"
    )
    tasks = "\n".join(f"* `{task_id}`: {TASK_DOCS[task_id]}" for task_id in task_ids if task_id in TASK_DOCS)
    return _with_settings(
        flow,
        f"## Mirrorflow flow `{flow.name}`\n\n"
        f"Replicates cluster `{flow.source}` to cluster `{flow.target}` with MirrorMaker 2's semantics.\n\n"
        f"* config: `{config_path}`\n"
        f"* schedule: `{flow.schedule}`; copy mode `{flow.copy_mode}` ({cadence})\n"
        f"* Spark master: `{flow.spark_master}`, unless the Airflow connection `mirrorflow_spark` is defined\n"
        f"* Airflow connections: source `{flow.source_connection or '-'}`, target `{flow.target_connection or '-'}`\n"
        f"\n### Tasks\n\n{tasks}\n\n",
    )


def heartbeat_doc(target: str, pairs: Sequence[Flow], config_path: str) -> str:
    """The page of a target's heartbeats DAG: which pairs beat into it, and how to turn each off."""
    rows = "\n".join(
        f"| `{heartbeat_task_id(p.source)}` | `{p.name}` | {p.emit_heartbeats_interval_seconds} s | "
        f"`{p.name}.emit.heartbeats.enabled = false` |"
        for p in pairs
    )
    return (
        f"## Mirrorflow heartbeats into `{target}`\n\n"
        f"These flows are not enabled, but MM2 still runs a heartbeat herder for each pair: each task creates "
        f"`heartbeats` on `{target}` and writes a heartbeat from its source at the pair's cadence, so clusters "
        "downstream learn the topology. The tasks are independent: a source that cannot be reached fails only "
        "its own task.\n\n"
        f"* config: `{config_path}`\n* schedule: `{pairs[0].schedule}`\n\n"
        "| task | pair | every | turn it off with |\n| --- | --- | --- | --- |\n"
        f"{rows}\n\n"
        "### Effective settings (secrets masked)\n\n"
        + "\n\n".join(f"#### `{p.name}`\n\n{settings_block(p)}" for p in pairs)
        + "\n"
    )


def _with_settings(flow: Flow, page: str) -> str:
    """A flow's page ends with the settings in force, secrets masked: the same section on every kind of page."""
    return f"{page}### Effective settings (secrets masked)\n\n{settings_block(flow)}\n"


def broken_doc(name: str, message: str) -> str:
    return (
        f"## Mirrorflow flow `{name}` could not be built\n\n"
        f"~~~\n{message}\n~~~\n\n"
        "The other flows of the file run normally. Fix the setting and the DAG is rebuilt at the next parse; "
        "set `MIRRORFLOW_STRICT=1` to turn such problems into an import error of the whole file (for CI).\n"
    )
