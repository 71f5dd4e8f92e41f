"""Telling clients where to go (redirect) and preparing the way back (arm the reverse flow).

Redirect methods: `none`; `topic` (a record in the compacted `mirrorflow.bootstrap` topic on both clusters,
read by clients through `mirrorflow.core.bootstrap_redirect`); `file` (the same JSON written atomically to a
path); `command` (a shell hook with the new bootstrap in its environment); `webhook` (the JSON POSTed to a URL).
Only aliases and bootstrap addresses are published, never client secrets.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.bootstrap_redirect import BOOTSTRAP_TOPIC, BootstrapRedirect, encode_redirect
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.produce import OutgoingRecord, RecordWriter
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.replication.failover import fencing
from mirrorflow.replication.failover.step import Context, Outcome, done, skipped
from mirrorflow.replication.flow_clients import LIBRDKAFKA_LOG


def _redirect_record(ctx: Context) -> BootstrapRedirect:
    # The flow's clients carry any override (an Airflow connection's bootstrap.servers) over the file's value.
    bootstrap = ctx.flow.target_consumer.librdkafka().get("bootstrap.servers")
    return BootstrapRedirect(
        pattern=ctx.options.groups or ".*",
        bootstrap_servers=bootstrap or ctx.config.clusters[ctx.flow.target].bootstrap_servers or "",
        cluster=ctx.flow.target,
        previous=ctx.flow.source,
        reason=ctx.options.direction,
        epoch_ms=time.time_ns() // 1_000_000,
    )


def redirect(ctx: Context) -> Outcome:
    method = ctx.options.redirect
    if method == "none":
        return skipped("--redirect none: move the clients yourself", method="none")
    record = _redirect_record(ctx)
    key, value = encode_redirect(record)
    payload: dict[str, Any] = json.loads(value)
    payload["groups"] = record.pattern
    target = ctx.options.redirect_target
    if ctx.dry_run:
        return done(method=method, would_publish=payload, to=target or BOOTSTRAP_TOPIC)
    if method == "topic":
        return done(method="topic", topic=BOOTSTRAP_TOPIC, written=_publish(ctx, key, value), record=payload)
    assert target is not None
    if method == "file":
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
        return done(method="file", path=str(path), record=payload)
    if method == "command":
        env = {
            "MIRRORFLOW_BOOTSTRAP_SERVERS": record.bootstrap_servers,
            "MIRRORFLOW_CLUSTER": record.cluster,
            "MIRRORFLOW_PREVIOUS": record.previous,
            "MIRRORFLOW_GROUPS": record.pattern,
            "MIRRORFLOW_REDIRECT_JSON": json.dumps(payload, sort_keys=True),
        }
        output = fencing.run_command(target, env, "redirect")
        return done(method="command", output=output, record=payload)
    return done(method="webhook", url=target, status=_post(target, payload, ctx.timeout_s), record=payload)


def _publish(ctx: Context, key: bytes, value: bytes) -> dict[str, Any]:
    """The record on the target (required) and on the old primary (best effort: it may be down)."""
    written: dict[str, Any] = {}
    sides = [(ctx.flow.target, ctx.flow.target_producer, True), (ctx.flow.source, ctx.flow.source_producer, False)]
    for alias, producer_conf, required in sides:
        try:
            admin = ctx.clients.target_admin if alias == ctx.flow.target else ctx.clients.source_admin
            rf = min(3, ctx.flow.checkpoints_topic_replication_factor)
            create_compacted_topic(admin, alias, BOOTSTRAP_TOPIC, rf, ctx.timeout_s)
            writer = RecordWriter(alias, producer_conf.librdkafka(), ctx.timeout_s, logger=LIBRDKAFKA_LOG)
            try:
                written[alias] = writer.write([OutgoingRecord(BOOTSTRAP_TOPIC, 0, key, value)])[0]
            finally:
                writer.close()
        except MirrorflowError as err:
            if required:
                raise
            written[alias] = f"not written: {err}"
    return written


def _post(url: str, payload: dict[str, Any], timeout_s: float) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status = int(response.status)
    except urllib.error.HTTPError as err:
        raise MirrorflowError(f"the redirect webhook {url} answered {err.code}") from None
    except (urllib.error.URLError, OSError) as err:
        raise MirrorflowError(f"the redirect webhook {url} could not be reached: {err}") from None
    return status


def reverse_flow_lines(flow: Flow) -> list[str]:
    """The reverse flow's lines: enabled, with the forward flow's topic and group selection (its includes, and
    its excludes and filter classes where they are not MM2's defaults), so a failback copies home what the
    failover moved and nothing the operator had left out."""
    name = f"{flow.target}->{flow.source}"
    defaults = Flow.model_fields
    lines = [f"{name}.enabled = true", f"{name}.topics = {', '.join(flow.topics)}"]
    for attribute, key in (
        ("topics_exclude", "topics.exclude"),
        ("groups", "groups"),
        ("groups_exclude", "groups.exclude"),
        ("topic_filter_class", "topic.filter.class"),
        ("group_filter_class", "group.filter.class"),
    ):
        value = getattr(flow, attribute)
        if value != defaults[attribute].default:
            lines.append(f"{name}.{key} = {', '.join(value) if isinstance(value, tuple) else value}")
    return lines


def arm_reverse(ctx: Context) -> Outcome:
    """The way back: the flow target->source must be enabled so that what clients now write there is copied to
    the old primary before a failback. We report (and write a snippet of) the config; we never edit the file."""
    name = f"{ctx.flow.target}->{ctx.flow.source}"
    if any(f.name == name for f in ctx.config.flows):
        return done(reverse_flow=name, armed=True, note=f"{name} is enabled in {ctx.config.path}; keep it running")
    lines = reverse_flow_lines(ctx.flow)
    note = f"add these lines to {ctx.config.path} and run the flow {name} so a failback has data to return"
    if ctx.dry_run or ctx.state_dir is None:  # state in Kafka: the lines are in the report, no local file
        return done(reverse_flow=name, armed=False, config=lines, note=note)
    snippet = ctx.state_dir / "reverse-flow.properties"
    snippet.parent.mkdir(parents=True, exist_ok=True)
    snippet.write_text(f"# {note}\n" + "\n".join(lines) + "\n")
    return done(reverse_flow=name, armed=False, config=lines, snippet=str(snippet), note=note)
