from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.timeouts import Timeouts


def test_derived_hierarchy_is_ordered() -> None:
    t = Timeouts(30)
    assert t.external_call_seconds < t.job < t.supervisor_seconds < t.lease_seconds


def test_wrong_order_names_the_values() -> None:
    with pytest.raises(ConfigurationError) as info:
        Timeouts(job=30, external_call=5, supervisor=60, lease=45)
    message = str(info.value)
    assert "supervisor=60 which is not below lease=45" in message
    assert "external_call=5" in message and "job=30" in message


def test_external_call_must_fit_in_job() -> None:
    with pytest.raises(ConfigurationError, match="external_call=30 which is not below job=30"):
        Timeouts(job=30, external_call=30)


def test_non_positive_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="external_call=-1 must be a positive"):
        Timeouts(job=0, external_call=-1, supervisor=1, lease=2)


@given(st.lists(st.floats(min_value=0.001, max_value=1e6), min_size=4, max_size=4))
def test_accepts_exactly_the_strictly_increasing(values: list[float]) -> None:
    ext, job, sup, lease = values
    ordered = ext < job < sup < lease
    try:
        Timeouts(job=job, external_call=ext, supervisor=sup, lease=lease)
    except ConfigurationError:
        assert not ordered
    else:
        assert ordered
