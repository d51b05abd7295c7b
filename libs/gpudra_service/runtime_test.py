from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpudra_service.errors import SettingsError
from gpudra_service.runtime import cancel_until_done, run_service, until_stopped
from gpudra_service.settings import CommonSettings, load


class Boom(Exception):
    pass


def _load(argv: Sequence[str] | None) -> CommonSettings:
    return load(CommonSettings, "GPUDRA_T_", argv, {})


async def _until_stopped(settings: CommonSettings, stop: asyncio.Event) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # what a kubelet does to a pod
    await asyncio.wait_for(stop.wait(), 5)


async def _raise(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    ("argv", "serve", "code"),
    [
        pytest.param([], _until_stopped, 0, id="signal-stops-cleanly"),
        pytest.param(["--health-port", "x"], _until_stopped, 2, id="bad-flag"),
        pytest.param([], lambda s, e: _raise(SettingsError("tls files")), 2, id="bad-at-start"),
        pytest.param([], lambda s, e: _raise(Boom("nats gone")), 1, id="fatal"),
    ],
)
async def test_exit_codes(argv: list[str], serve: object, code: int) -> None:
    assert await run_service("t", _load, serve, argv, fatal=(Boom,)) == code  # type: ignore[arg-type]


async def test_a_trace_file_that_cannot_be_opened_is_a_settings_error(tmp_path: Path) -> None:
    served: list[CommonSettings] = []

    async def serve(settings: CommonSettings, stop: asyncio.Event) -> None:
        served.append(settings)

    argv = ["--trace-exporter", "console", "--trace-file", str(tmp_path / "no-dir" / "spans.jsonl")]
    assert await run_service("t", _load, serve, argv) == 2
    assert served == []


async def test_other_errors_propagate() -> None:
    with pytest.raises(KeyError):
        await run_service("t", _load, lambda s, e: _raise(KeyError("bug")), [])


def test_settings_type_is_kept() -> None:
    @dataclasses.dataclass(frozen=True)
    class Mine(CommonSettings):
        extra: int = 1

    seen: list[Mine] = []

    async def serve(settings: Mine, stop: asyncio.Event) -> None:
        seen.append(settings)

    def loader(argv: Sequence[str] | None) -> Mine:
        return load(Mine, "GPUDRA_T_", argv, {})

    assert asyncio.run(run_service("t", loader, serve, ["--extra", "4"])) == 0
    assert seen[0].extra == 4


async def test_cancel_until_done_outlasts_a_swallowed_cancellation() -> None:
    """A task that drops the first cancellation (as 3.11's wait_for can) still ends."""
    cancellations = 0

    async def stubborn() -> str:
        nonlocal cancellations
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations > 1:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_until_done(task, every=0.01), 5)
    assert task.cancelled()
    assert cancellations == 2


async def test_cancel_until_done_leaves_a_finished_task_alone() -> None:
    async def quick() -> int:
        return 7

    task = asyncio.create_task(quick())
    await task
    await cancel_until_done(task)
    assert task.result() == 7


async def test_until_stopped_returns_the_result() -> None:
    async def work() -> int:
        return 7

    assert await until_stopped(work(), asyncio.Event()) == 7


async def test_until_stopped_cancels_the_work_when_stopped() -> None:
    stop = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> int:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    waiting = asyncio.create_task(until_stopped(forever(), stop))
    await asyncio.sleep(0.01)
    stop.set()
    assert await asyncio.wait_for(waiting, 5) is None
    assert cancelled.is_set()


async def test_cancel_until_done_raises_what_the_task_ended_with() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_until_done(task)
