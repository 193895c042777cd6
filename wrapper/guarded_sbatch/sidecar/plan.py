"""What a watcher of one run is told (`WatchPlan`), built in one place from the run's record (`plan_of`).

Every watcher is this one: the per-job sidecar (a watcher of one run), the per-user monitor and an array's watcher
(a watcher of N runs, sidecar/shared_monitor.py), `monitor` (cli/monitor.py writes its command line into a record
first) and `show`'s judgement now. Each learns the run's sources, writer identity, thresholds, cadence, stop
command, notes and alerts from the record alone; the sidecar job's command line names the record's folder and
nothing else. What a launch writes there (records/registry.py `RunRecord.watch`):

- `sidecar`: the config's `[sidecar]` settings at launch (core/config.py `SidecarJobSettings`, as `asdict`), read
  back by `recorded_sidecar`, which checks each as the schema says (the one declaration, with its default);
- `stop_command`, `notes`: the launch's --guard-stop-command and notes file;
- `alerts`: `{"on": [events], "wait_long_s": s}`; where alerts go (URLs: secrets, never written to a file) and the
  admins' audit trail are the site's, from the config at watch time (`site`);
- a `monitor` watch also: `named` (sources named outright, `SourceSpec` JSON), `search_dirs`, `log_commands`,
  `log_command_timeout_s`, `stop_target`, `stop_grace_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.actions.notify import NotifySettings
from guarded_sbatch.core.config import SidecarJobSettings, recorded_sidecar
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.table import recorded_policy
from guarded_sbatch.records.audit import AuditLog
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, flagged_specs

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.records.registry import RunRecord

STATE_FILE = "sidecar-state.json"


@dataclass(frozen=True)
class WatchPlan:
    """What one watch loop (sidecar/loop.py) is told: the run, its sources, its cadence, where it writes."""

    run_name: str
    job_id: str | None
    state_file: Path
    evidence_dir: Path
    notes_path: Path | None = None
    stop_command: str | None = None
    sources: list[SourceSpec] = field(default_factory=list)  # named outright (flags): read whatever else is found
    search_dirs: list[Path] = field(default_factory=list)
    sidecar: SidecarJobSettings = SidecarJobSettings()  # the cadence, as the config declares it
    policy: JudgePolicy | None = None
    identity: RunSources | None = None  # a guarded run's own sources, from its record: read only these
    log_commands: list[str] = field(default_factory=list)  # commands whose stdout is the recent log
    log_command_timeout_s: float = 30.0
    stop_target: str | None = None  # tmux:SESSION | pid:PID | ssh:HOST[:PORT]:PID (actions/stop_targets.py)
    stop_grace_s: float = 30.0
    notify: NotifySettings | None = None  # alerts on stop / wait_long / crash (actions/notify.py)
    audit: AuditLog | None = None  # the site's audit trail: a STOP is recorded there
    startup_grace_s: float = 300.0  # no metrics yet this soon after the start is normal, not "unreachable"
    startup_poll_s: float = 10.0  # how often to look for the first metrics during the grace
    # a watcher of a guarded run that is not its sidecar (`monitor --job`): the run's own state, where its STOP is
    # saved too (sidecar/state.share_stop), and how that STOP names this watcher
    run_state_file: Path | None = None
    watcher: str = ""


def plan_of(record: RunRecord, folder: Path, *, site: Config | None = None) -> WatchPlan:
    """The one builder: the plan of a watch of `record`, keeping its state and evidence in `folder` (the run's own
    folder; a `monitor` watch's in the user's state folder). `site`: the config whose alert URLs and audit trail
    apply (None: no alerts, no audit)."""
    watch = record.watch if isinstance(record.watch, dict) else {}
    named = [spec for spec in map(SourceSpec.from_json, _list(watch.get("named"))) if spec is not None]
    stop_grace = _number(watch.get("stop_grace_s"))
    timeout = _number(watch.get("log_command_timeout_s"))
    return WatchPlan(
        run_name=record.run_name, job_id=record.job_id or None, state_file=folder / STATE_FILE,
        evidence_dir=folder / "evidence", notes_path=Path(watch["notes"]) if _text(watch.get("notes")) else None,
        stop_command=_text(watch.get("stop_command")) or None,
        sources=[*named, *flagged_specs(record)],
        search_dirs=[Path(p) for p in _list(watch.get("search_dirs")) if isinstance(p, str)],
        sidecar=recorded_sidecar(_table(watch.get("sidecar"))),
        policy=recorded_policy(record.judge, record.run_name), identity=RunSources.from_json(record.sources),
        log_commands=[c for c in _list(watch.get("log_commands")) if isinstance(c, str)],
        stop_target=_text(watch.get("stop_target")) or None,
        notify=_notify(watch.get("alerts"), site), audit=AuditLog.from_config(site) if site is not None else None,
        stop_grace_s=stop_grace or WatchPlan.stop_grace_s, log_command_timeout_s=timeout or WatchPlan.log_command_timeout_s,
    )


def _notify(alerts: object, site: Config | None) -> NotifySettings | None:
    if site is None:
        return None
    recorded = alerts if isinstance(alerts, dict) else {}
    on = [event for event in _list(recorded.get("on")) if isinstance(event, str)] if "on" in recorded else site.notify_on
    wait_long = _number(recorded.get("wait_long_s")) or site.notify_wait_long_s
    return NotifySettings(urls=site.notify_urls, on=frozenset(on), wait_long_s=wait_long)


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _number(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None  # type: ignore[arg-type]
