"""Kill/restart cleanup (docs/architecture.md, "actions"): the plan is a pure function of the run record and the run roots;
executing it is separate. Fixed order: stop the live run → local checkpoint folder → remote artifact
folder → the tracker's run → scheduler leftovers. Paths go through the path guard; jobs are cancelled
only when they belong to the current user."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guarded_sbatch.actions.path_guard import (
    GuardedPath,
    PathRefusedError,
    allowed_roots,
    check_deletable,
    delete_guarded,
)
from guarded_sbatch.core.errors import GuardedError, SchedulerError
from guarded_sbatch.core.redact import redact
from guarded_sbatch.records.registry import RunRecord, launch_root
from guarded_sbatch.scheduler.interface import SchedulerUnreachableError
from guarded_sbatch.actions.stop_run import stop_run
from guarded_sbatch.actions.tracker_cleanup import MLFLOW_RUN_ID, delete_mlflow_run, delete_wandb_run

STEP_TITLES = {
    "stop": "stop the live run",
    "checkpoint": "local checkpoint folder",
    "artifact": "remote artifact folder",
    "tracker": "tracker run",
    "scheduler": "scheduler leftovers",
}
_REMOTE_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^[^/\s:]+:(?!//)")  # s3://b/x, gs://..., host:/path


@dataclass(frozen=True)
class CleanupAction:
    """One thing to do within a step."""

    kind: str  # delete-path | wandb-api-delete | mlflow-sqlite | mlflow-file | cancel-jobs | manual
    target: str
    guarded: GuardedPath | None = None
    refused: str = ""  # the guard's one-line reason; the action is skipped
    extra: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.refused:
            return f"REFUSED {self.target}: {self.refused}"
        if self.kind == "delete-path" and self.guarded is not None:
            return self.guarded.describe()
        words = {
            "delete-path": f"delete {self.target}",
            "wandb-api-delete": f"delete W&B run {self.target} through the W&B API (when reachable)",
            "mlflow-sqlite": f"mark MLflow run {self.extra.get('run_id')} deleted in {self.target}",
            "mlflow-file": f"mark MLflow run {self.extra.get('run_id')} deleted in {self.target}",
            "cancel-jobs": f"cancel job(s) {self.target} if still known to the scheduler, then check they are gone",
            "stop-jobs": f"cancel job(s) {self.target} if still queued or running, and wait until they end",
            "manual": f"{self.target}: {self.extra.get('why', 'cannot be done here')}",
        }
        return words.get(self.kind, f"{self.kind} {self.target}")


@dataclass(frozen=True)
class CleanupStep:
    name: str  # a key of STEP_TITLES
    actions: tuple[CleanupAction, ...]

    @property
    def title(self) -> str:
        return STEP_TITLES[self.name]


@dataclass(frozen=True)
class CleanupPlan:
    run_id: str
    run_name: str
    backend: str
    steps: tuple[CleanupStep, ...]

    @property
    def refusals(self) -> list[CleanupAction]:
        return [action for step in self.steps for action in step.actions if action.refused]

    def render(self) -> str:
        lines = [f"cleanup plan for run {self.run_name} ({self.run_id}, backend {self.backend}), in this order:"]
        for number, step in enumerate(self.steps, start=1):
            if not step.actions:
                lines.append(f"  {number}. {step.title}: nothing recorded")
                continue
            lines.append(f"  {number}. {step.title}:")
            lines.extend(f"       - {action.describe()}" for action in step.actions)
        return "\n".join(lines)


@dataclass(frozen=True)
class ActionOutcome:
    step: str
    action: CleanupAction
    ok: bool
    detail: str


def run_job_ids(record: RunRecord) -> list[str]:
    return [job for job in (record.job_id, record.sidecar_id) if job]


def plan_cleanup(record: RunRecord, run_roots: Sequence[Path], *, homes: set[Path] | None = None,
                 source_files: Sequence[str] = ()) -> CleanupPlan:
    """The cleanup of `record`, in order, with each path already judged by the path guard. `source_files`: the
    run's own files of its metric sources (each kind says which, in sources/kinds.py), deleted with the tracker."""
    roots = allowed_roots(run_roots, launch_root(record))
    jobs = ", ".join(run_job_ids(record))

    def path_action(text: str, recorded: list[str]) -> CleanupAction:
        try:
            guarded = check_deletable(text, recorded_paths=recorded, roots=roots, base_dir=record.submit_dir or None, homes=homes)
        except PathRefusedError as exc:
            return CleanupAction("delete-path", text, refused=str(exc))
        return CleanupAction("delete-path", str(guarded.recorded), guarded=guarded)

    checkpoint = (path_action(record.checkpoint_dir, [record.checkpoint_dir]),) if record.checkpoint_dir else ()
    artifact: tuple[CleanupAction, ...] = ()
    if record.artifact_dir:
        if _REMOTE_URL.match(record.artifact_dir):
            artifact = (
                CleanupAction(
                    "manual",
                    record.artifact_dir,
                    extra={"why": "a remote URL; delete it with your storage tool (only mounted folders are deleted here)"},
                ),
            )
        else:
            artifact = (path_action(record.artifact_dir, [record.artifact_dir]),)
    tracker_actions = _tracker_actions(record, path_action)
    planned = {action.target for action in tracker_actions}
    tracker = (*tracker_actions, *(path_action(f, [f]) for f in dict.fromkeys(source_files) if f not in planned))
    return CleanupPlan(
        run_id=record.run_id,
        run_name=record.run_name,
        backend=record.backend,
        steps=(
            CleanupStep("stop", (CleanupAction("stop-jobs", jobs),) if jobs else ()),
            CleanupStep("checkpoint", checkpoint),
            CleanupStep("artifact", artifact),
            CleanupStep("tracker", tracker),
            CleanupStep("scheduler", (CleanupAction("cancel-jobs", jobs),) if jobs else ()),
        ),
    )


def wandb_run_folder(path: str) -> str | None:
    """The local W&B run folder (wandb/run-<date>-<id> or offline-run-...) a recorded W&B path names."""
    candidate = Path(path)
    if candidate.suffix == ".wandb":
        candidate = candidate.parent
    if candidate.name.startswith(("run-", "offline-run-")):
        return str(candidate)
    return None


def pinned_run_id(record: RunRecord, kind: str) -> str:
    """The run id the launch gave the job for a tracker `kind` (its pinned spec in the record's sources), or ""."""
    for spec in (record.sources or {}).get("specs") or []:
        writer = spec.get("writer") if isinstance(spec, dict) and spec.get("kind") == kind else None
        if isinstance(writer, dict) and isinstance(writer.get("run_id"), str) and writer["run_id"]:
            return str(writer["run_id"])
    return ""


def _tracker_actions(record: RunRecord, path_action: Callable[[str, list[str]], CleanupAction]) -> list[CleanupAction]:
    tracker = record.tracker or {}
    kind = str(tracker.get("kind", "")).lower()
    actions: list[CleanupAction] = []
    run_path = str(tracker.get("run_path") or "")
    # Only the W&B run the launch gave the job (WANDB_RUN_ID) is ever deleted: a log planted in a shared folder
    # may name any run the user's key can delete.
    launch_id = pinned_run_id(record, "wandb")
    if run_path and kind in ("", "wandb"):
        if not launch_id:
            actions.append(CleanupAction("manual", f"W&B run {run_path}", extra={
                "why": "the launch gave this job no W&B run id, so which run it wrote cannot be proven; "
                       "delete it on the W&B site"}))
        elif run_path.rstrip("/").rpartition("/")[2] != launch_id:
            actions.append(CleanupAction("wandb-api-delete", run_path, refused=(
                f"not the W&B run the launch gave the job ({launch_id}): refused")))
        else:
            actions.append(CleanupAction("wandb-api-delete", run_path, extra={"run_id": launch_id}))
    # The local run folder goes too: a leftover folder would re-create the run at the next `wandb sync`.
    # record.wandb_paths were given or found by the launch id; the sidecar's run_dir came from a log it read
    seen = str(tracker.get("run_dir") or "")
    local_runs = [p for p in [*record.wandb_paths, seen] if p]
    folders = []
    for recorded in local_runs:
        folder = wandb_run_folder(recorded)
        if recorded == seen and recorded not in record.wandb_paths and folder is not None and not (
                launch_id and Path(folder).name.endswith(f"-{launch_id}")):
            actions.append(CleanupAction("manual", recorded, extra={
                "why": f"not the folder of the W&B run the launch gave the job ({launch_id or 'none'}); left alone"}))
            continue
        if folder is None:
            actions.append(
                CleanupAction(
                    "manual",
                    recorded,
                    extra={"why": "not a W&B run folder (wandb/run-...); it may hold other runs, so it is left alone"},
                )
            )
        elif folder not in folders:
            folders.append(folder)
    for folder in folders:
        actions.append(path_action(folder, [folder]))
    for folder in record.tb_paths:
        actions.append(
            CleanupAction(
                "manual",
                folder,
                extra={"why": "TensorBoard folder left alone (it may hold other runs); the reader handles a restart's new files"},
            )
        )
    if kind == "mlflow" and tracker.get("run_id"):
        action = _mlflow_action(record, str(tracker.get("tracking_uri") or ""), str(tracker["run_id"]))
        actions.append(_guard_mlflow(action, path_action))
    elif kind and kind not in ("wandb", "mlflow", "tensorboard"):
        actions.append(CleanupAction("manual", f"{kind} run", extra={"why": "delete it in the tracker's own interface"}))
    return actions


def _guard_mlflow(action: CleanupAction, path_action: Callable[[str, list[str]], CleanupAction]) -> CleanupAction:
    """An MLflow deletion goes only to one exact, plain run id, in a store the path guard accepts."""
    if action.kind not in ("mlflow-sqlite", "mlflow-file"):
        return action
    run_id = action.extra.get("run_id", "")
    if not MLFLOW_RUN_ID.fullmatch(run_id):
        return CleanupAction(
            action.kind,
            action.target,
            extra=action.extra,
            refused=f"MLflow run id {run_id[:80]!r} is not a plain run id: refused",
        )
    guarded = path_action(action.target, [action.target])
    if guarded.refused:
        return CleanupAction(action.kind, action.target, extra=action.extra, refused=guarded.refused)
    return CleanupAction(action.kind, action.target, guarded=guarded.guarded, extra=action.extra)


def _mlflow_action(record: RunRecord, uri: str, run_id: str) -> CleanupAction:
    base = Path(record.submit_dir or ".")
    if not uri:
        uri = f"sqlite:///{base / 'mlflow.db'}" if (base / "mlflow.db").exists() else str(base / "mlruns")
    if uri.startswith("sqlite:///"):
        rest = uri[len("sqlite:///") :]
        path = Path("/" + rest.lstrip("/")) if rest.startswith("/") else base / rest
        return CleanupAction("mlflow-sqlite", str(path), extra={"run_id": run_id})
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if "://" in uri:
        return CleanupAction("manual", uri, extra={"why": "a remote MLflow server; delete the run with `mlflow runs delete`"})
    path = Path(uri) if Path(uri).is_absolute() else base / uri
    return CleanupAction("mlflow-file", str(path), extra={"run_id": run_id})


def execute_cleanup(
    plan: CleanupPlan,
    record: RunRecord,
    scheduler: Any,
    *,
    on_outcome: Callable[[ActionOutcome], None] | None = None,
    stop_timeout_s: float = 90.0,
    poll_s: float = 1.0,
    wandb_timeout_s: float = 20.0,
) -> list[ActionOutcome]:
    """Run the plan in order. If the live run cannot be stopped, nothing is deleted (SchedulerError)."""
    outcomes: list[ActionOutcome] = []

    def report(step: str, action: CleanupAction, ok: bool, detail: str) -> None:
        outcome = ActionOutcome(step, action, ok, redact(detail))
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    for step in plan.steps:
        for action in step.actions:
            if action.refused:
                report(step.name, action, False, f"skipped: {action.refused}")
                continue
            try:
                detail = _run_action(action, record, scheduler, stop_timeout_s, poll_s, wandb_timeout_s)
            except GuardedError as exc:
                report(step.name, action, False, str(exc))
                if step.name == "stop":
                    raise
                continue
            except OSError as exc:
                report(step.name, action, False, f"{action.target}: {exc.strerror or exc}")
                continue
            report(step.name, action, True, detail if detail is not None else f"left alone: {action.describe()}")
    return outcomes


def _run_action(action: CleanupAction, record: RunRecord, scheduler: Any, stop_timeout_s: float, poll_s: float,
                wandb_timeout_s: float) -> str | None:
    """Do one action of the plan; what it did, or None for an action only shown (manual, kept)."""
    if action.kind in ("stop-jobs", "cancel-jobs"):
        return stop_jobs(scheduler, run_job_ids(record), timeout_s=stop_timeout_s, poll_s=poll_s,
                         check_gone=action.kind == "cancel-jobs")
    if action.kind == "delete-path":
        assert action.guarded is not None
        return f"{action.target}: {delete_guarded(action.guarded)}"
    if action.kind == "wandb-api-delete":
        return delete_wandb_run(action.target, action.extra["run_id"], timeout_s=wandb_timeout_s)
    if action.kind in ("mlflow-sqlite", "mlflow-file"):
        return delete_mlflow_run(action.kind, Path(action.target), action.extra["run_id"])
    return None


def executable(plan: CleanupPlan) -> bool:
    """Anything in the plan that would change something."""
    return any(not a.refused and a.kind != "manual" for step in plan.steps for a in step.actions)


def stop_jobs(scheduler: Any, job_ids: Sequence[str], *, timeout_s: float, poll_s: float, check_gone: bool) -> str:
    """Cancel each job that is still live (only the current user's: actions.stop_run checks the owner) and wait
    until it has ended. Raises SchedulerError when a job cannot be stopped or its state cannot be told."""

    details = []
    for job_id in job_ids:
        try:
            scheduler.info(job_id)
        except SchedulerUnreachableError:
            raise
        except SchedulerError as exc:
            details.append(f"job {job_id}: not known to the scheduler any more ({exc})")
            continue
        outcome = stop_run(scheduler, job_id, confirm_timeout_s=timeout_s, poll_s=poll_s)
        if not outcome.ok:
            raise SchedulerError(f"{outcome.detail}; nothing was deleted")
        if check_gone:
            state = scheduler.state(job_id)
            if not state.is_terminal:
                raise SchedulerError(f"job {job_id} is still {state.value} after cancel; check `squeue -j {job_id}`")
            details.append(f"job {job_id}: gone ({state.value})")
        else:
            details.append(outcome.detail)
    return "; ".join(details)
