"""Where ``watch`` events go: the terminal (text or JSON lines), a command, a webhook.

Hooks run on a background thread with a bounded queue, so a slow or dead receiver never delays the
following of the log. A hook that fails (non-zero exit, HTTP error, timeout, refused connection)
is reported through this module's logger (a warning: on stderr unless the application routes
logging elsewhere) and retried with exponential backoff (``base * 2**attempt`` seconds, up to
``attempts`` tries); it never stops the watcher.
"""
from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import partial
from typing import IO, Callable

from ..errors import raise_all
from ..recovery.severity import Severity
from .events import EventKind, WatchEvent

_log = logging.getLogger(__name__)

HOOKED = frozenset({EventKind.INCIDENT, EventKind.UPDATE, EventKind.WITHDRAWN, EventKind.STALLED})
"""Events that run ``--on-incident`` and ``--webhook``: decided incidents and a run that stopped
writing (what BLOOM's watchdog paged for), not provisional alerts."""


def render(ev: WatchEvent) -> str:
    """The event as terminal text: one headline, then the evidence and the plan for incidents."""
    stamp = time.strftime("%H:%M:%S", time.localtime(ev.time))
    head = f"[{stamp}] {ev.kind.value.upper():9} {ev.run}"
    inc = ev.incident
    if inc is None or ev.kind is EventKind.WITHDRAWN:
        return f"{head}: {ev.message}"
    sev = Severity(inc.severity).value.upper()
    lines = [f"{head}: {sev} {inc.kind.value} {inc.metric}: onset {inc.onset}, peak {inc.peak}, "
             f"end {inc.end if inc.end is not None else '-'} - {ev.message}",
             f"    {inc.evidence}"]
    if ev.plan is not None and ev.plan.action not in ("none", "watch"):  # as analyze's text shows plans
        lines.append(f"    plan: {ev.data.get('plan_text', ev.plan.action)}")
        lines.extend(f"      - {r}" for r in ev.plan.reasons)
    return "\n".join(lines)


class Printer:
    """Prints events, as text or one JSON object per line, flushing each (a pipe sees it at once).

    This is the watch verb's output (the stream the caller passes, ``sys.stdout`` in the CLI), not
    a diagnostic, so it is printed rather than logged."""

    def __init__(self, out: IO[str], *, as_json: bool) -> None:
        self.out = out
        self.as_json = as_json

    def __call__(self, ev: WatchEvent) -> None:
        text = json.dumps(ev.to_dict(), allow_nan=False) if self.as_json else render(ev)
        print(text, file=self.out, flush=True)


def slack_payload(ev: WatchEvent) -> dict:
    """A Slack-compatible incoming-webhook body: ``text`` for the channel, the rest for machines."""
    inc = ev.incident
    text = f"lossguard watch {ev.run}: {ev.kind.value} - {ev.message}"
    if inc is not None and ev.kind is not EventKind.WITHDRAWN:
        text += f"\n{inc.evidence}"
        if "plan_text" in ev.data:
            text += f"\nPlan: {ev.data['plan_text']}"
    return {"text": text, **ev.to_dict()}


@dataclass(kw_only=True)
class HookConfig:
    """How hooks are run and retried."""

    command: str | None = None
    """Shell command run per incident, with the incident's JSON on stdin."""
    webhook: str | None = None
    """URL that receives a POST of :func:`slack_payload` per incident."""
    timeout: float = 10.0
    """Seconds one try may take (command or HTTP request)."""
    attempts: int = 4
    """Tries per event before giving it up."""
    backoff: float = 0.5
    """Seconds before the first retry; doubled after each."""

    def __post_init__(self) -> None:
        problems = []
        if not self.timeout > 0:
            problems.append(f"timeout must be > 0, got {self.timeout}")
        if self.attempts < 1:
            problems.append(f"attempts must be >= 1, got {self.attempts}")
        if not self.backoff >= 0:
            problems.append(f"backoff must be >= 0, got {self.backoff}")
        if self.webhook is not None and not self.webhook.startswith(("http://", "https://")):
            problems.append(f"webhook must be an http:// or https:// URL, got {self.webhook!r}")
        raise_all(problems)


def _warn(msg: str) -> None:
    """The default hook-failure report: a warning, worded as the CLI has always shown it."""
    _log.warning("lossguard watch: %s", msg)


class HookRunner:
    """Runs the configured hooks for each event on one background thread.

    Args:
        config: the hooks and their retry policy.
        report: called with a sentence when a try fails or an event is given up (default: a
            warning on this module's logger).
    """

    def __init__(self, config: HookConfig, report: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.report = report or _warn
        self._queue: queue.Queue = queue.Queue(maxsize=1000)
        self.delivered = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._work, name="lossguard-hooks", daemon=True)
        self._thread.start()

    @property
    def active(self) -> bool:
        """True when a command or webhook is configured."""
        return bool(self.config.command or self.config.webhook)

    def __call__(self, ev: WatchEvent) -> None:
        if self.active and ev.kind in HOOKED:
            try:
                self._queue.put_nowait(ev)
            except queue.Full:
                self.report(f"hook queue full; not delivering {ev.kind.value} at step {ev.step}")

    def close(self, timeout: float = 30.0) -> None:
        """Deliver what is queued (waiting at most ``timeout`` seconds), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            ev = self._queue.get()
            if ev is None:
                return
            if self.config.command:
                self._retry("--on-incident", partial(self._run_command, self.config.command, ev), ev)
            if self.config.webhook:
                self._retry("--webhook", partial(self._post, self.config.webhook, ev), ev)

    def _retry(self, name: str, action: Callable[[], None], ev: WatchEvent) -> None:
        cfg = self.config
        for attempt in range(cfg.attempts):
            try:
                action()
                self.delivered += 1
                return
            except Exception as exc:  # noqa: BLE001 - any failure of a user's hook is reported, never fatal
                last = attempt + 1 == cfg.attempts
                wait = cfg.backoff * 2 ** attempt
                self.report(f"{name} failed for the {ev.kind.value} at step {ev.step} (try {attempt + 1}/"
                            f"{cfg.attempts}): {exc}" + ("; giving up on this event" if last else
                                                         f"; retrying in {wait:g} s"))
                if not last:
                    time.sleep(wait)
        self.failed += 1

    def _run_command(self, command: str, ev: WatchEvent) -> None:
        data = json.dumps(ev.to_dict(), allow_nan=False).encode()
        done = subprocess.run(command, shell=True, input=data, capture_output=True,
                              timeout=self.config.timeout)
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"exit {done.returncode}" + (f": {err[-1][:200]}" if err else ""))

    def _post(self, url: str, ev: WatchEvent) -> None:
        body = json.dumps(slack_payload(ev), allow_nan=False).encode()
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.config.timeout) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            raise RuntimeError(f"cannot reach the URL: {exc.reason}") from None
