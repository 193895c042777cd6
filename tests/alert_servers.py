"""Real servers for alert tests: an SMTP server (aiosmtpd, with AUTH) and an HTTP webhook receiver."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def _reachable_host() -> str:
    """An address of this machine that jobs reach too: on the multi-node dev Slurm a sidecar runs in a node's
    own network namespace, whose 127.0.0.1 is not ours; slurmctld's address (`SlurmctldHost=name(addr)`) is."""
    try:
        config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "127.0.0.1"
    found = re.search(r"^SlurmctldHost\[0\]\s*=\s*\S+\((\d+\.\d+\.\d+\.\d+)\)", config, flags=re.MULTILINE)
    return found.group(1) if found else "127.0.0.1"


HOST = _reachable_host()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class MailServer:
    user: str
    password: str
    port: int = 0
    messages: list[Message] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    controller: Any = None

    def start(self) -> "MailServer":
        server = self

        class Handler:
            async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
                server.messages.append(message_from_bytes(envelope.content))
                return "250 OK"

        def authenticate(_server: Any, _session: Any, _envelope: Any, _mechanism: str, data: Any) -> AuthResult:
            ok = isinstance(data, LoginPassword) and data.login.decode() == self.user \
                and data.password.decode() == self.password
            if ok:
                self.logins.append(self.user)
            return AuthResult(success=ok)

        self.port = free_port()
        self.controller = Controller(Handler(), hostname=HOST, port=self.port, authenticator=authenticate,
                                     auth_require_tls=False)
        self.controller.start()
        return self

    def url(self) -> str:
        return (f"mailto://{self.user}:{self.password}@{HOST}:{self.port}?smtp={HOST}&mode=insecure"
                "&from=guard@example.org&to=alice@example.org")

    def stop(self) -> None:
        self.controller.stop()


@dataclass
class WebhookServer:
    requests: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> "WebhookServer":
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = None
                received.append({"path": self.path, "auth": self.headers.get("Authorization"), "json": payload})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
