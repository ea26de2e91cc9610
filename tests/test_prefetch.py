"""The read-ahead thread: items arrive in order, its errors are raised in the consumer, and a
consumer that stops early never waits for it for ever."""

from __future__ import annotations

import threading

import pytest

from ingest.process.prefetch import prefetch

SAFETY = 30  # seconds: a close still running by then is stuck for good


def test_items_arrive_in_order_and_errors_are_raised_in_the_consumer():
    assert list(prefetch(iter(range(10)))) == list(range(10))

    def fails():
        yield 1
        raise ValueError("row 3: bad")

    with pytest.raises(ValueError, match="row 3"):
        list(prefetch(fails()))


def _closes(items) -> bool:
    """Whether closing the consumer returns (in a thread, so a stuck close fails the test)."""
    closer = threading.Thread(target=items.close, daemon=True)
    closer.start()
    closer.join(SAFETY)
    return not closer.is_alive()


def test_a_consumer_stopping_while_the_thread_waits_to_hand_over_the_end_is_not_kept_waiting():
    # The queue is full (the consumer took one item of three) and the thread, done with its
    # items, waits for room to hand over their end: where a reader whose writer died used to
    # wait for ever.
    exhausted = threading.Event()

    def items():
        yield from (1, 2, 3)
        exhausted.set()

    consumer = prefetch(items(), depth=2)
    assert next(consumer) == 1
    assert exhausted.wait(SAFETY)
    assert _closes(consumer)


def test_a_consumer_stopping_while_the_thread_waits_to_hand_over_an_error_is_not_kept_waiting():
    raised = threading.Event()

    def items():
        yield from (1, 2, 3)
        raised.set()
        raise ValueError("late")

    consumer = prefetch(items(), depth=2)
    assert next(consumer) == 1
    assert raised.wait(SAFETY)
    assert _closes(consumer)
