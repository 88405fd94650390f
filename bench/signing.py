"""Signing cost per webhook attempt: v1 (HMAC-SHA256) against v1a (Ed25519) and both.

Every attempt is signed afresh (its timestamp changes), so this is work the
dispatcher does per POST. Signs a typical task body with a prepared ``Signer``
for each scheme, in one process, and prints signatures/s and each scheme's
cost relative to v1 measured in the same run.

    python -m bench signing [--seconds 2] [--body-bytes 1024]
"""

from __future__ import annotations

import argparse
import time

from bench.common import record
from hookrelay.outbox.keys.ed25519 import generate_keypair
from hookrelay.outbox.keys.signing import Signer, generate_secret


def rate(signer: Signer, body: bytes, seconds: float) -> float:
    """Signatures per second over ``seconds`` of wall time."""
    n, ts = 0, int(time.time())
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(100):
            signer.signature("evt_01HZXW3K5N8Q2V7Y4T6R9M1B0C", ts, body)
        n += 100
    return n / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--body-bytes", type=int, default=1024)
    args = p.parse_args()
    body = b'{"type":"task.succeeded","data":{"x":"' + b"a" * args.body_bytes + b'"}}'
    secret, pair = generate_secret(), generate_keypair()
    schemes = {
        "v1": Signer([secret]),
        "v1a": Signer([], [pair.private_key]),
        "both": Signer([secret], [pair.private_key]),
        "v1a, rotating (2 keys)": Signer([], [pair.private_key, generate_keypair().private_key]),
    }
    rates = {name: rate(s, body, args.seconds) for name, s in schemes.items()}
    rows = ["| scheme | signatures/s | µs each | cost vs v1 |", "|---|---|---|---|"]
    for name, r in rates.items():
        rows.append(f"| {name} | {r:,.0f} | {1e6 / r:.1f} | {rates['v1'] / r:.1f}x |")
    table = "\n".join(rows)
    print(table)
    cmd = f"python -m bench signing --seconds {args.seconds:g} --body-bytes {args.body_bytes}"
    record("signing: v1 against v1a", cmd, table)


if __name__ == "__main__":
    main()
