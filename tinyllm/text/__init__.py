"""Text out of ids: the streaming detokenizer and the stop-string matcher."""

from .detokenizer import IncrementalDecoder
from .stop import StopMatcher, StopResult

__all__ = ["IncrementalDecoder", "StopMatcher", "StopResult"]
