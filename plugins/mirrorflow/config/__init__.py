"""mm2.properties → validated, resolved, immutable settings with MM2's precedence rules."""

from mirrorflow.config.client_config import ClientConfig
from mirrorflow.config.issues import ConfigError, Issue
from mirrorflow.config.loader import load_config
from mirrorflow.config.model import ClusterConfig, Flow, MirrorConfig

__all__ = ["ClientConfig", "ClusterConfig", "ConfigError", "Flow", "Issue", "MirrorConfig", "load_config"]
