"""A progress bar on a terminal, silence elsewhere (pipes, CI, tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(items: Iterable[T], desc: str) -> Iterable[T]:
    return tqdm(items, desc=desc, unit="tensor", leave=False, disable=not sys.stderr.isatty())
