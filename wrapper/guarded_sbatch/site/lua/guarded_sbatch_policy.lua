-- guarded-sbatch enforcement policy, written from site_configs/example-site.toml by
-- `guarded-sbatch admin render-policy SITE.toml OUT.lua`. Edit the site config and render again;
-- cli_filter.lua and job_submit.lua read this file on every submission (no reconfigure needed).
return {
  unguarded_training = "reject",  -- reject | tag | allow
  launchers = {"python", "torchrun", "accelerate", "deepspeed"},
  training_commands = {"run_pretrain.sh"},
  exempt_programs = {"guarded_sbatch", "submitit.core._submit", "pip"},
  tag = "guarded-sbatch:unguarded",
  tag_field = "admin_comment",  -- admin_comment | comment
  how_to_submit = "module load guarded-sbatch; guarded-sbatch [options] script.sh",
}
