"""Mirrorflow: the failover and failback runbook DAGs (Airflow, manual, with a trigger form), built from the
mm2.properties named by MIRRORFLOW_CONFIG.

Everything lives in `mirrorflow.airflow.failover_dag`; see docs/failover.md.
"""

from mirrorflow.airflow.failover_dag import register_failover_dags

register_failover_dags(globals())
