#!/usr/bin/env bash
# One-shot set-up of the compose stack's Airflow (the `airflow-init` service): schema, the admin login, and the
# Spark connection the copy task submits to. Safe to run again: every step converges.
set -euo pipefail

: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD in docker/.env}"
: "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?the compose file sets it}"
SPARK_MASTER_URL="${SPARK_MASTER_URL:-spark://spark-master:7077}"

airflow db migrate

# Airflow's built-in SimpleAuthManager keeps its users in [core] simple_auth_manager_users (set by compose) and
# their passwords in this JSON file on a volume the api-server reads; write it so the password is the one in .env.
umask 077
python3 - <<'PY'
import json, os
path = os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
users = [u.split(":")[0] for u in os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin").split(",")]
with open(path, "w") as out:
    json.dump({user: os.environ["AIRFLOW_ADMIN_PASSWORD"] for user in users if user}, out)
PY

# `mirrorflow_spark`: the Spark provider falls back to YARN without it; Mirrorflow's copy task submits here.
airflow connections delete mirrorflow_spark >/dev/null 2>&1 || true
airflow connections add mirrorflow_spark --conn-type spark --conn-host "${SPARK_MASTER_URL%:*}" \
    --conn-port "${SPARK_MASTER_URL##*:}"

# The config must load where the DAG processor will read it: fail the init, not every parse, when it does not.
mirrorflow validate "${MIRRORFLOW_CONFIG}"
echo "airflow-init: done (Spark master ${SPARK_MASTER_URL}, config ${MIRRORFLOW_CONFIG})"
