#!/usr/bin/env bash
# One-shot set-up of the compose stack's Airflow (the `airflow-init` service): schema, the admin login, and the
# Spark connection the copy task submits to. Safe to run again: every step converges.
set -euo pipefail

: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD in docker/.env}"
AIRFLOW_ADMIN_USER="${AIRFLOW_ADMIN_USER:-admin}"
SPARK_MASTER_URL="${SPARK_MASTER_URL:-spark://spark-master:7077}"

# Airflow's schema, and with the FAB auth manager (AIRFLOW__CORE__AUTH_MANAGER) its users and roles tables too.
airflow db migrate

# The admin login through FAB's CLI. `users create` leaves an existing user alone, so the password is then set
# again from .env: changing AIRFLOW_ADMIN_PASSWORD and re-running the init changes the login.
airflow users create --username "${AIRFLOW_ADMIN_USER}" --password "${AIRFLOW_ADMIN_PASSWORD}" \
    --firstname Mirrorflow --lastname Admin --email "${AIRFLOW_ADMIN_USER}@mirrorflow.invalid" --role Admin
airflow users reset-password --username "${AIRFLOW_ADMIN_USER}" --password "${AIRFLOW_ADMIN_PASSWORD}"

# `mirrorflow_spark`: the Spark provider falls back to YARN without it; Mirrorflow's copy task submits here.
airflow connections delete mirrorflow_spark >/dev/null 2>&1 || true
airflow connections add mirrorflow_spark --conn-type spark --conn-host "${SPARK_MASTER_URL%:*}" \
    --conn-port "${SPARK_MASTER_URL##*:}"

# The config must load where the DAG processor will read it: fail the init, not every parse, when it does not.
mirrorflow validate "${MIRRORFLOW_CONFIG}"
echo "airflow-init: done (admin ${AIRFLOW_ADMIN_USER}, Spark master ${SPARK_MASTER_URL}, config ${MIRRORFLOW_CONFIG})"
