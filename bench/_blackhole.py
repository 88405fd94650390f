"""A receiver that never answers: listens on several ports, reads requests, holds them open.

    python -m bench._blackhole PORT,PORT,... OUT

On SIGTERM it writes ``{"accepted", "peak_open"}`` to OUT: the connections taken
and the most held open at once, over all ports.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys


async def serve(ports: list[int], out: str) -> None:
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

    servers = [await asyncio.start_server(hold, "127.0.0.1", port) for port in ports]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for server in servers:
        server.close()
    with open(out, "w") as f:
        json.dump({"accepted": state["accepted"], "peak_open": state["peak_open"]}, f)


if __name__ == "__main__":
    asyncio.run(serve([int(p) for p in sys.argv[1].split(",")], sys.argv[2]))
