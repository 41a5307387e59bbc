"""Checkpoints: save an agent's whole state after each turn; resume after a crash exactly where it stopped."""

from memkit.layers.checkpoints._agent import AgentState
from memkit.layers.checkpoints._config import CheckpointConfig, CheckpointInfo
from memkit.layers.checkpoints._layer import Checkpoints

__all__ = ["AgentState", "CheckpointConfig", "CheckpointInfo", "Checkpoints"]
