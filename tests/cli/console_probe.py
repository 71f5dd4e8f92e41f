"""Run by tests/cli/test_console_quiet.py in a child process: Mirrorflow's noisy paths, one after another, with
the child's file descriptors 1 and 2 captured by the test (librdkafka and the JVM write there, past Python).

`python console_probe.py clients LIVE DEAD`: clients of `mirrorflow.kafka` on a live broker (the demo's sample
data) and on a dead address (admin, producer, consumer; the last two left open at exit, as a crashed command
would leave them). Every librdkafka line that reaches Python logging is printed as `ROUTED <level> <message>`.
`python console_probe.py session`: the Spark session of `mirrorflow run` (local[1]).
`python console_probe.py dag CONFIG HOME`: one `dag.test()` run of flow A->B's DAG on the demo's console set-up,
its copy on spark-submit.
"""

from __future__ import annotations

import logging
import sys
import uuid

ROUTED = "ROUTED %(levelname)s %(message)s"


def clients(live: str, dead: str) -> None:
    from confluent_kafka import KafkaException

    from mirrorflow.kafka import sample_data
    from mirrorflow.kafka.clients import admin_client, consumer, producer

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(ROUTED))
    log = logging.getLogger("mirrorflow.kafka.librdkafka")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False

    topic = f"console-{uuid.uuid4().hex[:8]}"
    sample_data.produce_orders(live, topic, count=20, partitions=1)
    sample_data.consume_group(live, topic, f"console-{uuid.uuid4().hex[:8]}", count=20)
    assert sum(len(v) for v in sample_data.read_topic(live, topic).values()) == 20
    print("PROBE live done", flush=True)

    conf = {"bootstrap.servers": dead, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 100}
    admin = admin_client(conf)
    try:
        admin.list_topics(timeout=1.5)
    except KafkaException:
        pass
    else:
        raise AssertionError(f"{dead} answered a metadata request; it was meant to be a dead address")
    del admin  # its queued lines must reach the logger, not vanish with it
    print("PROBE admin done", flush=True)
    stuck = producer(conf, **{"message.timeout.ms": 1000})
    stuck.produce("nowhere", b"x")
    stuck.flush(1.5)
    reader = consumer(conf, **{"group.id": "console-probe"})
    reader.subscribe(["nowhere"])
    reader.poll(1.5)
    print("PROBE clients done", flush=True)
    # `stuck` and `reader` stay open: their last lines come from librdkafka's threads at interpreter exit.


def session() -> None:
    from mirrorflow.spark.copy_job import spark_session

    spark = spark_session("local[1]", "console-probe")
    assert spark.sparkContext.parallelize(range(10), 2).sum() == 45
    spark.stop()
    print("PROBE session done", flush=True)


def dag(config: str, home: str) -> None:
    from pathlib import Path

    from mirrorflow.cli.console_logs import filter_library_deprecations, quiet_console

    quiet_console(Path(home))
    from mirrorflow.airflow.embedded import prepare_home, run_flow_dags

    prepare_home(Path(home) / "airflow", Path(config))
    filter_library_deprecations()
    runs = run_flow_dags(only={"mirrorflow__A__B": ""})
    assert [(r.dag_id, r.state) for r in runs] == [("mirrorflow__A__B", "success")], runs
    assert (runs[0].results.get("copy") or {}).get("records") == 5, runs[0].results
    print("PROBE dag done", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "clients":
        clients(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "dag":
        dag(sys.argv[2], sys.argv[3])
    else:
        session()
