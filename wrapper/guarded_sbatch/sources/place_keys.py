"""Which config keys and launcher arguments (their last part, `-` as `_`) name a folder the run writes: its output
folder or its checkpoint folder (sources/kinds.py `written_folder_keys` adds every source kind's folder keys). One
list per fact: the launch claims the output folders as the run's own, the run-name check calls a name taken when
an output or checkpoint folder already holds it, and the path check asks that each one's parent exists."""

from __future__ import annotations

# a key the trainer creates its folder from (Lightning's `default_root_dir`, a project's own `root_dir`): written,
# never a data path that must exist before the run
OUTPUT_KEYS = ("output_dir", "out_dir", "outdir", "save_dir", "run_dir", "exp_dir", "work_dir", "results_dir",
               "default_root_dir", "root_dir", "logging_dir", "logs_dir", "log_root", "exp_root", "experiment_dir",
               "output_root", "save_root")
CHECKPOINT_DIR_KEYS = ("checkpoint_dir", "ckpt_dir", "checkpoints_dir", "save_path")
