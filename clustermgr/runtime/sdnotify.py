"""systemd's notify protocol: one datagram to $NOTIFY_SOCKET (a path or an @abstract name)."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def ready(status: str) -> bool:
    return notify(f"READY=1\nSTATUS={status}")


def status(line: str) -> bool:
    return notify(f"STATUS={line}")


def watchdog() -> bool:
    return notify("WATCHDOG=1")


def stopping() -> bool:
    return notify("STOPPING=1")
