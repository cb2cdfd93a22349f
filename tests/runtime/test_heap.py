"""freeze_heap: start-up's garbage is collected, what lives is frozen out of the collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from cpn.runtime.loop import freeze_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process's heap goes back to the collector


def test_cyclic_garbage_is_collected_before_the_living_heap_is_frozen(unfrozen: None) -> None:
    """Two objects that only reference each other are garbage when it runs: collected (not
    kept forever in the frozen generation); an object still referenced is frozen: the
    collector no longer counts it in any generation. The count is read again later, and
    threads left by other tests may free frozen objects meanwhile (reference counting still
    frees them): it never grows without another freeze, so it is at most what was returned."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    alive = _Node()
    frozen = freeze_heap()
    assert gone() is None
    assert 0 < gc.get_freeze_count() <= frozen
    assert not any(o is alive for o in gc.get_objects())  # outside every generation
    assert alive.other is None
