"""A receiver that never answers: listens on several ports, reads requests, holds them open.

    python -m bench._blackhole PORT,PORT,... OUT [HOST,HOST,...]

It listens on every port of every host (loopback addresses; 127.0.0.1 when none
are named), each (host, port) one destination to the dispatcher. On SIGTERM it
writes ``{"accepted", "peak_open"}`` to OUT: the connections taken and the most
held open at once, over all of them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys


async def serve(ports: list[int], out: str, hosts: list[str]) -> None:
    state = {"accepted": 0, "open": 0, "peak_open": 0}

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state["accepted"] += 1
        state["open"] += 1
        state["peak_open"] = max(state["peak_open"], state["open"])
        try:
            await reader.read()  # until the sender gives up
        finally:
            state["open"] -= 1
            writer.close()

    servers = [await asyncio.start_server(hold, h, port) for h in hosts for port in ports]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for server in servers:
        server.close()
    with open(out, "w") as f:
        json.dump({"accepted": state["accepted"], "peak_open": state["peak_open"]}, f)


if __name__ == "__main__":
    hosts = sys.argv[3].split(",") if len(sys.argv) > 3 else ["127.0.0.1"]
    asyncio.run(serve([int(p) for p in sys.argv[1].split(",")], sys.argv[2], hosts))
