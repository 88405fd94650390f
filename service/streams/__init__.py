"""Status streams: the per-process hub over the change log, and the Server-Sent Events routes.

The WebSocket route builds on the same hub: ``StreamHub.open`` gives a
:class:`Subscription` that yields :class:`Change` (or :class:`Reset`) objects.
"""

from service.streams.changes import Change, DropReason, Reset
from service.streams.hub import StreamHub, TooManyStreams
from service.streams.subscription import Subscription

__all__ = ["Change", "DropReason", "Reset", "StreamHub", "Subscription", "TooManyStreams"]
