"""Micro-benchmark of kmilvus.msgstream on a private nats-server: publish_many and consume
throughput for small (time-tick sized) and large (insert sized) messages.

    .venv/bin/python bench/bench_msgstream.py [--small-count N] [--large-count N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from kmilvus.msgstream import Msg, MsgStream, MsgType, pchannel_names, vchannel_name
from kmilvus.util.embedded import start_nats


def _fmt(label: str, n: int, size: int, dt: float) -> str:
    return f"{label:<28} {n:>7} msgs  {n / dt:>10,.0f} msg/s  {n * size / dt / 1e6:>9,.1f} MB/s  ({dt:.2f}s)"


async def run_case(stream: MsgStream, vchannel: str, size: int, count: int, batch: int) -> list[str]:
    payload = os.urandom(size)
    msgs = [Msg(MsgType.Insert, i + 1, payload, {"seg": "1"}) for i in range(count)]
    producer = stream.producer()
    t0 = time.perf_counter()
    seqs: list[int] = []
    for i in range(0, count, batch):
        seqs += await producer.publish_many([(vchannel, m) for m in msgs[i : i + batch]])
    pub = time.perf_counter() - t0
    assert len(seqs) == count and seqs == sorted(seqs)

    out = [_fmt(f"publish_many {size // 1024} KiB", count, size, pub)]
    for mode in ("iterate", "next_batch"):
        consumer = await stream.consume(vchannel, after_seq=seqs[0] - 1)
        t0 = time.perf_counter()
        got = 0
        if mode == "iterate":
            async for _m in consumer:
                got += 1
                if got == count:
                    break
        else:
            while got < count:
                got += len(await consumer.next_batch(timeout=10))
        dt = time.perf_counter() - t0
        assert got == count
        await consumer.close()
        out.append(_fmt(f"consume ({mode}) {size // 1024} KiB", count, size, dt))
    return out


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        server = start_nats(Path(d))
        try:
            stream = await MsgStream.connect(server.endpoint, "bench")
            pch = pchannel_names("bench", 1)[0]
            lines = []
            lines += await run_case(stream, vchannel_name(pch, 1, 0), 1024, args.small_count, 1000)
            lines += await run_case(stream, vchannel_name(pch, 2, 0), 512 * 1024, args.large_count, 64)
            lines += await run_case(stream, vchannel_name(pch, 3, 0), 16 * 1024 * 1024, args.huge_count, 4)
            await stream.delete_stream()
            await stream.close()
        finally:
            server.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small-count", type=int, default=50_000, help="1 KiB messages")
    p.add_argument("--large-count", type=int, default=2_000, help="512 KiB messages")
    p.add_argument("--huge-count", type=int, default=32, help="16 MiB messages (split into parts)")
    asyncio.run(main(p.parse_args()))
