"""Fault injection for the local Lambda runtime: ``FANFIT_LOCAL_FAULTS``.

``FANFIT_LOCAL_FAULTS="error=0.2,timeout=0.05,crash=0.05,seed=1"`` makes that share of invocations
fail, each in the way AWS fails them, so that a test can show that a job's retries, idempotent shard
writes and Powertools Idempotency lose nothing and count nothing twice:

- ``error``: the invocation fails with ``Lambda.ServiceException`` before the handler runs (what
  Step Functions sees when Lambda's Invoke API has a transient service error);
- ``timeout``: the invocation fails with ``Sandbox.Timedout`` and the runtime is restarted, as after a
  timeout, without waiting out the function's timeout (the handler does not run);
- ``crash``: the handler runs to the end (its writes land in S3 and DynamoDB), then the runtime
  process dies before the response is returned: ``Runtime.ExitError``. The retry finds the
  idempotency record of the completed run.

The draws come from one ``random.Random(seed)`` in the LocalStack process, in invocation order. The
shares must be in ``[0, 1]`` and sum to at most 1; an unparsable value is an error at start-up.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from dataclasses import dataclass

LOG = logging.getLogger(__name__)
VARIABLE = "FANFIT_LOCAL_FAULTS"
KINDS = ("error", "timeout", "crash")


@dataclass(frozen=True)
class FaultSpec:
    """Shares of invocations that fail, by kind, and the seed of the draws."""

    error: float = 0.0
    timeout: float = 0.0
    crash: float = 0.0
    seed: int = 0

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """Parse ``"error=0.2,timeout=0.05,crash=0.05,seed=1"`` (any subset, any order).

        Raises
        ------
        ValueError
            An unknown key, a share outside ``[0, 1]``, shares summing above 1, or a bad seed.
        """
        values: dict[str, float | int] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or key not in (*KINDS, "seed"):
                raise ValueError(
                    f"{VARIABLE}: {item!r} is not KIND=SHARE (kinds: {', '.join(KINDS)}) or seed=N"
                )
            if key == "seed":
                values[key] = int(raw)
                continue
            share = float(raw)
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"{VARIABLE}: {key}={raw} is not a share in [0, 1]")
            values[key] = share
        spec = cls(**values)  # type: ignore[arg-type]
        if spec.error + spec.timeout + spec.crash > 1.0:
            raise ValueError(f"{VARIABLE}: the shares sum to more than 1")
        return spec


class FaultInjector:
    """Draws a fault (or none) for each invocation."""

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)  # noqa: S311 - test faults, not secrets
        self._lock = threading.Lock()
        self.counts = dict.fromkeys(KINDS, 0)

    def draw(self) -> str | None:
        """``'error'``, ``'timeout'``, ``'crash'`` or None for the next invocation."""
        with self._lock:
            u = self._rng.random()
            edge = 0.0
            for kind in KINDS:
                edge += getattr(self.spec, kind)
                if u < edge:
                    self.counts[kind] += 1
                    return kind
            return None


_injector: FaultInjector | None = None
_loaded = False
_load_lock = threading.Lock()


def injector() -> FaultInjector | None:
    """The process's injector from ``$FANFIT_LOCAL_FAULTS``, or None when unset (read once)."""
    global _injector, _loaded
    with _load_lock:
        if not _loaded:
            text = os.environ.get(VARIABLE, "").strip()
            if text:
                _injector = FaultInjector(FaultSpec.parse(text))
                LOG.warning("fanfit: injecting Lambda faults: %s", _injector.spec)
            _loaded = True
        return _injector
