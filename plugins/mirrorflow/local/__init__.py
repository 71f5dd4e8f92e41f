"""Real Apache Kafka (KRaft) clusters on loopback from Maven Central jars, for the demo, tests, benchmarks."""
