"""Bounded capture of a byte stream: keep the head and the tail, count the rest.

Standard library only: this file is also sent into containers as part of the
exec runner (see ``_runner.py``), so it must run on any Python >= 3.9.
"""


class HeadTail:
    """Keep the first ``limit // 2`` and the last ``limit - limit // 2`` bytes fed.

    Memory stays bounded by ``limit`` whatever the stream's size, which is the
    point: a command printing 100 MB must not cost 100 MB anywhere.
    """

    def __init__(self, limit):
        self.head_limit = max(0, limit // 2)
        self.tail_limit = max(0, limit - self.head_limit)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data):
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            extra = len(self.tail) - self.tail_limit
            if extra > 0:
                del self.tail[:extra]

    @property
    def omitted(self):
        return self.total - len(self.head) - len(self.tail)

    @property
    def truncated(self):
        return self.omitted > 0

    def render(self):
        """The kept bytes, with a one-line marker where the middle was cut."""
        if not self.truncated:
            return bytes(self.head + self.tail)
        marker = ("\n[... %d bytes of output omitted ...]\n" % self.omitted).encode()
        return bytes(self.head) + marker + bytes(self.tail)
