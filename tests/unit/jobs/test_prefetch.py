"""``prefetch.claim_size``: a claim never takes more than the free threads can start
(``prefetch`` each, less what is already claimed for them), nor more than a batch."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.prefetch import Prefetched, claim_size

counts = st.integers(min_value=1, max_value=64)


@given(batch=counts, prefetch=counts, free=st.integers(0, 64), buffered=st.integers(0, 200))
def test_a_claim_is_bounded_by_free_threads_times_prefetch(
    batch: int, prefetch: int, free: int, buffered: int
) -> None:
    n = claim_size(batch=batch, prefetch=prefetch, free=free, buffered=buffered)
    assert 0 <= n <= batch
    assert n + buffered <= max(buffered, free * prefetch)  # never past free x prefetch
    if buffered < free * prefetch:  # room left: the claim fills it, up to a batch
        assert n == min(batch, free * prefetch - buffered)


def test_the_default_claims_one_job_per_free_thread() -> None:
    assert claim_size(batch=8, prefetch=1, free=1, buffered=0) == 1  # was 8: a batch
    assert claim_size(batch=8, prefetch=1, free=3, buffered=0) == 3
    assert claim_size(batch=8, prefetch=1, free=3, buffered=3) == 0
    assert claim_size(batch=8, prefetch=8, free=1, buffered=0) == 8  # asked for


def test_the_buffer_hands_jobs_out_in_order_once() -> None:
    buffer = Prefetched()
    buffer.put(["a", "b", "c"])  # type: ignore[list-item]
    assert len(buffer) == 3 and buffer.take() == "a"
    assert buffer.drain() == ["b", "c"] and buffer.take() is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_prefetch_must_be_a_whole_number_of_jobs(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="prefetch must be an int >= 1"):
        WorkerOptions(prefetch=bad)  # type: ignore[arg-type]
