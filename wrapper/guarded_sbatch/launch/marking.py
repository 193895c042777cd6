"""The scheduler wrapper that adds the guarded-sbatch marker (core/marker.py) to every sbatch call of one launch,
whatever its front end (the CLI's launches and GuardedExecutor alike: launch/pipeline.py `guarded_scheduler`).
site/marking_scheduler.py explains the marker to admins and re-exports these."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from guarded_sbatch.core.marker import PREFLIGHT, SIDECAR, comment_with_marker
from guarded_sbatch.core.sbatch.argv import ParsedOption, split_sbatch_argv
from guarded_sbatch.core.sbatch.script import parse_script_text
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest


def user_comment(command_line: tuple[ParsedOption, ...], script_text: str, script_path: Path) -> str | None:
    """The comment sbatch would use: the last --comment on the command line, else the script's #SBATCH one."""
    for option in reversed(command_line):
        if option.name == "comment":
            return option.value

    directives = parse_script_text(script_text, script_path).directive_options
    return next((option.value for option in reversed(directives) if option.name == "comment"), None)


class MarkingScheduler(DelegatingScheduler):
    """A Scheduler that adds the marker to every sbatch call guarded-sbatch makes for one launch.

    The training script's submissions (the ETA check's --test-only and the real one) get the preflight
    marker, every other script (the sidecar) the sidecar marker. Everything else is the wrapped scheduler's.
    """

    def __init__(self, inner: Scheduler, training_script: Path, command_line: tuple[ParsedOption, ...]) -> None:
        super().__init__(inner)
        self._training_script = training_script.resolve()
        self._command_line = command_line

    def marked(self, request: SubmitRequest) -> SubmitRequest:
        script = request.script if request.script.is_absolute() else (request.workdir or Path.cwd()) / request.script
        raw = script.read_bytes()
        if script.resolve() == self._training_script:
            kind, command_line = PREFLIGHT, self._command_line
        else:

            kind, command_line = SIDECAR, split_sbatch_argv([*request.sbatch_options, str(script)]).parsed_options
        comment = user_comment(command_line, raw.decode("utf-8", errors="replace"), script)
        marked_options = (*request.sbatch_options, f"--comment={comment_with_marker(comment, kind, raw)}")
        return replace(request, sbatch_options=marked_options)

    def submit(self, request: SubmitRequest) -> str:
        return self.inner.submit(self.marked(request))

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return self.inner.estimate_start(self.marked(request))


_: type[Scheduler] = MarkingScheduler
