"""Ranking metrics: definitions (one module per family), incremental state, aggregatable sums."""

from streameval.scoring.query import QueryScore, Scorer, ScoringParams
from streameval.scoring.spec import METRIC_NAMES, MetricSpec
from streameval.scoring.sums import Sums

__all__ = ["METRIC_NAMES", "MetricSpec", "QueryScore", "Scorer", "ScoringParams", "Sums"]
