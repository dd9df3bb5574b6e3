"""A fake clock for tests of timed code: exact readings, whatever the load on the machine."""


class TickClock:
    """Each read advances `step` seconds (0.05 s or more: Timer makes each call a run of its own)."""

    def __init__(self, step: float = 1.0):
        if not (isinstance(step, (int, float)) and step > 0):
            raise ValueError(f"TickClock needs a step > 0 seconds, got {step!r}")
        self.step, self.now, self.reads = float(step), 0.0, 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now
