"""What every mode of the sandbox shares: its store, its live configuration and scripts, its
fault RNG, and the operations in progress. The HTTP server (testbed.sandbox.http) serves it, and
the asynchronous modes (testbed.sandbox.async_, testbed.sandbox.queue) report through it."""

from __future__ import annotations

import contextlib
import random
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from testbed.sandbox.core import (
    HOSTILE_IN_TURN,
    HOSTILE_KINDS,
    FaultPlan,
    SandboxConfig,
    parse_script,
    plan_for_action,
)
from testbed.sandbox.store import SandboxStore


class SandboxState:
    """The sandbox's store, live config, scripts and fault RNG.

    Config, scripts and the RNG are shared by the request threads and guarded by one lock.
    """

    def __init__(
        self,
        db_path: Path,
        *,
        config: SandboxConfig | None = None,
        seed: int = 0,
        reset: bool = False,
    ) -> None:
        self.store = SandboxStore(db_path)
        self.initial_config = config or SandboxConfig()
        self.seed = seed
        self._config = self.initial_config
        self._scripts: dict[str, deque[str]] = {}
        self._rng = random.Random(seed)
        self._hostile_turn = 0
        self._lock = threading.Lock()
        self._in_progress: dict[str, int] = {}
        #: Requests being processed now, and the most at once, per path.
        self._concurrent: dict[str, int] = {}
        self.max_concurrent: dict[str, int] = {}
        #: The same per account (a request whose input names an `account`), over every path: what a
        #: workflow's concurrency key on `input.account` must hold.
        self._concurrent_by_account: dict[str, int] = {}
        self.max_concurrent_by_account: dict[str, int] = {}
        #: The same per path and account: what a step's concurrency key on `input.account` must
        #: hold, counting only that step's path.
        self._concurrent_by_route_account: dict[tuple[str, str], int] = {}
        self.max_concurrent_by_route_account: dict[str, dict[str, int]] = {}
        self.store.initialise(wipe=reset)

    @property
    def config(self) -> SandboxConfig:
        return self._config

    @contextlib.contextmanager
    def in_progress(self, key: str) -> Iterator[None]:
        """Mark `key` as being processed (status queries answer 409 meanwhile)."""
        with self._lock:
            self._in_progress[key] = self._in_progress.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._in_progress[key] -= 1
                if not self._in_progress[key]:
                    del self._in_progress[key]

    @contextlib.contextmanager
    def concurrent(self, path: str, *, account: str | None = None) -> Iterator[None]:
        """Count the requests to `path` being processed at once (GET /stats: max_concurrent), those
        of `account` (max_concurrent_by_account), and those of `account` to `path`
        (max_concurrent_by_route_account)."""
        with self._lock:
            self._concurrent[path] = self._concurrent.get(path, 0) + 1
            self.max_concurrent[path] = max(self.max_concurrent.get(path, 0), self._concurrent[path])
            if account is not None:
                now = self._concurrent_by_account.get(account, 0) + 1
                self._concurrent_by_account[account] = now
                self.max_concurrent_by_account[account] = max(
                    self.max_concurrent_by_account.get(account, 0), now
                )
                on_route = self._concurrent_by_route_account.get((path, account), 0) + 1
                self._concurrent_by_route_account[(path, account)] = on_route
                route = self.max_concurrent_by_route_account.setdefault(path, {})
                route[account] = max(route.get(account, 0), on_route)
        try:
            yield
        finally:
            with self._lock:
                self._concurrent[path] -= 1
                if account is not None:
                    self._concurrent_by_account[account] -= 1
                    self._concurrent_by_route_account[(path, account)] -= 1

    def is_in_progress(self, key: str) -> bool:
        with self._lock:
            return key in self._in_progress

    def config_snapshot(self) -> dict[str, Any]:
        """The full live config, including what remains of each script."""
        with self._lock:
            return {**self._config.to_dict(), "script": {p: list(q) for p, q in self._scripts.items()}}

    def configure(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge `patch` into the live config; `script` replaces the scripts of the paths it names.

        All or nothing: raises ConfigError and changes nothing if any part is invalid.
        """
        settings = dict(patch)
        scripts = parse_script(settings.pop("script")) if "script" in settings else {}
        with self._lock:
            self._config = self._config.merged(settings)
            for path, actions in scripts.items():
                self._scripts[path] = deque(actions)
        return self.config_snapshot()

    def reset(self, *, config: bool = False) -> None:
        """Forget all stored requests, effects, deliveries, counters and scripts; reseed the RNG so a
        run after a reset is as reproducible as one after a start. With `config`, also return to
        the configuration the server started with."""
        with self._lock:
            self._scripts.clear()
            self._rng.seed(self.seed)
            self.max_concurrent.clear()
            self.max_concurrent_by_account.clear()
            self.max_concurrent_by_route_account.clear()
            if config:
                self._config = self.initial_config
        self.store.wipe()

    def next_hostile_kind(self) -> str:
        """The hostile kinds in turn (HOSTILE_KINDS), so that a short run meets every one."""
        with self._lock:
            kind = HOSTILE_KINDS[self._hostile_turn % len(HOSTILE_KINDS)]
            self._hostile_turn += 1
        return kind

    def plan_faults(self, path: str) -> tuple[FaultPlan, SandboxConfig]:
        """Decide what happens to one POST to `path`: its script's next action if any, else the
        rates. Returns the config it was decided under, for processing to use the same one."""
        with self._lock:
            config = self._config
            script = self._scripts.get(path)
            if script:
                return plan_for_action(script.popleft(), config), config
            if config.error_rate and self._rng.random() < config.error_rate:
                return FaultPlan(error=True), config
            slow = config.latency_ms > 0 and self._rng.random() < config.latency_rate
            drop = config.drop_rate > 0 and self._rng.random() < config.drop_rate
            hostile = ""
            if not drop and config.hostile_rate and self._rng.random() < config.hostile_rate:
                # Which kind is chosen when the answer is sent (`next_hostile_kind`): only a
                # success is answered in a hostile way, and a turn taken by a refusal or a queue
                # reply made a short run miss a kind.
                hostile = HOSTILE_IN_TURN
        return (
            FaultPlan(
                delay_ms=config.latency_ms if slow else 0,
                drop=drop,
                hold_ms=config.drop_hold_ms,
                hostile=hostile,
            ),
            config,
        )
