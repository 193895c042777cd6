"""Round 3 of the shared cluster, what is shown and written: two real users in a 2775 project folder under umask 002.
A tag the co-worker appends to the victim's event file and a key of his reference config reach the victim's
terminal as visible escapes (`\\x1b]0;...`), never raw; the project note (group-readable) masks a Google API key
and the other key shapes; a note never follows the co-worker's `notes -> ~victim/.config`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from e2e_helpers import EXAMPLE
from shared_cluster import SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture
from source_writers import tb_event, write_tb_events
from guarded_sbatch.core.redact import MASK, redact
from guarded_sbatch.core.sanitize import visible, visible_keeping_colours, visible_line

ESCAPES = "\x1b]0;PWNED-TITLE\x07\x1b[2J"


def _readable_events(cluster: SharedCluster, name: str, tag: str, values: list[float], first: int) -> Path:
    folder = cluster.base / "made" / name
    event_file = write_tb_events(folder, [tb_event(s, tag, v, wall_time=time.time()) for s, v in enumerate(values, first)])
    for path in (folder.parent, folder):
        os.chmod(path, 0o755)
    event_file.chmod(0o644)
    return event_file


def test_a_tag_with_escapes_appended_to_an_event_file_is_shown_escaped(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    healthy = _readable_events(cluster, "esc-healthy", "eval/accuracy", [0.5 + s / 400 for s in range(1, 100)], 1)
    planted = _readable_events(cluster, "esc-planted", f"train/loss{ESCAPES}", [1.0 / s for s in range(1, 30)], 100)
    target = cluster.project / "esc" / "runs" / "a" / healthy.name
    copied = cluster.run(cluster.victim, ["sh", "-c", f'mkdir -p {target.parent} && cat {healthy} > {target}'])
    assert copied.returncode == 0, copied.stderr
    assert cluster.run(cluster.coworker, ["sh", "-c", f"cat {planted} >> {target}"]).returncode == 0
    shown = cluster.run(cluster.victim, [str(cluster.python), "-P", "-m", "guarded_sbatch", "monitor", "--once", "--tb",
                                         str(target.parent)], cwd=cluster.base, timeout=180)
    output = shown.stdout + shown.stderr
    assert "Traceback" not in output, output[-2000:]
    assert "\x1b" not in output and "\x07" not in output, output[-2000:]
    assert "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J" in output, output[-2000:]  # seen, not obeyed


def test_a_key_with_escapes_in_a_coworkers_reference_config_reaches_no_terminal(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "esc-ref")
    own = (project / "configs" / "synthetic-tanh-mlp.yaml").read_text()
    cluster.write_as(cluster.coworker, project / "experiments" / "old" / "config.yaml",
                     own + f'"optimizer{ESCAPES}": adamw\n')
    env = cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local", OPENBLAS_NUM_THREADS="1")
    check = cluster.run(cluster.victim, [str(cluster.python), "-P", "-m", "guarded_sbatch", "check", "train.sh"],
                        cwd=project, env=env, timeout=180)
    assert check.returncode in (0, 3), check.stderr
    assert "\x1b" not in check.stderr + check.stdout and "\x07" not in check.stderr, check.stderr
    assert "PWNED-TITLE" not in check.stderr or "\\x1b]0;PWNED-TITLE" in check.stderr


def test_the_project_note_masks_keys_shows_escapes_and_never_follows_a_link(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    notes = cluster.project / "notes-ok" / "NOTES.md"
    code = ("import sys\nfrom pathlib import Path\nfrom guarded_sbatch.actions.notes import NotesError, append_project_note\n"
            "try:\n    append_project_note(Path(sys.argv[1]), sys.argv[2])\nexcept NotesError as exc:\n"
            "    print(exc)\n    sys.exit(3)\n")
    crash = ("STOP crashed: google.api_core.exceptions.PermissionDenied: 403 API key AIzaSyD-1234567890abcdefghijklmnopqrstu "
             f"not valid; X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404 {ESCAPES}")
    wrote = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", code, str(notes), crash], cwd=cluster.base)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    text = notes.read_text()
    assert "AIzaSy" not in text and "aeeed9bb" not in text and text.count(MASK) == 2, text
    assert "\x1b" not in text and "\\x1b]0;PWNED-TITLE" in text
    assert oct(notes.stat().st_mode & 0o777) == "0o640"

    # the co-worker's link from the shared folder into the victim's home: refused, nothing written there
    planted = cluster.project / "notes-link"
    assert cluster.run(cluster.coworker, ["ln", "-s", str(cluster.victim.home / ".config"), str(planted)]).returncode == 0
    refused = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", code, str(planted / "NOTES.md"), "STOP"],
                          cwd=cluster.base)
    assert refused.returncode == 3 and "link" in refused.stdout, refused.stdout + refused.stderr
    assert not (cluster.victim.home / ".config" / "NOTES.md").exists()


KEYS = {
    "google api key": ("crash: 403 key AIzaSyD-1234567890abcdefghijklmnopqrstu", "AIzaSyD-1234567890"),
    "azure subscription key": ("Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcdef", "0123456789abcdef0123"),
    "azure key in config": ('azure_openai: {key1: "fedcba9876543210fedcba9876543210"}', "fedcba9876543210"),
    "azure connection string": ("AccountName=a;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSR==;Endpoint", "Eby8vdM02"),
    "azure sas": ("https://a.blob.core.windows.net/c/b?sv=2019-02-02&sig=abcdEFGH1234%2Bxyz%3D&se=2020", "abcdEFGH1234"),
    "s3 presigned": ("https://b.s3.amazonaws.com/o?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F2013&X-Amz-Signature="
                     "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404", "aeeed9bbccd4d02"),
    "github classic": ("push ghp_abcdefghijklmnopqrstuvwxyz0123456789 failed", "ghp_abcdefghij"),
    "slack bot": ("xoxb-123456789012-123456789012-abcdefghijklmnopqrstuvwx", "abcdefghijklmnop"),
    "slack app": ("xapp-1-A0123456789-1234567890123-abcdef0123456789", "abcdef0123456789"),
    "anthropic": ("ANTHROPIC sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFG", "abcdefghijklmnop"),
    "openai project": ("OPENAI sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnop"),
    "hf": ("HF hf_abcdefghijklmnopqrstuvwxyzABCD", "hf_abcdefghij"),
    "stripe": ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWD"),
    "google oauth": ("ya29.a0AfH6SMBx-abcdefghijklmnopqrstuvwxyz", "a0AfH6SMBx"),
    "pem": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "dozjgNry"),
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_every_key_shape_is_masked(name: str) -> None:
    text, secret = KEYS[name]
    masked = redact(text)
    assert secret not in masked and MASK in masked, masked


@pytest.mark.parametrize("text", ["run id 0123456789abcdef0123456789abcdef", "md5 d41d8cd98f00b204e9800998ecf8427e",
                                  "--key-metric=eval_loss", "loss-key: loss", "the AIza prefix alone"])
def test_ids_and_metric_keys_are_not_masked(text: str) -> None:
    assert redact(text) == text


def test_control_characters_are_shown_as_escapes() -> None:
    assert visible("a\x1b[2Jb\tc\nd\re\x7f\u202e") == "a\\x1b[2Jb\tc\nd\\re\\x7f\\u202e"
    assert visible_line("tag\nwith\ttab") == "tag\\nwith\\ttab"
    assert visible("plain text") == "plain text"
    assert visible_keeping_colours("\x1b[31m[FAIL]\x1b[0m key\x1b]0;T\x07") == "\x1b[31m[FAIL]\x1b[0m key\\x1b]0;T\\x07"
