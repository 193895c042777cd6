"""The launchers' configs: hydra-submitit-launcher's own (every resource key it has), plus `guard`: the guard's
keywords, as GuardedExecutor takes them (sbatch/guard_options.py). Imported by Hydra's plugin scan: light (and no
`from __future__ import annotations`: OmegaConf reads the fields' types)."""


from dataclasses import dataclass, field
from typing import Dict, Optional

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf

PROVIDER = "guarded_submitit_launcher"


@dataclass
class GuardConf:
    # the sweep's run name; None: <task name>-<the swept keys>-sweep (`train-lr-sweep` for lr=0.01,0.1,100)
    run_name: Optional[str] = None
    tb_dir: Optional[str] = None
    wandb_dir: Optional[str] = None
    log_path: Optional[str] = None
    # the config the pre-flight diffs; None: the sweep's composed config, written to <sweep dir>/.guard/config.yaml
    config: Optional[str] = None
    reference: Optional[str] = None
    checkpoint_dir: Optional[str] = None
    monitor: Optional[str] = None
    waivers: Dict[str, str] = field(default_factory=dict)


@dataclass
class GuardedSlurmQueueConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.guarded_submitit_launcher.launcher.GuardedSlurmLauncher"
    guard: GuardConf = field(default_factory=GuardConf)


@dataclass
class GuardedLocalQueueConf(LocalQueueConf):
    _target_: str = "hydra_plugins.guarded_submitit_launcher.launcher.GuardedLocalLauncher"
    guard: GuardConf = field(default_factory=GuardConf)


ConfigStore.instance().store(group="hydra/launcher", name="guarded_submitit_slurm", node=GuardedSlurmQueueConf(),
                             provider=PROVIDER)
ConfigStore.instance().store(group="hydra/launcher", name="guarded_submitit_local", node=GuardedLocalQueueConf(),
                             provider=PROVIDER)
