"""Secrets masked wherever written, by shape as well as by name: the run's config.json snapshot, the sidecar's
state (crash text), the shared monitor (every launch's environment secrets, by fingerprint); and no over-masking:
a run name with "secret" or "token" in it keeps its job id, a path with "secret" in it stays readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id
from guarded_sbatch.core.redact import MASK, redact, redact_tree, remember_fingerprints, secret_fingerprints
from guarded_sbatch.sidecar.state import SidecarState

SHAPES = {
    "slack webhook": ("post to https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/abcdefghijklmnopqrstuvwx now",
                      "T0AAAAAAA/B0BBBBBBB/abcdefghijklmnopqrstuvwx"),
    "discord webhook": ("https://discord.com/api/webhooks/112233445566/AbCdEfGhIjKlMnOp-qrstuv", "AbCdEfGhIjKlMnOp"),
    "slack url": ("urls: slack://TokenAAAA/TokenBBBB/TokenCCCC/#ml", "TokenBBBB"),
    "tgram url": ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/987654", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"),
    "ntfy url": ("notify ntfys://ntfy.sh/my-private-topic-8c1f", "my-private-topic-8c1f"),
    "github pat": ("GH github_pat_11ABCDEFG0aBcDeFgHiJkL_mnopqrstuvwxyz0123456789ABCDEF used", "github_pat_11ABCDEFG0"),
    "gitlab pat": ("clone with glpat-xYz1234567890abcdefGH", "glpat-xYz1234567890abcdefGH"),
    "bearer": ("curl -H 'Authorization: Bearer 4f9a8b7c6d5e4f3a2b1c'", "4f9a8b7c6d5e4f3a2b1c"),
    "jwt": ("cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "dozjgNryP4J3jVmNHl0w5N"),
    "pass=": ("mysql://db?user=ml&pass=hunter2222", "hunter2222"),
    "aws secret": ("export AWS_KEY_FOR_BACKUPS wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG"),
    "pem block": ("key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAABG5vbmUAAAAE\n"
                  "-----END OPENSSH PRIVATE KEY-----\ndone", "b3BlbnNzaC1rZXktdjEAAAAA"),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_secret_shapes_are_masked(name: str) -> None:
    text, secret = SHAPES[name]
    masked = redact(text)
    assert secret not in masked and MASK in masked, masked


@pytest.mark.parametrize("text", [
    "run coco-secret-probe-bs64 (job 4123): STOP", "coco-secret-probe-bs64-4123: CANCELLED",
    "- Run: tokenizer-token-budget-lr3e-4 (job 77)", "secret-sauce-run: 4123",
    "/data/secret-project/run-3/train.log", "/data/my-secret-stuff/ckpt x", "bypass=1 passes=3 pass_rate=0.5",
])
def test_names_and_paths_with_secret_words_keep_their_meaning(text: str) -> None:
    assert redact(text) == text


def test_secret_named_config_keys_lose_their_values_whatever_their_shape() -> None:
    tree = {"optimizer": {"lr": 3e-4, "private": False}, "hub_token": "abc", "db": {"password": 1234},
            "wandb_api_key": "x" * 8, "max_tokens": 2048, "run_name": "coco-secret-run"}
    assert redact_tree(tree) == {"optimizer": {"lr": 3e-4, "private": False}, "hub_token": MASK, "db": {"password": MASK},
                                 "wandb_api_key": MASK, "max_tokens": 2048, "run_name": "coco-secret-run"}


def test_the_config_snapshot_of_a_real_launch_holds_no_secret(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text() + "hub_token: plainvalue1\nalerts: https://hooks.slack.com/services/T1/B2/sEcReT3x\n"
                      "db_password: 424242\n")
    result = project.cli("--guard-backend", "local", "train.sh", "--steps", "20", "--step-seconds", "0.01")
    assert result.returncode == 0, result.stderr
    record = project.run_record(submitted_job_id(result.stdout))
    snapshot = (project.state_dir / "runs" / record["run_id"] / "config.json").read_text()
    assert json.loads(snapshot)["values"]["lr"] == 0.05
    for secret in ("plainvalue1", "sEcReT3x", "424242"):
        assert secret not in snapshot


def test_the_sidecar_state_never_keeps_crash_text_secrets(tmp_path: Path) -> None:
    state = SidecarState(last_poll_error="HTTPError: 401 for Authorization: Bearer 0a1b2c3d4e5f6a7b8c9d",
                         final_summary="crash: RuntimeError: login failed with --hf-token hf_abcdefghijklmnopqrstuvwx")
    path = tmp_path / "sidecar-state.json"
    state.save(path)
    text = path.read_text()
    assert "0a1b2c3d4e5f6a7b8c9d" not in text and "hf_abcdefghijklmnopqrstuvwx" not in text
    assert "HTTPError: 401" in text  # the crash itself is still told


def test_the_shared_monitor_masks_a_later_launchs_environment_secrets_by_fingerprint() -> None:
    later_launch = {"WANDB_API_KEY": "0123456789launchB", "PATH": "/usr/bin"}
    fingerprints = secret_fingerprints(later_launch)
    assert fingerprints and all("0123456789launchB" not in f for f in fingerprints)
    line = "wandb: ERROR key 0123456789launchB rejected"
    assert "0123456789launchB" in redact(line, {})  # the monitor's own environment does not know it
    remember_fingerprints(fingerprints)  # what the monitor does when it adopts that launch's registration
    assert redact(line, {}) == f"wandb: ERROR key {MASK} rejected"


def test_a_registration_carries_fingerprints_and_the_monitor_adopting_it_masks_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from test_shared_monitor import FakeSlurm
    from guarded_sbatch.records import monitor_registry as registry
    from guarded_sbatch.records.registry import create_run
    from guarded_sbatch.launch.monitor_registration import SharedMonitorOptions, register_with_monitor
    from guarded_sbatch.sidecar.shared_monitor import SharedMonitor

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_TOKEN", "hf-launch-secret-9z8y7x")  # this launch's secret, not the monitor's
    folder = tmp_path / "monitor"
    record = create_run("coco-resnet50-bs256", "slurm", "501", submit_dir=str(tmp_path))
    slurm = FakeSlurm(["501", "900"])
    registry.write_monitor(folder, "900")
    assert register_with_monitor(slurm, record, SharedMonitorOptions(), folder=folder) == "900"  # type: ignore[arg-type]
    registration = (folder / "runs" / "501.json").read_text()
    assert "hf-launch-secret-9z8y7x" not in registration and "secret_fingerprints" in registration
    monkeypatch.delenv("HF_TOKEN")
    line = "login with hf-launch-secret-9z8y7x failed"
    assert "hf-launch-secret-9z8y7x" in redact(line, {})
    monitor = SharedMonitor(folder, slurm, io.StringIO(), job_id="900")  # type: ignore[arg-type]
    monitor.poll(0.0)
    assert redact(line, {}) == f"login with {MASK} failed"
