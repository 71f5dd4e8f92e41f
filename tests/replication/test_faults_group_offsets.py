"""Group offsets read on a fresh cluster and right after its coordinator broker restarts (issue 18, build item 2).

librdkafka's admin `list_consumer_group_offsets` dereferences NULL when the coordinator answers NOT_COORDINATOR
(librdkafka issue 5040): the process dies with SIGSEGV and no traceback. Both moments make that answer likely:
the first group call to a new cluster (`__consumer_offsets` is being created) and the first after a restart (its
partitions are loading). The reads run in a child process, so a crash is a failed assertion with its exit code
instead of a dead pytest. Each trial starts a cluster of its own (one broker), reads the offsets of many groups
(spread over the partitions of `__consumer_offsets`), commits some, kills and restarts the broker, and reads them
again at once, through `list_committed_offsets` (checkpoints, group sync, failover) and `committed_offsets`;
`mirrorflow translate --live` makes the first group call on the fresh cluster in even trials and the first after
the restart in odd ones. `make test` runs one trial; `make test-faults` runs 2 x MIRRORFLOW_FAULT_TRIALS (20).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.kafka_helpers import create_topic
from tests.replication.helpers import commit_offsets
from tests.replication.test_faults_brokers import restart

from mirrorflow.kafka.clients import admin_client
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

pytestmark = pytest.mark.integration
TRIALS = 2 * int(os.environ.get("MIRRORFLOW_FAULT_TRIALS") or 0) or 1
GROUPS = 24  # spread over the 10 partitions of __consumer_offsets of a local cluster
REPO = Path(__file__).resolve().parents[2]

_READER = """
import json, sys
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.consumer_groups import list_committed_offsets
from mirrorflow.kafka.group_coordinator import committed_offsets

admin = admin_client({"bootstrap.servers": sys.argv[1]})
groups = sys.argv[2].split(",")
found = list_committed_offsets(admin, "G", groups, 60)
found[groups[0]] = committed_offsets(admin, "G", groups[0], 60)
print(json.dumps({g: {f"{t}:{p}": o.offset for (t, p), o in sorted(v.items())} for g, v in found.items()}))
"""


def run_child(what: str, *args: str) -> str:
    """The stdout of `python <args>` (this checkout first on the path); fails with its exit code if it dies."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}
    child = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=180, check=False)
    assert child.returncode == 0, f"{what} exited {child.returncode}: {child.stderr[-2000:]}"
    return child.stdout


def read_in_child(bootstrap: str, groups: list[str]) -> dict[str, dict[str, int]]:
    """The groups' committed offsets, read by a child process."""
    found: dict[str, dict[str, int]] = json.loads(
        run_child("the group offset reader", "-c", _READER, bootstrap, ",".join(groups))
    )
    return found


def translate_live_in_child(config: Path, group_regex: str) -> dict[str, object]:
    """`mirrorflow translate --live` (it reads the groups' offsets first) in a child process: its JSON."""
    argv = ["-m", "mirrorflow", "translate", str(config), "--groups", group_regex, "--source", "G", "--target", "H"]
    found: dict[str, object] = json.loads(run_child("mirrorflow translate --live", *argv, "--live", "--json"))
    return found


@pytest.mark.timeout(300 * TRIALS)
def test_group_offsets_survive_a_fresh_cluster_and_a_coordinator_restart(tmp_path: Path) -> None:
    for trial in range(TRIALS):
        clusters = LocalClusters(tmp_path / f"trial-{trial}", tie_to_parent=True)
        try:
            clusters.start("G")
            bootstrap = clusters.bootstrap("G")
            run = uuid.uuid4().hex[:6]
            groups = [f"offsets-{run}-{i}" for i in range(GROUPS)]
            topic = f"offsets-{run}"
            # A flow G->H between two aliases of this one cluster: enough for `translate --live` to read offsets.
            config = tmp_path / f"trial-{trial}.properties"
            config.write_text(mm2_config_text({"G": bootstrap, "H": bootstrap}, "G->H.enabled = true\n"))
            fresh = trial % 2 == 0  # which reader makes the cluster's first group call
            if fresh:
                assert translate_live_in_child(config, f"offsets-{run}-.*") == {}, f"trial {trial}: translate"
            assert read_in_child(bootstrap, groups) == {g: {} for g in groups}, f"trial {trial}: fresh cluster"

            settings = {"bootstrap.servers": bootstrap}
            admin = admin_client(settings)
            create_topic(admin, topic, 2)
            want = {g: {f"{topic}:0": i + 1, f"{topic}:1": 2 * i + 5} for i, g in enumerate(groups[::2])}
            for group, offsets in want.items():
                commit_offsets(admin, group, {(topic, int(k.rsplit(":", 1)[1])): o for k, o in offsets.items()})
            del admin

            restart(clusters, "G", kill=True)
            if not fresh:
                assert translate_live_in_child(config, f"offsets-{run}-.*") == {}, f"trial {trial}: translate"
            expected = {g: want.get(g, {}) for g in groups}
            assert read_in_child(bootstrap, groups) == expected, f"trial {trial}: after the restart"
        finally:
            clusters.down()
