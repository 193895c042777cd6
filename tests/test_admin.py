"""Admin pieces without Slurm: the audit log under 20 concurrent launches, the committed Lua policy rendered
from the example site config, the site switch-off, and the module failing loudly without its site config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from e2e_helpers import make_project
from guarded_sbatch.records.audit import AuditLog
from package_extras import read_audit
from guarded_sbatch.site.enforcement import load_policy, render_lua_policy
from test_site_helpers import REPO, admin_modulefile, with_module

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def test_committed_lua_policy_is_the_example_site_config_rendered() -> None:
    # rendered with the path relative to the repository, as the README's command does from the checkout
    os.chdir(REPO)
    rendered = render_lua_policy(load_policy(Path("site_configs/example-site.toml")))
    committed = REPO / "wrapper" / "guarded_sbatch" / "site" / "lua" / "guarded_sbatch_policy.lua"
    assert committed.read_text() == rendered, (
        f"{committed} is stale: run `guarded-sbatch admin render-policy site_configs/example-site.toml {committed}`")


def test_enabled_false_renders_an_allow_policy(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('enabled = false\n[enforcement]\nunguarded_training = "reject"\n')
    policy = load_policy(site)
    assert policy.unguarded_training == "allow" and policy.switched_off
    assert "enabled = false" in render_lua_policy(policy)


LAUNCHES = 8  # at once, each a whole launch (pre-flight, job, sidecar) appending to one audit log


def test_concurrent_launches_lose_no_audit_line(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    log = tmp_path / "audit" / "audit.jsonl"
    site = tmp_path / "site.toml"
    site.write_text(f'[audit]\nlog = "{log}"\n')
    env = {**project.env, "GUARDED_SBATCH_SITE_CONFIG": str(site)}
    (project.root / "quick.sh").write_text(
        "#!/bin/bash\n#SBATCH --job-name=synthetic-tanh-mlp-bs64-lr5e-2\n"
        "python train.py --config configs/synthetic-tanh-mlp.yaml --steps 1 \"$@\"\n")
    launches = [subprocess.Popen(
        [sys.executable, "-m", "guarded_sbatch", "--guard-backend", "local", "--guard-tb", f"{TB}-{i:02d}",
         f"--guard-run-name=synthetic-tanh-mlp-audit{i:02d}", "--guard-waive", f"eta=audit test {i}", "quick.sh",
         "--logdir", f"{TB}-{i:02d}"],  # each its own folder: the own-folder check refuses one a live run writes
        cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL) for i in range(LAUNCHES)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in launches]  # type: ignore[union-attr]
    assert all(code == 0 for code, _, _ in results), [r for r in results if r[0] != 0][:1]
    records = read_audit(log)  # every line parses: none interleaved
    launched = [r for r in records if r["event"] == "launch"]
    assert len(launched) == LAUNCHES and len({r["job"] for r in launched}) == LAUNCHES
    job_ids = sorted(r.split()[-1] for _, r, _ in results)
    assert sorted(r["job"] for r in launched) == job_ids
    assert all(r["user"] and r["run"].startswith("synthetic-tanh-mlp-audit") for r in launched)
    # the ETA waiver is recorded only when the ETA check failed; each one has its check and reason
    assert all(r["check"] == "eta" and r["reason"].startswith("audit test") for r in records if r["event"] == "waiver")
    assert len(log.read_text().splitlines()) == len(records)


def test_audit_log_can_go_to_syslog_through_logger(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls = tmp_path / "logger-calls"
    fake = tmp_path / "bin" / "logger"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert AuditLog(None, syslog=True).record("kill", job="7", run="r-7", reason="by owner") is None
    line = calls.read_text().strip()
    assert line.startswith("-t guarded-sbatch -p user.notice -- {")
    assert json.loads(line.split("-- ", 1)[1])["event"] == "kill"


def test_module_fails_loudly_without_its_site_config_in_a_production_install(tmp_path: Path) -> None:
    modulepath = admin_modulefile(tmp_path, tmp_path / "etc" / "missing-site.toml")
    modulefile = modulepath / "guarded-sbatch" / "0.1.0.lua"
    modulefile.write_text(modulefile.read_text().replace(
        "local python       = nil", f'local python       = "{sys.executable}"'))
    out = with_module(modulepath, "echo loaded", cwd=tmp_path, env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                                                     "HOME": str(tmp_path)})
    assert out.returncode == 90 and "loaded" not in out.stdout
    assert "missing-site.toml" in out.stderr and "does not exist" in out.stderr


def _fake_sbatch(tmp_path: Path) -> Path:
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text("#!/bin/sh\necho 'Submitted batch job 4242'\n")
    fake.chmod(0o755)
    return fake


def _shim(tmp_path: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GUARDED_SBATCH_SITE_CONFIG": str(site),
           "GUARDED_SBATCH_REAL_SBATCH": str(_fake_sbatch(tmp_path)),
           "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"),
           "GUARDED_SBATCH_USER_CONFIG": str(tmp_path / "user.toml")}
    (tmp_path / "user.toml").write_text("")
    return subprocess.run([sys.executable, "-m", "guarded_sbatch.cli.shim", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_shim_bypasses_and_the_site_switch_off_are_audited(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    site = tmp_path / "site.toml"
    site.write_text(f'[audit]\nlog = "{log}"\n[enforcement]\nunguarded_training = "tag"\n')
    wrapped = _shim(tmp_path, site, "--wrap", "python train.py --lr 0.1")
    assert wrapped.returncode == 0 and wrapped.stdout == "Submitted batch job 4242\n", wrapped.stderr
    plain = _shim(tmp_path, site, "--wrap", "hostname")
    assert plain.returncode == 0
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=synthetic-tanh-mlp-bs64-lr5e-2\npython train.py\n")
    site.write_text(f'enabled = false\n[audit]\nlog = "{log}"\n')
    off = _shim(tmp_path, site, "train.sh")
    assert off.returncode == 0 and off.stdout == "Submitted batch job 4242\n" and "Pre-flight" not in off.stderr
    records = read_audit(log)
    assert [r["event"] for r in records] == ["shim_bypass", "shim_bypass"]  # `--wrap hostname` is no bypass
    assert "--wrap job (training" in records[0]["reason"] and "python train.py" in records[0]["argv"]
    assert "switched off by the site" in records[1]["reason"] and records[1]["argv"] == "train.sh"


def test_tcl_module_fails_loudly_too(tmp_path: Path) -> None:
    text = (REPO / "modulefiles" / "tcl" / "guarded-sbatch" / "0.1.0").read_text()
    for old, new in (('set install_root ""', f'set install_root "{REPO}"'),
                     ('set python       ""', f'set python       "{sys.executable}"'),
                     ('set site_config  ""', f'set site_config  "{tmp_path / "missing-site.toml"}"')):
        assert old in text
        text = text.replace(old, new)
    modulepath = tmp_path / "modulefiles"
    (modulepath / "guarded-sbatch").mkdir(parents=True)
    (modulepath / "guarded-sbatch" / "0.1.0").write_text(text)
    out = with_module(modulepath, "echo loaded", cwd=tmp_path, env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                                                     "HOME": str(tmp_path)})
    assert out.returncode == 90 and "loaded" not in out.stdout
    assert "missing-site.toml" in out.stderr and "does not exist" in out.stderr
