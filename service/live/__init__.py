"""Status streams: the per-process hub over the change log, long polls, after-commit
wake-ups, and the Server-Sent Events and WebSocket routes built on them.

``StreamHub.open`` gives a :class:`Subscription` that yields :class:`Change` (or
:class:`Reset`) objects; SSE (:mod:`.sse`, :mod:`.sse_routes`) and the WebSocket
(:mod:`.ws_messages`, :mod:`.ws_session`, :mod:`.ws_routes`) both read it.
:mod:`.long_poll` serves ``?wait=``; :mod:`.wakeups` wakes them all once a write commits.

May import :mod:`hookrelay.service.api` (errors, auth, request checks) and the outbox;
never the console, the server or the CLI.
"""

from hookrelay.service.live.changes import Change, DropReason, Reset
from hookrelay.service.live.hub import StreamHub, TooManyStreams
from hookrelay.service.live.subscription import Subscription

__all__ = ["Change", "DropReason", "Reset", "StreamHub", "Subscription", "TooManyStreams"]
