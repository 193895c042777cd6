"""Alerts with real servers: a real local-backend run diverges, its sidecar stops it and the STOP message
reaches an SMTP server (with the plot attached) and an HTTP webhook; the URLs' passwords appear in no
file the product writes; an unreachable service does not hold up the STOP."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from alert_servers import HOST, MailServer, WebhookServer, free_port
from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.actions.notify import Alert, NotifySettings, send_alert
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.scheduler.slurm import SlurmScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"
MAIL_PASSWORD = "Mail-Pw-7c1e9a"
HOOK_PASSWORD = "Hook-Pw-52d0b3"


def _files_containing(root: Path, needles: list[str], skip: set[Path]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or path in skip:
            continue
        data = path.read_bytes()
        found.extend(f"{path}: {needle}" for needle in needles if needle.encode() in data)
    return found


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_stop_alert_reaches_mail_and_webhook_and_no_url_is_written(tmp_path: Path, backend: str,
                                                                    request: pytest.FixtureRequest) -> None:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    mail = MailServer("guard", MAIL_PASSWORD).start()
    hook = WebhookServer().start()
    try:
        project = make_project(tmp_path, evidence_plot=True)  # the alert carries the plot
        config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
        urls = [mail.url(), f"json://alerts:{HOOK_PASSWORD}@{HOST}:{hook.port}/hook",
                f"json://{HOST}:{free_port()}/nobody-listens"]
        config.write_text(config.read_text() + f"\n[notify]\nurls = {json.dumps(urls)}\non = [\"stop\"]\n")
        result = project.cli("--guard-backend", backend, "--guard-tb", TB, "train.sh", "--steps", "3000",
                             "--diverge-at", "60")
        assert result.returncode == 0, result.stderr
        job_id = submitted_job_id(result.stdout)
        record = project.run_record(job_id)
        scheduler = LocalScheduler(project.state_dir / "local-jobs") if backend == "local" else \
            SlurmScheduler(state_dir=tmp_path / "slurm-cache")
        assert wait_for(lambda: (s := scheduler.state(job_id)).is_terminal and s, 150) is JobState.CANCELLED
        wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 90, what="sidecar to exit")
        output = project.sidecar_output(job_id)
        assert "FINAL_SUMMARY" in output and "- Decision: STOP" in output
        assert "- Alert: sent to 2 of 3 service(s) (mailto, json); failed: json" in output, output
        assert "alerts: 3 service(s) (mailto, json, json) on stop" in output

        assert mail.logins == ["guard"] and len(mail.messages) == 1
        message = mail.messages[0]
        assert "STOPPED" in message["Subject"] and record["run_name"] in message["Subject"]
        parts = list(message.walk())
        text = next(p for p in parts if p.get_content_type() == "text/plain").get_payload(decode=True).decode()
        assert f"Job: {job_id}" in text and "Decision: STOP" in text and "evidence.json" in text
        assert "Key values: step" in text
        png = [p for p in parts if p.get_filename() == "metrics.png"]
        assert png and png[0].get_payload(decode=True)[:8] == b"\x89PNG\r\n\x1a\n"

        assert len(hook.requests) == 1
        posted = hook.requests[0]
        assert posted["path"] == "/hook"
        assert base64.b64decode(posted["auth"].split()[1]).decode() == f"alerts:{HOOK_PASSWORD}"
        assert "STOPPED" in posted["json"]["title"] and "Decision: STOP" in posted["json"]["message"]

        secrets = [MAIL_PASSWORD, HOOK_PASSWORD, "nobody-listens"]
        leaks = _files_containing(tmp_path, secrets, skip={config}) + [
            f"stdout/stderr: {s}" for s in secrets if s in result.stdout + result.stderr]
        assert leaks == []
    finally:
        mail.stop()
        hook.stop()


def test_a_failing_or_hanging_service_returns_in_time_and_never_raises(tmp_path: Path) -> None:
    import socket

    listener = socket.socket()  # accepts connections, never answers: a hung service
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    try:
        settings = NotifySettings(urls=(f"json://u:{HOOK_PASSWORD}@127.0.0.1:{listener.getsockname()[1]}/x?rto=60",
                                        "not a url at all"), timeout_s=3)
        outcome = send_alert(settings, Alert("stop", "run-a", "12", "STOP", "divergence", "loss exploded"))
        assert outcome.sent == 0 and outcome.failed == 2
        assert HOOK_PASSWORD not in outcome.detail and "not confirmed within 3 s" in outcome.detail
        assert HOOK_PASSWORD not in repr(settings)
    finally:
        listener.close()


def test_events_not_chosen_are_not_sent() -> None:
    settings = NotifySettings(urls=("json://127.0.0.1:9/x",), on=frozenset({"crash"}))
    assert send_alert(settings, Alert("stop", "r", "1", "STOP", "divergence", "m")).detail == \
        "not configured for this event"


def test_a_crashed_job_is_alerted_once(tmp_path: Path) -> None:
    hook = WebhookServer().start()
    try:
        project = make_project(tmp_path, fast_interval=1.0)
        config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
        config.write_text(config.read_text() + f'\n[notify]\nurls = ["json://{HOST}:{hook.port}/crash"]\n')
        (project.root / "crash.sh").write_text(
            "#!/bin/bash\n#SBATCH --job-name=synthetic-tanh-mlp-bs64-lr5e-2\n"
            "python train.py --config configs/synthetic-tanh-mlp.yaml --steps 40 \"$@\"\nexit 7\n")
        result = project.cli("--guard-backend", "local", "--guard-tb", TB, "crash.sh")
        assert result.returncode == 0, result.stderr
        job_id = submitted_job_id(result.stdout)
        record = project.run_record(job_id)
        scheduler = LocalScheduler(project.state_dir / "local-jobs")
        wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 120, what="sidecar to exit")
        assert scheduler.state(job_id) is JobState.FAILED
        assert [r["path"] for r in hook.requests] == ["/crash"]
        posted = hook.requests[0]["json"]
        assert "training job ended badly" in posted["title"] and "ended FAILED" in posted["message"]
        assert "sidecar: alert (crash): sent to 1 of 1 service(s) (json)" in project.sidecar_output(job_id)
    finally:
        hook.stop()


def test_a_long_wait_is_alerted_once(tmp_path: Path) -> None:
    import io

    from guarded_sbatch.sidecar.loop import Sidecar
    from guarded_sbatch.sources.run_sources import specs_from_flags
    from guarded_sbatch.sidecar.plan import WatchPlan

    hook = WebhookServer().start()
    clock = [1_796_000_000.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] > 1_796_000_000.0 + 3 * 3600:
            raise StopIteration

    try:
        settings = WatchPlan(
            run_name="never-logs", job_id=None, state_file=tmp_path / "s.json", evidence_dir=tmp_path / "e",
            sources=specs_from_flags({"tensorboard": [tmp_path / "missing"]}),
            notify=NotifySettings(urls=(f"json://{HOST}:{hook.port}/wait",), wait_long_s=3600))
        out = io.StringIO()
        try:
            Sidecar(settings, None, out, clock=lambda: clock[0], sleep=sleep).run()
        except StopIteration:
            pass
        assert len(hook.requests) == 1
        assert "waiting for a long time" in hook.requests[0]["json"]["title"]
        assert "WAIT for 60 min" in hook.requests[0]["json"]["message"]
        assert out.getvalue().count("sidecar: alert (wait_long)") == 1
    finally:
        hook.stop()
