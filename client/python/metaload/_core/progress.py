"""Progress of a load: the record the C++ core hands its progress callback
(include/metaload/progress.h), summed over the native calls one load makes, and the bar drawn
from it the way transformers draws "Loading weights": tqdm on stderr, on the node's first rank,
off where transformers' progress bars are off.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Union

from .. import _native
from .._errors import BadInputError


@dataclass(frozen=True)
class LoadProgress:
    """How far this rank's load is: what ``progress=`` callables receive.

    Cumulative counts, which never decrease within a load (``total_bytes`` aside, which a
    fan-out may correct once it knows what arrives from other ranks): bytes read directly from
    checkpoint files, streamed from daemons, received from other ranks by fan-out; of
    ``total_bytes`` this rank is to read or receive; tensors whose values come from the
    checkpoint, filled so far of ``tensors_total``. ``finished``: the last record of the load,
    whose byte counts are exactly the report's (``LoadReport.direct_bytes``,
    ``streamed_bytes``, ``fanout_received_bytes``).
    """

    direct_bytes: int = 0
    streamed_bytes: int = 0
    received_bytes: int = 0
    total_bytes: int = 0
    tensors_done: int = 0
    tensors_total: int = 0
    seconds: float = 0.0
    finished: bool = False

    @property
    def done_bytes(self) -> int:
        return self.direct_bytes + self.streamed_bytes + self.received_bytes


#: What ``progress=`` takes: None (a bar on the node's first rank unless transformers' progress
#: bars are off), True (a bar on this rank), False (none), or a callable of LoadProgress.
ProgressArg = Union[None, bool, Callable[[LoadProgress], None]]
Sink = Callable[[LoadProgress], None]

_OFF = {"1", "ON", "YES", "TRUE"}


def bars_enabled() -> bool:
    """Whether transformers would draw its progress bars: its own switch
    (``transformers.utils.logging.disable_progress_bar()``) where transformers is imported,
    else the variable behind it, ``HF_HUB_DISABLE_PROGRESS_BARS``. Never imports transformers
    (seconds): where it is not imported, nobody can have turned its switch."""
    if "transformers" in sys.modules:
        try:
            from transformers.utils import logging as hf_logging

            return bool(hf_logging.is_progress_bar_enabled())
        except (ImportError, AttributeError):
            pass
    return os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").strip().upper() not in _OFF


def _local_rank(rank: int) -> int:
    text = os.environ.get("LOCAL_RANK", "")
    try:
        return int(text) if text else rank
    except ValueError:
        return rank  # torchrun sets it; anything else is not ours to refuse here


def sink(progress: ProgressArg, rank: int, *, desc: str = "Loading weights",
         tqdm_class: Optional[Any] = None) -> Optional[Sink]:
    """Where this load's records go: the caller's callable, a bar, or nowhere (None)."""
    if progress is False:
        return None
    if progress is not None and progress is not True:
        if not callable(progress):
            raise BadInputError(f"progress={progress!r}: give True, False, None or a callable of LoadProgress")
        return progress
    if progress is None and (_local_rank(rank) != 0 or not bars_enabled()):
        return None
    if tqdm_class is None:
        try:
            import tqdm.auto  # type: ignore[import-untyped]  # no stubs: metaload does not depend on tqdm
        except ImportError:  # no bar without it
            return None
        tqdm_class = tqdm.auto.tqdm
    return _Bar(tqdm_class, desc)


class _Bar:
    """A tqdm bar in bytes; its postfix says what this rank read, streamed and received."""

    def __init__(self, tqdm_class: Any, desc: str) -> None:
        self._tqdm_class = tqdm_class
        self._desc = desc
        self._bar: Any = None

    def __call__(self, p: LoadProgress) -> None:
        total = max(p.total_bytes, p.done_bytes)
        if self._bar is None:
            self._bar = self._tqdm_class(total=total, desc=self._desc, unit="B", unit_scale=True, unit_divisor=1024,
                                         leave=True, dynamic_ncols=True)
        self._bar.total = total
        self._bar.set_postfix_str(f"read {_native.format_bytes(p.direct_bytes)}, streamed "
                                  f"{_native.format_bytes(p.streamed_bytes)}, received "
                                  f"{_native.format_bytes(p.received_bytes)}", refresh=False)
        self._bar.update(p.done_bytes - self._bar.n)
        if p.finished:
            self._bar.close()


class Tracker:
    """One load's records across its native calls (materialize makes one per init policy): each
    call's counts added to those of the calls before it, the last record sent by ``close``."""

    def __init__(self, to: Sink) -> None:
        self._to = to
        self._before = LoadProgress()
        self._started = time.monotonic()
        self._closed = False
        self._broken = False

    def native(self, p: "_native.Progress") -> None:
        """The callback handed to the native calls, one after another."""
        b = self._before
        record = LoadProgress(direct_bytes=b.direct_bytes + p.direct_bytes,
                              streamed_bytes=b.streamed_bytes + p.streamed_bytes,
                              received_bytes=b.received_bytes + p.received_bytes,
                              total_bytes=b.total_bytes + p.total_bytes,
                              tensors_done=b.tensors_done + p.tensors_done,
                              tensors_total=b.tensors_total + p.tensors_total,
                              seconds=time.monotonic() - self._started)
        if p.finished:  # this call's part is final: the next call's counts add to it
            self._before = record
        self._send(record)

    def close(self) -> None:
        """The load's last record (``finished``); also when it failed. Once."""
        if self._closed:
            return
        self._closed = True
        self._send(replace(self._before, seconds=time.monotonic() - self._started, finished=True))

    def _send(self, record: LoadProgress) -> None:
        # As the core treats a callback that throws: dropped with a warning, the load goes on.
        if self._broken:
            return
        try:
            self._to(record)
        except Exception as e:
            self._broken = True
            warnings.warn(f"metaload: the progress callback failed ({type(e).__name__}: {e}); no more progress is "
                          "reported", stacklevel=2)


def tracker(progress: ProgressArg, rank: int, *, tqdm_class: Optional[Any] = None) -> Optional[Tracker]:
    """The Tracker of one load for ``progress=`` on this rank, or None (nothing counted)."""
    to = sink(progress, rank, tqdm_class=tqdm_class)
    return Tracker(to) if to is not None else None
