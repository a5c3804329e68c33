"""What both daemons need alike: sd_notify, stop signals and logging.

sd_notify is the whole protocol in a few lines (a datagram to $NOTIFY_SOCKET;
a leading "@" is the abstract namespace), so no extra package. Outside
systemd every notify call is a harmless no-op that returns False.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading


def notify(state: str) -> bool:
    """Send one sd_notify state line, e.g. "READY=1". True if delivered."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
    except OSError:
        return False
    return True


def ready(status: str = "") -> bool:
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""))


def watchdog() -> bool:
    return notify("WATCHDOG=1")


def stopping() -> bool:
    return notify("STOPPING=1")


def status(text: str) -> bool:
    return notify(f"STATUS={text}")


def watchdog_interval_s() -> float | None:
    """Half the WatchdogSec systemd set for this process (ping at least that
    often), or None when no watchdog applies to us."""
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set `stop` so the daemon winds down in its own loop."""
    def handler(signum, _frame):
        logging.getLogger(__name__).info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)


def setup_logging(level: str = "info") -> None:
    """Log lines to stderr; under journald (JOURNAL_STREAM set) without our
    own timestamp, since the journal adds one."""
    stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s "
    logging.basicConfig(stream=sys.stderr, level=level.upper(), force=True,
                        format=stamp + "%(levelname)s %(name)s: %(message)s")
