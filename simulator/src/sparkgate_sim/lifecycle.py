"""The engine's lifecycle states and the exceptions that cross layers when they change.

Kept apart from engine.py so that startup.py and http_app.py can raise and catch them without importing
the engine (startup.py used to import engine.py while engine.py imported startup.py late: a cycle).
"""

from __future__ import annotations

STARTING, READY = "starting", "ready"


class NotReady(Exception):
    """The engine is (re)starting: the HTTP layer answers 503."""


class Restarted(Exception):
    """A simulated restart happened mid-request: the connection is dropped, as a dying engine would."""
