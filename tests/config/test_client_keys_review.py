"""Review of client-key validation (issue 20): keys operators really run MM2 with must not be refused.

Confluent's monitoring interceptors (`interceptor.classes = io.confluent.monitoring.clients.interceptor.*`, the
Control Center set-up of many MM2 deployments) read their own `confluent.monitoring.interceptor.*` keys from the
client's config. MM2's Java clients accept them. Mirrorflow drops `interceptor.classes` (Java classes cannot run
here) with a warning, so the interceptor's own keys are meaningless too and must be dropped the same way: today
`validate` refuses the file, and the keys would reach librdkafka, which refuses to build the client.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer

from mirrorflow.config.librdkafka import classify_client_key
from mirrorflow.config.loader import load_config

MONITORED = """clusters = a, b
a.bootstrap.servers = 127.0.0.1:9
b.bootstrap.servers = 127.0.0.1:9
a->b.enabled = true
a.consumer.interceptor.classes = io.confluent.monitoring.clients.interceptor.MonitoringConsumerInterceptor
a.consumer.confluent.monitoring.interceptor.bootstrap.servers = monitoring:9092
a.consumer.confluent.monitoring.interceptor.security.protocol = SASL_SSL
b.producer.interceptor.classes = io.confluent.monitoring.clients.interceptor.MonitoringProducerInterceptor
b.producer.confluent.monitoring.interceptor.bootstrap.servers = monitoring:9092
"""


def test_the_monitoring_interceptors_own_keys_are_dropped_like_the_interceptor(tmp_path: Path) -> None:
    assert classify_client_key("confluent.monitoring.interceptor.bootstrap.servers")[0] == "dropped"
    path = tmp_path / "mm2.properties"
    path.write_text(MONITORED)
    flow = load_config(path, environ={}).flow("a->b")  # no ConfigError
    consumer = {"group.id": "g", **flow.source_consumer.librdkafka(), "log_level": "0"}
    producer = {**flow.target_producer.librdkafka(), "log_level": "0"}
    assert not [k for k in (*consumer, *producer) if k.startswith("confluent.monitoring.")]
    Consumer(consumer).close()  # librdkafka builds the clients
    Producer(producer).flush(0)


def test_javas_minus_one_socket_buffers_mean_the_os_default_in_librdkafka_too(tmp_path: Path) -> None:
    """`receive.buffer.bytes` / `send.buffer.bytes` = -1 is the Java client's documented "use the OS default";
    librdkafka's twin (`socket.*.buffer.bytes`) spells that 0 and refuses -1, so a file MM2 runs must not
    pass `validate` and then fail to build its clients."""
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = a, b\na.bootstrap.servers = 127.0.0.1:9\nb.bootstrap.servers = 127.0.0.1:9\na->b.enabled = true\n"
        "a.consumer.receive.buffer.bytes = -1\nb.producer.send.buffer.bytes = -1\n"
    )
    flow = load_config(path, environ={}).flow("a->b")
    consumer = {"group.id": "g", **flow.source_consumer.librdkafka(), "log_level": "0"}
    producer = {**flow.target_producer.librdkafka(), "log_level": "0"}
    assert consumer["socket.receive.buffer.bytes"] == "0" and producer["socket.send.buffer.bytes"] == "0"
    Consumer(consumer).close()
    Producer(producer).flush(0)
