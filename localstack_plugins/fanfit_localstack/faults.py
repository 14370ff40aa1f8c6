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

``FANFIT_LOCAL_THROTTLE_FILE=<path>`` (test and benchmark only) names a JSON file that cuts one train
worker's CPU share from a round on (:class:`ThrottleSpec`): its execution environment's CFS quota
is lowered for that worker's invocations, as a co-tenant would take the CPU from it
(``benchmarks/straggler.py``'s interference phase).
"""

from __future__ import annotations

import json
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


# -- CPU interference ----------------------------------------------------------------------------
#: Environment variable: a JSON file that names one train worker whose CPU share is cut (test only).
THROTTLE_VARIABLE = "FANFIT_LOCAL_THROTTLE_FILE"


@dataclass(frozen=True)
class ThrottleSpec:
    """One train worker's CPU share cut from a round on: interference, as a co-tenant causes it.

    The file named by ``$FANFIT_LOCAL_THROTTLE_FILE`` holds ``{"worker": 0, "from_round": 4,
    "cpu_factor": 0.25}`` (optionally ``"job_id"``: only that job), or a list of such objects (the
    factors of those that match an invocation multiply). Every TrainShard invocation
    of that worker (its event's ``worker``) in a round ``>= from_round`` runs with its execution
    environment's CFS quota multiplied by ``cpu_factor`` (:func:`fanfit_localstack.cgroups.
    scale_cpu`); every other invocation gets the quota its ``MemorySize`` buys. The file is read
    again whenever it changes, so a benchmark can write it while the stack runs. Nothing tells the
    scheduler: it sees only the worker's measured throughput.

    Attributes
    ----------
    worker : int
        The worker index (>= 0).
    from_round : int
        The first round throttled (>= 0).
    cpu_factor : float
        Share of its normal CPU quota the worker keeps, in ``(0, 1]``.
    job_id : str
        Only this job ('' = any job).
    """

    worker: int
    from_round: int
    cpu_factor: float
    job_id: str = ""

    @classmethod
    def parse(cls, document: object) -> ThrottleSpec:
        """Check a decoded JSON document.

        Raises
        ------
        ValueError
            Not an object; an unknown or missing key; ``worker`` or ``from_round`` not an integer
            ``>= 0``; ``cpu_factor`` not in ``(0, 1]``; ``job_id`` not a string. The message names
            the key.
        """
        if not isinstance(document, dict):
            raise ValueError(f"{THROTTLE_VARIABLE}: want a JSON object, got {document!r}")
        known = {"worker", "from_round", "cpu_factor", "job_id"}
        unknown = sorted(set(document) - known)
        if unknown:
            raise ValueError(
                f"{THROTTLE_VARIABLE}: unknown key(s) {unknown}; known: {sorted(known)}"
            )
        for key in ("worker", "from_round"):
            value = document.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"{THROTTLE_VARIABLE}: {key} must be an integer >= 0, got {value!r}"
                )
        factor = document.get("cpu_factor")
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise ValueError(f"{THROTTLE_VARIABLE}: cpu_factor must be in (0, 1], got {factor!r}")
        job_id = document.get("job_id", "")
        if not isinstance(job_id, str):
            raise ValueError(f"{THROTTLE_VARIABLE}: job_id must be a string, got {job_id!r}")
        return cls(document["worker"], document["from_round"], float(factor), job_id)

    def factor(self, event: object) -> float:
        """``cpu_factor`` for a TrainShard event of the worker from ``from_round`` on, else 1.0."""
        if not isinstance(event, dict):
            return 1.0
        worker, round_index = event.get("worker"), event.get("round")
        if not isinstance(worker, int) or not isinstance(round_index, int):
            return 1.0
        if self.job_id and event.get("job_id") != self.job_id:
            return 1.0
        if worker == self.worker and round_index >= self.from_round:
            return self.cpu_factor
        return 1.0


_throttle: tuple[tuple[str, float], tuple[ThrottleSpec, ...]] | None = None
_throttle_lock = threading.Lock()


def parse_throttles(document: object) -> tuple[ThrottleSpec, ...]:
    """One :class:`ThrottleSpec` object, or a list of them (several workers, or one worker in two
    jobs); see :meth:`ThrottleSpec.parse` for what is refused."""
    items = document if isinstance(document, list) else [document]
    return tuple(ThrottleSpec.parse(item) for item in items)


def throttle() -> tuple[ThrottleSpec, ...]:
    """The specs in ``$FANFIT_LOCAL_THROTTLE_FILE`` (re-read when its mtime changes).

    Empty when the variable is unset or the file is absent. A file that does not parse is logged
    (naming the bad key) and throttles nothing.
    """
    global _throttle
    path = os.environ.get(THROTTLE_VARIABLE, "").strip()
    if not path:
        return ()
    try:
        stamp = (path, os.stat(path).st_mtime)
    except OSError:
        return ()
    with _throttle_lock:
        if _throttle is not None and _throttle[0] == stamp:
            return _throttle[1]
        specs: tuple[ThrottleSpec, ...] = ()
        try:
            with open(path, encoding="utf-8") as handle:
                specs = parse_throttles(json.load(handle))
            LOG.warning("fanfit: throttling train workers' CPU: %s", specs)
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            LOG.error("fanfit: ignoring %s=%s: %s", THROTTLE_VARIABLE, path, exc)
        _throttle = (stamp, specs)
        return specs


def throttle_factor(invocation: dict[str, object]) -> float:
    """CPU factor for one invocation (``{"payload": "<event JSON>", ...}``): the product of the
    matching specs' factors (:class:`ThrottleSpec`), 1.0 when none matches."""
    specs = throttle()
    if not specs:
        return 1.0
    raw = invocation.get("payload")
    try:
        event = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except ValueError:
        return 1.0
    factor = 1.0
    for spec in specs:
        factor *= spec.factor(event)
    return factor
