"""Fencing the old primary: deny-WRITE ACLs for named principals, or an operator command; then the proof that
it holds (the replicated partitions' end offsets stop moving) and the rollback when it does not.

Super users (and, on PLAINTEXT listeners, every anonymous client when `User:ANONYMOUS` is a super user) bypass
ACLs; only the end-offset check tells whether writes really stopped, which is why it is not optional.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from mirrorflow.core.acl_rules import DENY, LITERAL, TOPIC, WRITE, AclBinding
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.acls import create_acls, delete_acls, describe_topic_acls
from mirrorflow.kafka.offsets import list_offsets
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
