"""Which target takes the next attempt: least outstanding requests among the healthy ones, ties broken
round-robin; when every candidate is out of service, the one whose cooldown ends first."""

from gateway.upstream.target import TargetState


class Balancer:
    def __init__(self, states: list[TargetState]):
        assert states, "a pool needs at least one target"
        self.states = states
        self._next = 0  # round-robin cursor: where the search for a tie starts

    def pick(self, now: float, tried: set[int]) -> int:
        """The index of the target for the next attempt. A request's retry goes to a target it has not
        tried yet when there is one, otherwise back to those it tried."""
        candidates = [i for i in range(len(self.states)) if i not in tried] or list(range(len(self.states)))
        healthy = [i for i in candidates if self.states[i].healthy(now)]
        if not healthy:
            # Trying the soonest to recover beats failing without trying: it may be back already.
            return min(candidates, key=lambda i: self.states[i].down_until)
        least = min(self.states[i].outstanding for i in healthy)
        n = len(self.states)
        for k in range(n):
            i = (self._next + k) % n
            if i in healthy and self.states[i].outstanding == least:
                self._next = i + 1
                return i
        raise AssertionError("unreachable: a healthy candidate has the least outstanding count")
