"""Hybrid logical clock: monotonic per node, never behind a clock it has received."""

from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.clock import HLCTimestamp, HybridLogicalClock, latest

walls = st.integers(min_value=0, max_value=10**13)
events = st.lists(
    st.one_of(
        st.tuples(st.just("local"), walls),
        st.tuples(st.just("recv"), walls, st.integers(0, 10**13), st.integers(0, 1000)),
        st.tuples(st.just("many"), walls, st.integers(0, 5)),
    ),
    max_size=60,
)


@given(events)
def test_monotonic_and_never_behind_received(evs: list[tuple[object, ...]]) -> None:
    wall = [0]
    clock = HybridLogicalClock("a", wall=lambda: wall[0])
    last = HLCTimestamp(-1, 0, "a")
    for ev in evs:
        wall[0] = int(ev[1])  # type: ignore[call-overload]
        if ev[0] == "local":
            stamp = clock.now()
        elif ev[0] == "many":  # what as many calls of now() give, each after the last
            made = clock.stamp_texts(int(ev[2]))  # type: ignore[call-overload]
            for stamp in map(HLCTimestamp.decode, made):
                assert (stamp.wall_ms, stamp.counter) > (last.wall_ms, last.counter)
                assert stamp.wall_ms >= wall[0]
                last = stamp
            continue
        else:
            remote = HLCTimestamp(int(ev[2]), int(ev[3]), "b")  # type: ignore[call-overload]
            stamp = clock.receive(remote)
            assert (stamp.wall_ms, stamp.counter) > (remote.wall_ms, remote.counter)
        assert (stamp.wall_ms, stamp.counter) > (last.wall_ms, last.counter)
        assert stamp.wall_ms >= wall[0]
        last = stamp


@given(walls, st.integers(0, 10**9 - 1), st.text(alphabet="abc-xyz", max_size=5))
def test_encoding_round_trips_and_sorts(wall: int, counter: int, node: str) -> None:
    stamp = HLCTimestamp(wall, counter, node)
    assert HLCTimestamp.decode(stamp.encode()) == stamp
    later = HLCTimestamp(wall, counter + 1, node)
    assert stamp.encode() < later.encode()


def test_wall_clock_going_backwards_does_not_rewind() -> None:
    wall = [5_000]
    clock = HybridLogicalClock("n", wall=lambda: wall[0])
    first = clock.now()
    wall[0] = 1_000  # the device's clock was set back by hand
    second = clock.now()
    assert second > first


# Stamps as clocks write them, and as clients may send them: leading zeros dropped or added.
_stamp_parts = st.tuples(
    st.integers(0, 10**15 - 1), st.integers(0, 10**10 - 1), st.text(max_size=6)
)


def _written(parts: tuple[int, int, str], zeros: int) -> str:
    wall, counter, node = parts
    if zeros < 0:  # encode's form
        return HLCTimestamp(wall, counter, node).encode()
    return f"{'0' * zeros}{wall}-{'0' * zeros}{counter}-{node}"


@given(
    st.lists(
        st.tuples(
            _stamp_parts | st.sampled_from([(7, 1, "a"), (7, 1, "ab"), (7, 2, "")]),
            st.integers(-3, 2),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_latest_is_the_greatest_stamp_in_clock_order(
    stamps: list[tuple[tuple[int, int, str], int]],
) -> None:
    texts = [_written(parts, zeros) for parts, zeros in stamps]
    assert latest(texts) == max(HLCTimestamp.decode(text) for text in texts)


@given(events, walls, st.integers(0, 6))
def test_a_run_of_stamps_is_what_as_many_calls_of_now_write(
    evs: list[tuple[object, ...]], at: int, n: int
) -> None:
    # Two clocks with the same history: one gives n texts at once, the other n stamps by
    # now(); the texts, and where each clock is left, are the same.
    wall = [0]
    ours, theirs = (HybridLogicalClock("a", wall=lambda: wall[0]) for _ in range(2))
    for ev in evs:
        wall[0] = int(ev[1])  # type: ignore[call-overload]
        for clock in (ours, theirs):
            if ev[0] == "recv":
                clock.receive(HLCTimestamp(int(ev[2]), int(ev[3]), "b"))  # type: ignore[call-overload]
            else:
                clock.now()
    wall[0] = at
    assert ours.stamp_texts(n) == [theirs.now().encode() for _ in range(n)]
    assert ours.now() == theirs.now()
