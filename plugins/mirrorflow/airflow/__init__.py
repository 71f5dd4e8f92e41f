"""Thin Airflow shells over mirrorflow.replication: the only package that imports airflow."""
