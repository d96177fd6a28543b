"""The test run's Ray is started again when Ray's own start-up limit runs out, and only then
(tests/support/ray_start.py): another failure, or the last try's, comes as it came."""

from __future__ import annotations

import pytest

from tests.support import ray_start

pytestmark = pytest.mark.pure

TIMEOUT = Exception("The current node timed out during startup. This could happen because ...")


class Flaky:
    """A cluster type whose first ``failures`` starts raise ``error``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.starts = failures, error, 0

    def __call__(self, *, initialize_head: bool, head_node_args: dict[str, object]) -> str:
        self.starts += 1
        if self.starts <= self.failures:
            raise self.error
        assert initialize_head
        return f"cluster {head_node_args['num_cpus']}"


def test_a_start_that_timed_out_is_tried_again(capsys: pytest.CaptureFixture[str]) -> None:
    flaky = Flaky(ray_start.TRIES - 1, TIMEOUT)
    assert ray_start.started(flaky, {"num_cpus": 2}) == "cluster 2"
    assert flaky.starts == ray_start.TRIES
    assert capsys.readouterr().err.count("did not start (try") == ray_start.TRIES - 1


def test_the_last_timeout_is_raised() -> None:
    flaky = Flaky(ray_start.TRIES, TIMEOUT)
    with pytest.raises(Exception, match="timed out during startup"):
        ray_start.started(flaky, {"num_cpus": 2})
    assert flaky.starts == ray_start.TRIES


def test_another_failure_is_raised_at_once() -> None:
    flaky = Flaky(1, ValueError("no such option"))
    with pytest.raises(ValueError, match="no such option"):
        ray_start.started(flaky, {"num_cpus": 2})
    assert flaky.starts == 1
