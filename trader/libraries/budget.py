"""A learner's budget: the same env steps, or the same wall-clock, for every learner."""

from __future__ import annotations

from dataclasses import dataclass

from trader.errors import ConfigError


@dataclass(frozen=True)
class Budget:
    """Exactly one of ``steps`` (env transitions) and ``seconds`` (wall-clock of training).

    The wall-clock includes the validation passes, as `trader.train`'s time budget does.
    """

    steps: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.seconds is None):
            raise ConfigError("a budget is either steps or seconds, not both or neither")
        if self.steps is not None and self.steps <= 0:
            raise ConfigError(f"budget steps must be > 0, got {self.steps}")
        if self.seconds is not None and not self.seconds > 0:
            raise ConfigError(f"budget seconds must be > 0, got {self.seconds}")

    @property
    def terms(self) -> str:
        """How learners are compared: "equal env steps" or "equal wall-clock"."""
        return "equal env steps" if self.steps is not None else "equal wall-clock"

    def __str__(self) -> str:
        """The budget for people: "equal env steps: 100,000 steps", "equal wall-clock: 180 s"."""
        if self.steps is not None:
            return f"{self.terms}: {self.steps:,} steps"
        shown = f"{self.seconds:,.0f}" if self.seconds >= 10 else f"{self.seconds:.2g}"
        return f"{self.terms}: {shown} s"

    def split(self, parts: int) -> Budget:
        """This budget shared equally by `parts` learners (FinRL's windows x learners)."""
        if self.steps is not None:
            return Budget(steps=max(1, self.steps // parts))
        return Budget(seconds=self.seconds / parts)

    def as_dict(self) -> dict[str, object]:
        return {"terms": self.terms, "steps": self.steps, "seconds": self.seconds}
