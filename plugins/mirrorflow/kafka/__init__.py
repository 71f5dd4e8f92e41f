"""The only place that imports confluent_kafka: clients built from resolved settings, and admin operations."""
