"""Status streams: the per-process hub over the change log, and the Server-Sent Events routes.

The WebSocket route builds on the same hub: ``StreamHub.open`` gives a
:class:`Subscription` that yields :class:`Change` (or :class:`Reset`) objects.
"""

from .changes import Change, DropReason, Reset
from .hub import StreamHub, TooManyStreams
from .subscription import Subscription

__all__ = ["Change", "DropReason", "Reset", "StreamHub", "Subscription", "TooManyStreams"]
