"""The account of a ``flip-loss`` run: how many pairs it found, evaluated and did not evaluate (and
why), how many are over each gate, and the gate's verdict, counted in one place (:func:`account_of`)
and said in one set of words (:meth:`Account.counts_text`, :meth:`Account.verdict_text`), which the
terminal and the HTML report both print. The CSV file says the same per row: Status ``evaluated``
or ``not evaluated: <reason>``, Gate ``pass``, ``fail`` or ``skipped``.

The words: a *pair* is a row of the CSV file and of the report, a reference and a test image of
the same name, or (folder mode) an image whose partner is missing. A pair is *evaluated* or *not
evaluated*, the latter either *with an error* (an unreadable image, a size mismatch, an ambiguous
name, an output it cannot write) or *without a partner*. An evaluated pair is *over the gate* when
any of its pooled values is above its ``--fail-above`` threshold. "Failed" is only ever the gate's
verdict on the run."""

from typing import NamedTuple, Optional, Sequence, Tuple

__all__ = ["Outcome", "Account", "account_of"]

Gate = Tuple[Tuple[str, float], ...]  # (quantity, threshold) of each --fail-above


class Outcome(NamedTuple):
    """What became of one pair."""

    evaluated: bool
    unmatched: bool = False  # not evaluated: an image without a partner of the same name
    over: Tuple[str, ...] = ()  # evaluated: the gate quantities whose threshold it exceeds


class Account(NamedTuple):
    """The counts of a run (see the module docstring for the words)."""

    pairs: int
    evaluated: int
    with_error: int  # not evaluated: an error
    unmatched: int  # not evaluated: without a partner
    over: int  # evaluated pairs over any threshold of the gate
    over_each: Tuple[Tuple[str, float, int], ...]  # (quantity, threshold, pairs over it) per gate
    gate: Optional[Gate]
    unmatched_fail: bool  # an image without a partner fails the gate (no --allow-unmatched)

    @property
    def not_evaluated(self) -> int:
        return self.with_error + self.unmatched

    @property
    def passed(self) -> Optional[bool]:
        """The gate's verdict: True (pass), False (fail), or None without a gate."""
        if self.gate is None:
            return None
        return self.over == 0 and self.with_error == 0 and not (self.unmatched and self.unmatched_fail)

    def _not_evaluated_text(self) -> str:
        reasons = [
            f"{n} {why}" for n, why in ((self.with_error, "with an error"), (self.unmatched, "without a partner")) if n
        ]
        return f"{self.not_evaluated} not evaluated ({', '.join(reasons)})"

    def counts_text(self) -> str:
        """The counts in words, e.g. "20 pair(s) found: 17 evaluated, 3 not evaluated (1 with an
        error, 2 without a partner); 4 over the gate (4 with the mean above 0.03)"."""
        text = f"{self.pairs} pair(s) found: {self.evaluated} evaluated"
        if self.not_evaluated:
            text += ", " + self._not_evaluated_text()
        if self.gate is not None:
            each = ", ".join(f"{n} with the {_quantity_words(q)} above {t:g}" for q, t, n in self.over_each)
            text += f"; {self.over} over the gate ({each})"
        return text

    def verdict_text(self) -> Optional[str]:
        """The gate's verdict in words, e.g. "gate: PASS (17 evaluated, 0 over the gate)" or
        "gate: FAIL (17 evaluated, 4 over the gate, 3 not evaluated)"; None without a gate."""
        if self.gate is None:
            return None
        parts = [f"{self.evaluated} evaluated", f"{self.over} over the gate"]
        if self.not_evaluated:
            allowed = self.with_error == 0 and not self.unmatched_fail
            parts.append(
                f"{self.unmatched} without a partner allowed" if allowed else f"{self.not_evaluated} not evaluated"
            )
        return f"gate: {'PASS' if self.passed else 'FAIL'} ({', '.join(parts)})"


def _quantity_words(quantity: str) -> str:
    return quantity.replace("-", " ")


def account_of(outcomes: Sequence[Outcome], gate: Optional[Gate], unmatched_fail: bool) -> Account:
    """The account of a run whose pairs came to ``outcomes`` under ``gate``."""
    evaluated = [o for o in outcomes if o.evaluated]
    unmatched = sum(o.unmatched for o in outcomes if not o.evaluated)
    over_each = tuple((q, t, sum(q in o.over for o in evaluated)) for q, t in gate or ())
    return Account(
        len(outcomes),
        len(evaluated),
        len(outcomes) - len(evaluated) - unmatched,
        unmatched,
        sum(bool(o.over) for o in evaluated),
        over_each,
        gate,
        unmatched_fail,
    )
