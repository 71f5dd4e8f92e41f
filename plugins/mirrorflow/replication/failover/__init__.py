"""Failover and failback runbooks (docs/design.md §4): a resumable, dry-runnable state machine with exact offsets."""
