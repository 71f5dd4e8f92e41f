"""Fencing the old primary: deny-WRITE ACLs for named principals, or an operator command; then the proof that
it holds (the replicated partitions' end offsets stop moving) and the rollback when it does not (ACLs we created
are deleted; a command fence runs `--unfence-command` when one is given).

Super users (and, on PLAINTEXT listeners, every anonymous client when `User:ANONYMOUS` is a super user) bypass
ACLs; only the end-offset check tells whether writes really stopped, which is why it is not optional.

Writes stopping is not enough: a transaction already open at the fence can still commit (a deny-WRITE ACL does
not stop EndTxn), and an exactly-once drain stops at the last stable offset (LSO). The fence is complete only
when, on every partition, the LSO equals the high watermark and stays there. `verify_fence` waits (bounded by
`--open-transaction-wait-seconds`) for open transactions to end, then proves the high watermarks stand still;
a transaction still open then is recorded, and its records are counted at risk by the drain and the report.
A transaction that ends during the window writes its commit or abort marker, which moves the high watermark
without being a write through the fence: when only such partitions moved, one more window decides.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict

from mirrorflow.core.acl_rules import DENY, LITERAL, TOPIC, WRITE, AclBinding
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.acls import create_acls, delete_acls, describe_topic_acls
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.replication.failover.state import PENDING
from mirrorflow.replication.failover.step import (
    Context,
    Outcome,
    Refused,
    done,
    plan_partitions,
    skipped,
    tp_key,
)
from mirrorflow.replication.flow_clients import Admin

TopicPartition = tuple[str, int]


def fence_bindings(topics: Iterable[str], principals: Sequence[str]) -> list[AclBinding]:
    """One DENY WRITE binding per (topic, principal), on any host: DENY wins over every ALLOW in Kafka."""
    return [
        AclBinding(TOPIC, topic, LITERAL, principal, "*", WRITE, DENY)
        for topic in sorted(set(topics))
        for principal in principals
    ]


def apply_acl_fence(admin: Admin, cluster: str, bindings: Sequence[AclBinding], timeout_s: float) -> list[AclBinding]:
    """Create the bindings not there yet; returns those this call created (only they are rolled back)."""
    existing = set(describe_topic_acls(admin, cluster, timeout_s))
    new = [b for b in bindings if b not in existing]
    create_acls(admin, cluster, new, timeout_s)
    return new


def roll_back_acl_fence(admin: Admin, cluster: str, created: Sequence[AclBinding], timeout_s: float) -> int:
    return delete_acls(admin, cluster, created, timeout_s)


def end_offsets(
    admin: Admin, cluster: str, partitions: Iterable[TopicPartition], timeout_s: float
) -> dict[TopicPartition, int]:
    """High watermarks (every write counts, committed or not)."""
    return list_offsets(admin, cluster, sorted(set(partitions)), latest=True, timeout_s=timeout_s)


def open_transactions(
    admin: Admin, cluster: str, partitions: Iterable[TopicPartition], timeout_s: float
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(high watermarks, {partition: high watermark - LSO} where a transaction is still open)."""
    wanted = sorted(set(partitions))
    stable = list_offsets(admin, cluster, wanted, latest=True, read_committed=True, timeout_s=timeout_s)
    ends = end_offsets(admin, cluster, wanted, timeout_s)
    return ends, {tp: ends[tp] - stable[tp] for tp in wanted if stable.get(tp, ends[tp]) < ends[tp]}


def wait_for_open_transactions(
    sample: Callable[[], tuple[dict[TopicPartition, int], dict[TopicPartition, int]]],
    seconds: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[TopicPartition, int]:
    """Poll until no partition has an open transaction or `seconds` have passed; what is still open."""
    deadline = time.monotonic() + seconds
    while True:
        _ends, still_open = sample()
        if not still_open or time.monotonic() >= deadline:
            return still_open
        sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def moved(before: Mapping[TopicPartition, int], after: Mapping[TopicPartition, int]) -> dict[str, int]:
    """Partitions whose end offset grew between two samples: {"topic-p": records written}."""
    return {
        f"{t}-{p}": after[(t, p)] - before[(t, p)] for (t, p) in sorted(before) if after.get((t, p), 0) > before[(t, p)]
    }


def verify_writes_stopped(
    sample: Callable[[], Mapping[TopicPartition, int]],
    seconds: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[TopicPartition, int], dict[str, int]]:
    """Sample the end offsets, wait `seconds`, sample again: (the fenced ends, what moved in between)."""
    before = dict(sample())
    sleep(seconds)
    after = dict(sample())
    return after, moved(before, after)


def run_command(command: str, env: Mapping[str, str], what: str, timeout_s: float = 300.0) -> str:
    """Run an operator hook through the shell; a non-zero exit fails the step with its output."""
    try:
        done = subprocess.run(
            command,
            shell=True,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise MirrorflowError(
            f"the {what} command did not finish within {timeout_s:g} s: {shlex.quote(command)}"
        ) from None
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise MirrorflowError(f"the {what} command exited with {done.returncode}: {output[-500:] or '(no output)'}")
    return output[-2000:]


# ---- the runbook's steps 2 and 3 --------------------------------------------------------------------------
def fence(ctx: Context) -> Outcome:
    opts = ctx.options
    if opts.mode == "unplanned":
        return skipped("unplanned: the old primary is not fenced", method=opts.fence, fenced=False)
    if opts.fence == "none":
        return skipped("--fence none: the old primary was NOT fenced (unfenced)", method="none", fenced=False)
    topics = [t.topic for t in ctx.plan().topics]
    if opts.fence == "acl":
        bindings = fence_bindings(topics, opts.fence_principals)
        if ctx.dry_run:
            return done(method="acl", would_create=[asdict(b) for b in bindings])
        created = apply_acl_fence(ctx.clients.source_admin, ctx.flow.source, bindings, ctx.timeout_s)
        return done(
            method="acl", fenced=True, bindings=[asdict(b) for b in bindings], created=[asdict(b) for b in created]
        )
    assert opts.fence_command is not None
    if ctx.dry_run:
        return done(method="command", would_run=opts.fence_command, would_undo_with=opts.unfence_command)
    output = run_command(opts.fence_command, hook_env(ctx, topics), "fence")
    return done(method="command", fenced=True, output=output)


def hook_env(ctx: Context, topics: list[str]) -> dict[str, str]:
    """What the fence and unfence commands are told (never a credential)."""
    return {
        "MIRRORFLOW_DIRECTION": ctx.options.direction,
        "MIRRORFLOW_FROM": ctx.flow.source,
        "MIRRORFLOW_TO": ctx.flow.target,
        "MIRRORFLOW_TOPICS": ",".join(topics),
    }


def verify_fence(ctx: Context) -> Outcome:
    opts = ctx.options
    if opts.mode == "unplanned" or opts.fence == "none":
        return skipped("nothing fenced")
    partitions = plan_partitions(ctx.plan())
    if ctx.dry_run:
        return done(would_check=len(partitions), window_seconds=opts.fence_verify_seconds)

    def sample() -> dict[TopicPartition, int]:
        return end_offsets(ctx.clients.source_admin, ctx.flow.source, partitions, ctx.timeout_s)

    def sample_open() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        return open_transactions(ctx.clients.source_admin, ctx.flow.source, partitions, ctx.timeout_s)

    # Transactions open at the fence first: their commit markers would otherwise move the high watermark.
    open_before = wait_for_open_transactions(sample_open, opts.open_transaction_wait_seconds)
    rechecked = False
    while True:
        ends, writes = verify_writes_stopped(sample, opts.fence_verify_seconds)
        fenced_ends, still_open = sample_open()  # and the LSO stays at the high watermark
        if not writes:
            writes = moved(ends, fenced_ends)
        ended = {tp_key(t, p) for (t, p) in open_before if (t, p) not in still_open}
        if not writes or rechecked or not set(writes) <= ended:
            break
        # Only partitions whose open transaction ended in the window moved: that may be nothing but its commit
        # or abort marker, which is not a write through the fence. One more window decides.
        rechecked, open_before = True, still_open
    if writes:
        rolled = roll_back_fence(ctx, sorted({t for t, _ in partitions}))
        moved_text = ", ".join(f"{k} (+{v})" for k, v in list(writes.items())[:5])
        raise Refused(
            f"writes did not stop on {ctx.flow.source} within {opts.fence_verify_seconds:g} s: {moved_text}; "
            f"the fence was rolled back ({rolled}); fence the remaining producers and run again"
        )
    return done(
        fenced_ends={tp_key(t, p): o for (t, p), o in sorted(fenced_ends.items())},
        window_seconds=opts.fence_verify_seconds,
        rechecked_after_transactions_ended=rechecked,
        # Records of transactions still open after the wait: they may commit after the cutover (at risk).
        open_transactions={tp_key(t, p): n for (t, p), n in sorted(still_open.items())},
        note=(
            f"transactions still open after {opts.open_transaction_wait_seconds:g} s on "
            + ", ".join(f"{tp_key(t, p)} ({n} records)" for (t, p), n in sorted(still_open.items())[:5])
            + ": counted at risk"
            if still_open
            else ""
        ),
    )


def roll_back_fence(ctx: Context, topics: list[str]) -> str:
    """Undo what the fence step did and mark it pending, so the next run fences again."""
    step = ctx.state.step("fence")
    created = [AclBinding(**b) for b in step.result.get("created", [])]
    step.status, step.result = PENDING, {"rolled_back": True}
    if ctx.options.fence == "acl":
        n = roll_back_acl_fence(ctx.clients.source_admin, ctx.flow.source, created, ctx.timeout_s)
        return f"{n} deny-WRITE ACLs deleted"
    if not ctx.options.unfence_command:
        return "no --unfence-command was given: lift the command's fence by hand"
    try:
        run_command(ctx.options.unfence_command, hook_env(ctx, topics), "unfence")
    except MirrorflowError as err:
        return f"the unfence command failed, lift the fence by hand: {err}"
    return "the unfence command ran"
