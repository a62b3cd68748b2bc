"""The one cache policy for compiled graphs: least recently used first out, bounded by bytes.

A compiled graph holds metadata and an intermediates buffer, from kilobytes (an eager op) to
hundreds of megabytes (a model): counting entries would bound nothing, so the bound is bytes.
The entry just added always stays, even when it alone is over the bound (it is about to run)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from .._sigint import uninterruptible


class ByteCache:
    """key -> entry, each with its size in bytes; `limit()` says the bound (read at every insert,
    so a changed setting applies to the next one). Evicted entries are handed to `release`."""

    def __init__(self, limit: Callable[[], int], release: Callable[[object], None] = lambda e: e.free()):
        self._entries: OrderedDict = OrderedDict()
        self._sizes: dict = {}
        self.bytes = 0
        self._limit = limit
        self._release = release

    def get(self, key: Hashable):
        """The entry (now the most recently used), or None."""
        e = self._entries.get(key)
        if e is not None:
            self._entries.move_to_end(key)
        return e

    @uninterruptible
    def put(self, key: Hashable, entry, nbytes: int) -> None:
        """Add `entry`, then evict the least recently used ones while over the bound."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= self._sizes.pop(key)
            self._release(old)
        self._entries[key] = entry
        self._sizes[key] = int(nbytes)
        self.bytes += int(nbytes)
        limit = self._limit()
        while self.bytes > limit and len(self._entries) > 1:
            k, e = self._entries.popitem(last=False)
            self.bytes -= self._sizes.pop(k)
            self._release(e)

    @uninterruptible
    def clear(self) -> None:
        entries = list(self._entries.values())
        self._entries.clear()
        self._sizes.clear()
        self.bytes = 0
        for e in entries:
            self._release(e)

    def values(self):
        return self._entries.values()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        return key in self._entries
