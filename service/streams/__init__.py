"""Status streams: the per-process hub over the change log, and the Server-Sent Events routes.

The WebSocket route builds on the same hub: ``StreamHub.open`` gives a
:class:`Subscription` that yields :class:`Change` (or :class:`Reset`) objects.
"""

from hookrelay.service.live.changes import Change, DropReason, Reset
from hookrelay.service.live.hub import StreamHub, TooManyStreams
from hookrelay.service.live.subscription import Subscription

__all__ = ["Change", "DropReason", "Reset", "StreamHub", "Subscription", "TooManyStreams"]
