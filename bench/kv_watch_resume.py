"""How long a KV watch stays quiet after the NATS server restarts (same port, same store).

    python bench/kv_watch_resume.py [--runs 3] [--watch nats-py,gpudra,kvstore] [--down 0.5]
                                    [--settle 1.0] [--jetstream-down 0] [--again SECONDS]

Per run: a private nats-server with JetStream, a client from `gpudra_bus.connect` (its default
backoff), a bucket with one key and a watch of it, caught up. After `--settle` seconds the server
is killed (SIGKILL), restarted `--down` seconds later on the same port and store, and once the
client has reconnected a key is put. Printed per run: seconds from the restart to the client's
reconnection, to the put being acknowledged, and to the watch delivering that put ("resume"; the
figure the issue is about), then the median per watch kind. With a longer `--down` the client's
reconnection backoff (`gpudra_bus.Backoff`, up to 5 s between attempts) adds to all three.

A second restart soon after a long outage: with `--jetstream-down S` the server first comes back
*without JetStream* for S seconds (the client reconnects, the watch's resets fail and back off),
and only then with it; with `--again S` the server is killed and restarted once more S seconds
after the watch delivered, and the watch's resume after that second restart is printed too (the
figure a backoff left over from the first outage would lengthen). A plain long `--down` builds
no backoff: no reset is tried while the client is disconnected.

Watch kinds:

- `nats-py`: `KeyValue.watch` as nats-py makes it (idle heartbeats every 5 s);
- `gpudra`: `gpudra_bus.watch_kv` (heartbeats every `WATCH_HEARTBEAT` s, checked our way), which
  is also what `kv.watch` is on the buckets `ensure_bucket(s)` hand out;
- `kvstore`: `gpudra_kube.kv_backend.KvStore.watch`, standalone mode's API-server watch.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

if __package__ in (None, "") and "gpudra_bus" not in sys.modules:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "libs"))

from gpudra_bus import connect, disconnect, watch_kv
from gpudra_bus.streams import BucketSpec, ensure_bucket
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_standalone.nats_server import NatsServer, find_nats_server_binary
from gpudra_testing.claims import claim

KINDS = ("nats-py", "gpudra", "kvstore")
BUCKET = "bench-watch"


async def without_jetstream(port: int, seconds: float) -> None:
    """A nats-server without JetStream on `port` for `seconds`: NATS is back, JetStream is not."""
    proc = await asyncio.create_subprocess_exec(
        str(find_nats_server_binary()),
        *("-a", "127.0.0.1", "-p", str(port)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await asyncio.sleep(seconds)
    finally:
        proc.kill()
        await proc.wait()


async def one_run(
    kind: str, settle: float, down: float, jetstream_down: float, again: float | None
) -> tuple[float, float, float, float | None]:
    """(reconnected, put acknowledged, watch delivered) in seconds after the restart, and with
    `again` the watch's resume after the second restart."""
    server = NatsServer().start()
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await connect(server.url, name="bench", reconnected_cb=on_reconnect, deadline=10)
    try:
        kv = await ensure_bucket(nc.jetstream(), BucketSpec(BUCKET))
        store = KvStore(nc, buckets={RESOURCE_CLAIMS: BUCKET})
        seen: asyncio.Queue[str] = asyncio.Queue()

        async def entries() -> AsyncIterator[str]:
            if kind == "kvstore":
                async for event in store.watch(RESOURCE_CLAIMS, resource_version="0"):
                    yield str(event.object["metadata"]["name"])
                return
            if kind == "gpudra":
                watcher = await watch_kv(kv, ">")
            else:  # nats-py's own handle: ensure_bucket's watches are watch_kv's
                plain = await nc.jetstream().key_value(BUCKET)
                watcher = await plain.watch(">")
            try:
                async for entry in watcher:
                    if entry is not None:
                        yield entry.key.split(".")[-1]
            finally:
                await watcher.stop()  # type: ignore[no-untyped-call]

        async def follow() -> None:
            async for name in entries():
                seen.put_nowait(name)

        put: Callable[[str], Awaitable[object]] = lambda name: store.create(  # noqa: E731
            RESOURCE_CLAIMS, claim(name)
        )

        async def restart(name: str, jetstream_down: float) -> tuple[float, float, float]:
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(down)
            if jetstream_down > 0:
                await without_jetstream(server.port, jetstream_down)
            reconnected.clear()
            await asyncio.to_thread(server.restart)
            t0 = time.monotonic()
            await asyncio.wait_for(reconnected.wait(), 60)
            t_reconnect = time.monotonic() - t0
            while True:
                try:
                    await put(name)
                    break
                except Exception:  # - JetStream may still be starting: put again
                    await asyncio.sleep(0.05)
            t_put = time.monotonic() - t0
            while await asyncio.wait_for(seen.get(), 120) != name:
                pass
            return t_reconnect, t_put, time.monotonic() - t0

        task = asyncio.create_task(follow())
        try:
            await put("before")
            while await asyncio.wait_for(seen.get(), 10) != "before":
                pass
            await asyncio.sleep(settle)
            first = await restart("after", jetstream_down)
            if again is None:
                return (*first, None)
            await asyncio.sleep(again)
            return (*first, (await restart("again", 0.0))[2])
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await disconnect(nc, drain=False)
        server.stop()


async def run(
    kinds: list[str],
    runs: int,
    settle: float,
    down: float,
    jetstream_down: float = 0.0,
    again: float | None = None,
) -> None:
    for kind in kinds:
        resumes, seconds = [], []
        for i in range(runs):
            reconnect, put, resume, second = await one_run(
                kind, settle, down, jetstream_down, again
            )
            resumes.append(resume)
            line = (
                f"{kind:8} run {i + 1}: reconnected {reconnect:5.2f} s, put acked {put:5.2f} s, "
                f"watch delivered {resume:5.2f} s after the restart"
            )
            if second is not None:
                seconds.append(second)
                line += f"; {second:5.2f} s after the second restart"
            print(line, flush=True)
        median = f"{kind:8} median {statistics.median(resumes):5.2f} s"
        if seconds:
            median += f", second restart {statistics.median(seconds):5.2f} s"
        print(f"{median}  (runs: {runs})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--watch", default=",".join(KINDS), help="comma-separated: " + ",".join(KINDS)
    )
    parser.add_argument("--settle", type=float, default=1.0, help="seconds watched before the kill")
    parser.add_argument("--down", type=float, default=0.5, help="seconds the server is down")
    parser.add_argument(
        "--jetstream-down",
        type=float,
        default=0.0,
        help="seconds the server then runs without JetStream before it is back with it",
    )
    parser.add_argument(
        "--again",
        type=float,
        default=None,
        help="restart the server once more this many seconds after the watch delivered",
    )
    args = parser.parse_args(argv)
    kinds = [k for k in args.watch.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown watch kind(s): {', '.join(sorted(unknown))}")
    asyncio.run(run(kinds, args.runs, args.settle, args.down, args.jetstream_down, args.again))
    return 0


if __name__ == "__main__":
    sys.exit(main())
