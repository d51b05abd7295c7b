import pytest

from gpudra_inventory.skew import ServerClock


def test_no_messages_no_correction() -> None:
    assert ServerClock(window=30.0).server_time(100.0) == 100.0


def test_a_clock_ahead_of_the_server_is_corrected_by_the_quickest_delivery() -> None:
    clock = ServerClock(window=30.0)
    clock.observe(stamp=1000.0, received=1120.5)  # 120 s ahead, 0.5 s in flight
    clock.observe(stamp=1001.0, received=1121.1)  # quicker: 0.1 s
    clock.observe(stamp=1002.0, received=1122.9)
    assert clock.offset(1123.0) == pytest.approx(120.1)
    assert clock.server_time(1123.0) == pytest.approx(1123.0 - 120.1)


def test_a_replayed_old_message_does_not_make_the_server_look_later() -> None:
    clock = ServerClock(window=30.0)
    clock.observe(stamp=995.0, received=1000.0)  # a live node, 5 s of lag
    clock.observe(stamp=400.0, received=1000.1)  # a dead node's last inventory, replayed
    assert clock.offset(1000.2) == 5.0


def test_old_samples_leave_the_window_but_the_newest_stays() -> None:
    clock = ServerClock(window=100.0)
    clock.observe(stamp=100.0, received=100.0)  # in step
    clock.observe(stamp=101.0, received=161.0)  # then this clock jumps 60 s ahead
    assert clock.offset(161.0) == 0.0
    assert clock.offset(201.0) == 60.0  # the in-step sample left the window
    assert clock.offset(10_000.0) == 60.0  # a quiet bus keeps the last estimate
