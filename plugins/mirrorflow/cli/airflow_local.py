"""`make airflow`: the real `airflow standalone` (scheduler, dag-processor, api-server, triggerer) on SQLite,
over local Kafka clusters and the repository's `dags/` and `plugins/`; the UI stays up until Ctrl-C.

The clusters keep running afterwards (`mirrorflow local down --dir var/local` stops them).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from mirrorflow.airflow.embedded import airflow_environment
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.local.cluster import LocalClusters

LOCAL_DIR = Path("var/local")
AIRFLOW_HOME = Path("var/airflow")


def main() -> None:
    clusters = LocalClusters.up(["primary", "backup"], LOCAL_DIR)
    config = (LOCAL_DIR / "airflow-mm2.properties").resolve()
    config.write_text(
        clusters.mm2_properties_file.read_text()
        + "primary->backup.enabled = true\nsync.group.offsets.enabled = true\nmirrorflow.copy.run.seconds = 120\n"
    )
    airflow = shutil.which("airflow", path=str(Path(sys.executable).parent))
    if airflow is None:
        raise MirrorflowError("airflow is not installed in this environment; run `make setup`")
    env = {**os.environ, **airflow_environment(AIRFLOW_HOME.resolve(), config)}
    print(f"Kafka: {clusters.bootstraps()}; config: {config}")
    print("Airflow UI on http://localhost:8080 (password in var/airflow/simple_auth_manager_passwords.json.generated)")
    print(
        "Replication dashboard: Browse > Replication. Stop with Ctrl-C; then `mirrorflow local down --dir var/local`."
    )
    os.execve(airflow, [airflow, "standalone"], env)


if __name__ == "__main__":
    try:
        main()
    except MirrorflowError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
