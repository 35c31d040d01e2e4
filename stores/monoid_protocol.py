"""The ``Monoid`` protocol: what every aggregator needs from an aggregation operation.

Its own module, which needs nothing of :mod:`stores.monoids`; :mod:`stores.monoids`
re-exports it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Monoid(Protocol):
    """What every aggregator needs from an aggregation operation (duck-typed).

    ``combine`` must be associative and ``identity`` its neutral element:
    ``combine(identity, a) == a == combine(a, identity)``. Partials should be immutable.
    """

    identity: Any

    def lift(self, x: Any) -> Any:
        """Partial aggregate of the one-input window ``[x]``."""
        ...

    def combine(self, a: Any, b: Any) -> Any:
        """Partial aggregate of window ``a`` followed by window ``b``."""
        ...

    def lower(self, a: Any) -> Any:
        """Result of the window whose partial aggregate is ``a``."""
        ...
