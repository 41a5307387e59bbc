"""Episodic memory: past tasks (trigger, actions, outcome, feedback, lessons), found again by similarity."""

from memkit.layers.episodic._layer import EpisodicMemory
from memkit.layers.episodic._records import (
    OUTCOMES,
    Action,
    Episode,
    EpisodeHit,
    EpisodePage,
    EpisodicConfig,
    LessonsSource,
    Outcome,
)

__all__ = [
    "OUTCOMES",
    "Action",
    "Episode",
    "EpisodeHit",
    "EpisodePage",
    "EpisodicConfig",
    "EpisodicMemory",
    "LessonsSource",
    "Outcome",
]
