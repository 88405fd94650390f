"""How a callback leaves the process: names resolved with a deadline, addresses checked
against the SSRF policy, the POST itself, and our own faults told from the receiver's.

- :mod:`.dns`           asynchronous lookups (c-ares), a deadline each, a TTL cache
- :mod:`.ssrf`          the address policy, the URL check and the checking resolver
- :mod:`.http`          the senders: one POST with a capped reply (aiohttp; httpx in tests)
- :mod:`.proxy`         the egress proxy: a CONNECT tunnel to the checked address
- :mod:`.tls`           extra CAs and the client certificate of deliveries
- :mod:`.local_faults`  what a failure of this process looks like, and its report

May import (pyproject.toml's layers) the store, destinations and the shared errors, ids,
metrics and models; never ops or keys, its neighbours, nor dispatch, which builds on
it. Sending needs no database: it uses only :mod:`hookrelay.outbox.destinations` (the
prefix table, default ports), errors and metrics.

Its surface, ``__all__``, is what the service imports (never its modules).
"""

from hookrelay.outbox.egress.dns import DNS_SUBMIT_TIMEOUT_S, DNS_TIMEOUT_S, Resolver
from hookrelay.outbox.egress.http import build_sender
from hookrelay.outbox.egress.proxy import EgressProxy
from hookrelay.outbox.egress.ssrf import AddressPolicy, guard_target
from hookrelay.outbox.egress.tls import tls_context

__all__ = [
    "DNS_SUBMIT_TIMEOUT_S",
    "DNS_TIMEOUT_S",
    "AddressPolicy",
    "EgressProxy",
    "Resolver",
    "build_sender",
    "guard_target",
    "tls_context",
]
