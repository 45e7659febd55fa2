"""The scheduler's queue: requests waiting for their prefill (a fork group as its leader, the
others its followers), the ids given out, and the records of finished requests that a branch
may start from (the last ``history`` of them).
"""

from __future__ import annotations

from collections import OrderedDict, deque

from engine.runtime.requests import Request, RequestRecord, record_of


class RequestQueue:
    def __init__(self, history: int) -> None:
        self.waiting: deque[Request] = deque()
        self.next_id = 0
        """The id the next queued request gets."""
        self._records: OrderedDict[int, RequestRecord] = OrderedDict()
        self._history = history

    def enqueue(self, request: Request) -> int:
        self.next_id += 1
        self.waiting.append(request)
        return request.id

    def enqueue_group(self, requests: list[Request]) -> list[int]:
        """Queue ``requests`` as one fork group (one prefill, the leader's); returns their ids."""
        leader = requests[0]
        ids = []
        for request in requests:
            request.id = self.next_id + len(ids)
            ids.append(request.id)
            request.group = leader.id if len(requests) > 1 else None
        leader.followers = requests[1:]
        self.next_id += len(requests) - 1
        self.enqueue(leader)
        return ids

    def requests(self) -> list[Request]:
        """Every waiting request, followers too."""
        return [r for w in self.waiting for r in (w, *w.followers)]

    def cancel(self, request: Request) -> Request | None:
        """A waiting request leaves; its first follower (if any) takes over its prefill.
        Returns the request itself when it had none (its prefilled cache may be kept)."""
        leader = next((w for w in self.waiting if request in w.followers), None)
        if leader is not None:
            leader.followers.remove(request)
            return None
        index = self.waiting.index(request)
        if not request.followers:
            del self.waiting[index]
            return request
        heir, *rest = request.followers
        heir.caches, heir.prefilled, heir.fed = request.caches, request.prefilled, request.fed
        heir.reused = request.prefilled  # the cancelled request already reported those tokens
        heir.followers, request.followers, request.caches = rest, [], None
        self.waiting[index] = heir
        return None

    def remember(self, request: Request) -> None:
        """Keep a finished request's record (the oldest goes past ``history``)."""
        self._records[request.id] = record_of(request)
        while len(self._records) > self._history:
            self._records.popitem(last=False)

    def record(self, request_id: int) -> RequestRecord | None:
        return self._records.get(request_id)
