"""Failover and failback runbooks (DESIGN §4): a resumable, dry-runnable state machine with exact offsets."""
