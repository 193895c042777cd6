"""sbatch's filename patterns (sbatch(1) "filename pattern") of `--output` / `--error`: %A %a %j %N %u %x, and %%
for a percent sign; filled in for one job by the launch (the run's stdout/stderr sources) and the local backend."""

from __future__ import annotations

import re

_PATTERN = re.compile(r"%(\d*)([AajNux%])")


def expand_filename_pattern(pattern: str, *, job_id: str, job_name: str, user: str, node: str | None = None,
                            array_job: str | None = None, array_task: str | None = None) -> str:
    """sbatch's --output/--error pattern for one job; %N stays when the node is not known yet."""
    def replace(match: re.Match[str]) -> str:
        width, code = match.group(1), match.group(2)
        if code == "%":
            return "%"
        value = {"j": job_id, "A": array_job or job_id, "a": array_task, "N": node, "u": user, "x": job_name}[code]
        if value is None:
            return match.group(0)
        return value.zfill(int(width)) if width and value.isdigit() else value

    return _PATTERN.sub(replace, pattern)
