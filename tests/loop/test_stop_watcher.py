"""The process's one stop watcher thread (loop/watch.py), on in-memory sources: the exchanges it
watches side by side each see their own stop, fail alone, and leave no connection behind."""

from __future__ import annotations

import os
import threading

import pytest
from django.db import OperationalError

from loop.cancellation import CancelToken
from loop.watch import LEASE_LOST, StopWatcher
from tests.loop.fakes import WatchSource, wait_until

TICK = 0.01  # the poll interval of these tests; no assertion depends on how long anything took


def polled_twice_more(source: WatchSource, exchange_id: int, what: str) -> None:
    """Wait for two more polls of ``exchange_id``: a full pass of the watcher has run since now."""
    seen = source.polls.get(exchange_id, 0)
    wait_until(lambda: source.polls.get(exchange_id, 0) >= seen + 2, what)


def watcher_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("stop-watch:")]


def test_two_exchanges_watched_at_once_each_see_their_own_stop() -> None:
    source = WatchSource()
    first, second = CancelToken(), CancelToken()
    with StopWatcher(source, 1, first, TICK), StopWatcher(source, 2, second, TICK):
        wait_until(lambda: source.polls.get(1) and source.polls.get(2), "both exchanges are polled")
        source.stop(1)
        assert first.wait(10) and first.reason == "stop requested"
        stopped_at = source.polls[1]
        polled_twice_more(source, 2, "the other exchange is still polled")
        assert not second.cancelled
        assert source.polls[1] == stopped_at  # a stopped entry is dropped, not polled again
        source.stop(2)
        assert second.wait(10) and second.reason == "stop requested"
    assert source.threads == {f"stop-watch:{os.getpid()}"}  # one thread polled both
    assert len(watcher_threads()) == 1


def test_an_entry_whose_source_fails_stops_only_its_own_turn() -> None:
    broken_source, healthy_source = WatchSource(), WatchSource()
    broken_source.fail[1] = ValueError("a bug in the store")
    broken, healthy = CancelToken(), CancelToken()
    with StopWatcher(broken_source, 1, broken, TICK), StopWatcher(healthy_source, 2, healthy, TICK):
        assert broken.wait(10)
        assert broken.reason == "stop watcher failed (ValueError)"
        polled_twice_more(healthy_source, 2, "the healthy exchange is still polled")
        assert not healthy.cancelled
        healthy_source.stop(2)
        assert healthy.wait(10) and healthy.reason == "stop requested"
    assert broken_source.polls[1] == 1


def test_an_infrastructure_error_backs_off_and_the_stop_is_still_seen() -> None:
    source = WatchSource()
    source.fail[1] = OperationalError("server closed the connection unexpectedly")
    token = CancelToken()
    errors_before = StopWatcher.transient_errors
    with StopWatcher(source, 1, token, TICK):
        wait_until(lambda: StopWatcher.transient_errors >= errors_before + 2, "two polls failed")
        assert source.releases >= 2  # each failure drops the broken connection
        assert not token.cancelled
        del source.fail[1]
        source.stop(1)
        assert token.wait(10) and token.reason == "stop requested"


def test_after_every_entry_left_the_thread_has_released_its_connections() -> None:
    first_source, second_source = WatchSource(), WatchSource()
    with StopWatcher(first_source, 1, CancelToken(), TICK), StopWatcher(second_source, 2, CancelToken(), TICK):
        wait_until(lambda: first_source.polls.get(1) and second_source.polls.get(2), "both are polled")
        with StopWatcher(first_source, 3, CancelToken(), TICK):
            wait_until(lambda: first_source.polls.get(3), "the third is polled")
        polled_twice_more(first_source, 1, "the others are still polled")
        assert first_source.releases == second_source.releases == 0  # held while there is work
    wait_until(lambda: first_source.releases and second_source.releases, "both sources are released")

    # The same thread watches the next exchange.
    source, token = WatchSource(), CancelToken()
    with StopWatcher(source, 4, token, TICK):
        source.stop(4)
        assert token.wait(10)
    assert len(watcher_threads()) == 1


def test_an_exchange_shorter_than_its_interval_costs_no_poll_and_no_release() -> None:
    source = WatchSource()
    with StopWatcher(source, 1, CancelToken(), 60.0, claim="me"):
        pass
    with StopWatcher(source, 1, CancelToken(), 60.0, claim="me"):
        pass
    assert source.polls == {} and source.renewals == {} and source.releases == 0


def test_a_token_already_cancelled_is_dropped_unpolled() -> None:
    source = WatchSource()
    done, watched = CancelToken(), CancelToken()
    done.cancel("finished")
    with StopWatcher(source, 1, done, TICK), StopWatcher(source, 2, watched, TICK):
        polled_twice_more(source, 2, "the other exchange is polled")
    assert 1 not in source.polls and done.reason == "finished"


def test_the_lease_is_renewed_and_a_lost_one_stops_only_its_turn() -> None:
    source = WatchSource(lease_seconds=3 * TICK)  # renewed every tick
    source.lost.add(1)
    lost, kept = CancelToken(), CancelToken()
    with StopWatcher(source, 1, lost, TICK, claim="me"), StopWatcher(source, 2, kept, TICK, claim="me"):
        assert lost.wait(10) and lost.reason == LEASE_LOST
        wait_until(lambda: source.renewals.get(2, 0) >= 2, "the other lease is renewed")
        assert not kept.cancelled
    assert source.renewals[1] == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_watches_with_a_thread_of_its_own() -> None:
    parent_source = WatchSource()
    with StopWatcher(parent_source, 1, CancelToken(), TICK):
        wait_until(lambda: parent_source.polls.get(1), "the parent's watcher runs")
        pid = os.fork()
        if pid == 0:  # the child: the parent's thread is not here; a stop is seen all the same
            code = 1
            try:
                source, token = WatchSource(), CancelToken()
                source.stop(7)
                with StopWatcher(source, 7, token, TICK):
                    code = 0 if token.wait(10) else 2
                if source.threads != {f"stop-watch:{os.getpid()}"}:
                    code = 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
