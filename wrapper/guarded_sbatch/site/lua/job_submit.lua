--[[ guarded-sbatch: Slurm job_submit/lua plugin (server side; sees the batch script; cannot be bypassed).

Install: copy job_submit.lua, guarded_sbatch_lib.lua and guarded_sbatch_policy.lua beside slurm.conf,
set `JobSubmitPlugins=lua` in slurm.conf and run `scontrol reconfigure`. The policy (reject / tag / allow,
what counts as training) is guarded_sbatch_policy.lua, rendered from the site config's [enforcement] table:
  guarded-sbatch admin render-policy /etc/guarded-sbatch/site.toml /etc/slurm/guarded_sbatch_policy.lua
It is read on every submission, so a new policy needs no reconfigure.

A batch job whose script launches training (see guarded_sbatch_lib.lua) and whose comment carries no valid
guarded-sbatch marker for that script is rejected (the user sees how to submit it) or tagged (the tag is
appended to admin_comment, or comment, per the policy). Everything else passes unchanged.
]]
local here = string.match(string.gsub(debug.getinfo(1, "S").source or "", "^@", ""), "^(.*)/[^/]*$") or "."
local lib = dofile(here .. "/guarded_sbatch_lib.lua")

function slurm_job_submit(job_desc, part_list, submit_uid)
  local script = job_desc.script
  if script == nil then return slurm.SUCCESS end  -- srun / salloc: no batch script to judge
  local policy, problem = lib.load_policy(here)
  if problem then slurm.log_error("guarded-sbatch job_submit: %s", problem) end
  if policy.unguarded_training == "allow" or lib.is_guarded(job_desc.comment, script) then
    return slurm.SUCCESS
  end
  local why = lib.training_line(script, policy)
  if why == nil then return slurm.SUCCESS end
  if policy.unguarded_training == "reject" then
    slurm.log_info("guarded-sbatch job_submit: rejected an unguarded training job from uid %d (%s)", submit_uid, why)
    slurm.log_user("%s", lib.reject_message(why, policy))
    return slurm.ERROR
  end
  if policy.tag_field == "comment" then
    job_desc.comment = lib.tag_text(job_desc.comment, why, policy)
  else
    job_desc.admin_comment = lib.tag_text(job_desc.admin_comment, why, policy)
  end
  slurm.log_user("%s", "guarded-sbatch: this training job did not go through the launch pre-flight; it is tagged "
    .. policy.tag .. " (next time: `" .. policy.how_to_submit .. "`)")
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
