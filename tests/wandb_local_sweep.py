"""A local W&B sweep controller for tests: the four GraphQL operations `wandb agent` makes of a W&B server (Viewer,
SweepWithRuns, CreateAgent, Heartbeat), answered on this machine for one sweep config, its grid searched here. The
agent is W&B's own (`wandb agent --count N ENTITY/PROJECT/SWEEP` with WANDB_BASE_URL pointing here); each
heartbeat with no run of the agent's running hands it the next combination as W&B's server does (a `run` command),
and `exit` once the grid is done. Nothing else of a W&B server is here: the runs log offline (WANDB_MODE=offline)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml


@dataclass
class LocalSweep:
    entity: str
    project: str
    sweep_id: str
    config_text: str  # the sweep's YAML as `wandb sweep` would upload it
    handed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (run id, its parameters), in order
    operations: list[str] = field(default_factory=list)

    def grid(self) -> list[dict[str, Any]]:
        config = yaml.safe_load(self.config_text)
        if config.get("method") != "grid":
            raise ValueError("the local controller searches grids only")
        names, choices = [], []
        for name, spec in (config.get("parameters") or {}).items():
            names.append(name)
            choices.append(spec["values"] if "values" in spec else [spec["value"]])
        return [dict(zip(names, combination)) for combination in itertools.product(*choices)]

    def heartbeat(self, running: dict[str, Any]) -> list[dict[str, Any]]:
        if any(running.values()):
            return []
        grid = self.grid()
        if len(self.handed) >= len(grid):
            return [{"type": "exit"}]
        values = grid[len(self.handed)]
        run_id = f"{self.sweep_id}r{len(self.handed)}"
        self.handed.append((run_id, values))
        program = yaml.safe_load(self.config_text).get("program")
        return [{"type": "run", "run_id": run_id, "program": program,
                 "args": {name: {"value": value} for name, value in values.items()}}]

    def answer(self, query: str, variables: dict[str, Any]) -> dict[str, Any] | None:
        if "query Viewer" in query:
            return {"viewer": {"id": "local", "entity": self.entity, "username": self.entity, "flags": "{}",
                               "teams": {"edges": []}}}
        if "query SweepWithRuns" in query:
            if variables.get("sweep") != self.sweep_id:
                return {"project": {"sweep": None}}
            return {"project": {"sweep": {
                "id": self.sweep_id, "name": self.sweep_id, "method": "grid", "state": "RUNNING", "description": None,
                "config": self.config_text, "createdAt": "2026-01-01T00:00:00", "heartbeatAt": None,
                "updatedAt": None, "earlyStopJobRunning": False, "bestLoss": None, "controller": None,
                "scheduler": None, "runs": {"edges": []}}}}
        if "mutation CreateAgent" in query:
            return {"createAgent": {"agent": {"id": f"{self.sweep_id}-agent"}}}
        if "mutation Heartbeat" in query:
            commands = self.heartbeat(json.loads(variables.get("runState") or "{}"))
            return {"agentHeartbeat": {"agent": {"id": variables.get("id")}, "commands": json.dumps(commands)}}
        return None


def serve(sweep: LocalSweep, host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, str]:
    """Start the controller on a free port of `host` (an address of this machine the agent reaches: a Slurm job on
    the dev cluster has a network of its own, and reaches this machine at slurmctld's address); (server, its base
    URL for WANDB_BASE_URL)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data: dict[str, Any] = {}
            if self.path.startswith("/graphql"):
                request = json.loads(body or b"{}")
                query = str(request.get("query", ""))
                sweep.operations.append(" ".join(query.split()[:2]))
                found = sweep.answer(query, request.get("variables") or {})
                data = {"data": found} if found is not None else {"errors": [{"message": "not served locally"}]}
            payload = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def slurmctld_address() -> str:
    """The address slurmctld listens at (`SlurmctldHost = name(ADDRESS)`), which every node of the cluster reaches."""
    shown = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30, check=True)
    found = re.search(r"^SlurmctldHost\[0\]\s*=\s*[^(\s]+(?:\(([^)]+)\))?", shown.stdout, re.MULTILINE)
    return found.group(1) if found and found.group(1) else "127.0.0.1"
