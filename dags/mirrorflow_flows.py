"""Mirrorflow: one Airflow DAG per enabled flow of the mm2.properties named by MIRRORFLOW_CONFIG.

Everything lives in `mirrorflow.airflow.factory`; see docs/airflow.md for the environment variables.
"""

from mirrorflow.airflow.factory import register_flow_dags

register_flow_dags(globals())
