"""Scoreboards: compare what the DUT produced with what the golden model expects.

Both fail at the first mismatch, naming the transaction and both values, and :meth:`finish` fails
if anything expected never arrived. Comparison is exact (``==``) unless ``compare`` is given; a
custom ``compare`` must still be exact for bit-exact contracts (compare raw bits, not floats).
"""

from collections import deque

__all__ = ["InOrderScoreboard", "OutOfOrderScoreboard", "ScoreboardError"]


class ScoreboardError(AssertionError):
    """The DUT's output disagreed with the expectation."""


def _fmt(value, formatter):
    return formatter(value) if formatter is not None else repr(value)


class InOrderScoreboard:
    """Expected items must arrive in exactly the order they were expected."""

    def __init__(self, name, *, compare=None, formatter=None):
        self.name = name
        self.compare = compare or (lambda got, want: got == want)
        self.formatter = formatter
        self.expected = deque()
        self.matched = 0

    def expect(self, item):
        self.expected.append(item)

    def got(self, item):
        if not self.expected:
            raise ScoreboardError(f"{self.name}: unexpected item #{self.matched}: "
                                  f"{_fmt(item, self.formatter)}")
        want = self.expected.popleft()
        if not self.compare(item, want):
            raise ScoreboardError(f"{self.name}: item #{self.matched} mismatch: got "
                                  f"{_fmt(item, self.formatter)}, expected {_fmt(want, self.formatter)}")
        self.matched += 1

    @property
    def pending(self):
        return len(self.expected)

    def finish(self):
        """Fail unless every expected item arrived; returns the number matched."""
        if self.expected:
            raise ScoreboardError(f"{self.name}: {len(self.expected)} expected item(s) never arrived; "
                                  f"first: {_fmt(self.expected[0], self.formatter)}")
        return self.matched


class OutOfOrderScoreboard:
    """Items are matched by key; each key's items arrive in order, keys may interleave freely.

    Use it where the DUT may legally reorder across flows (e.g. packets from different sources) but
    must keep order within one flow: the key is the flow.
    """

    def __init__(self, name, *, compare=None, formatter=None):
        self.name = name
        self.compare = compare or (lambda got, want: got == want)
        self.formatter = formatter
        self.expected = {}
        self.matched = 0

    def expect(self, key, item):
        self.expected.setdefault(key, deque()).append(item)

    def got(self, key, item):
        queue = self.expected.get(key)
        if not queue:
            raise ScoreboardError(f"{self.name}: unexpected item for {key!r}: {_fmt(item, self.formatter)}")
        want = queue.popleft()
        if not self.compare(item, want):
            raise ScoreboardError(f"{self.name}: mismatch for {key!r}: got {_fmt(item, self.formatter)}, "
                                  f"expected {_fmt(want, self.formatter)}")
        if not queue:
            del self.expected[key]
        self.matched += 1

    @property
    def pending(self):
        return sum(len(q) for q in self.expected.values())

    def finish(self):
        if self.expected:
            key, queue = next(iter(self.expected.items()))
            raise ScoreboardError(f"{self.name}: {self.pending} expected item(s) never arrived; first: "
                                  f"{key!r}: {_fmt(queue[0], self.formatter)}")
        return self.matched
