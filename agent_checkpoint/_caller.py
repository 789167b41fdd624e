"""Warnings attributed to the caller's line, not to this library's.

``warnings.warn``'s ``stacklevel`` counts frames, and how many of this library's frames lie
between a warning and the call that caused it depends on the path (a backend's error context
manager, the Store's retries, an ``AsyncStore``'s greenlet). A fixed count named
``contextlib.py``, so neither the user's line nor a ``module=`` filter could find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import warnings
from types import FrameType

__all__ = ["caller_frame", "warn_caller"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_ASYNCIO = os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep
_CONTEXTLIB = os.path.abspath(contextlib.__file__)


def _ours(frame: FrameType) -> bool:
    """A frame of this library, or of the machinery its calls pass through."""
    name = frame.f_code.co_filename
    return name.startswith((_PACKAGE, _ASYNCIO)) or name == _CONTEXTLIB


def _caller(frame: FrameType | None) -> FrameType | None:
    """The first frame outside this library from ``frame`` outwards: across greenlet switches
    too, as an ``AsyncStore`` runs the Store's code in a greenlet whose first frame has no
    ``f_back``, switched into from the coroutine the caller awaits."""
    # getattr: another thread may be importing greenlet right now (the home loop's, say)
    getcurrent = getattr(sys.modules.get("greenlet"), "getcurrent", None)
    current = None if getcurrent is None else getcurrent()
    while frame is not None and _ours(frame):
        frame = frame.f_back
        if frame is None and current is not None:
            called_from: FrameType | None = getattr(current, "called_from", None)
            if called_from is not None:  # a call run on the home loop (_home.py)
                return called_from
            if current.parent is not None:
                current = current.parent  # suspended in its switch into the greenlet below it
                frame = current.gr_frame
    return frame


def caller_frame() -> FrameType | None:
    """The frame of the caller's program that made the running call, for a call that runs on
    in another thread (``Bridge``): its line is where that frame waits."""
    return _caller(sys._getframe(1))


def warn_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)``, attributed to the first frame outside this
    library: the line of the caller's program that made the call."""
    frame = _caller(sys._getframe(1))
    if frame is None:  # called from nowhere but this library (a thread of its own, say)
        warnings.warn(message, category, stacklevel=2)
        return
    where = frame.f_globals
    # No module_globals, as warnings.warn passes none: with them, the source line is asked of
    # the module's loader, and the loader of a module run as ``python -m pkg.mod`` refuses
    # the name ``__main__`` (ImportError). Without them it is read from the file, by name.
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=where.get("__name__", "<string>"),
        registry=where.setdefault("__warningregistry__", {}),
    )
