--[[ guarded-sbatch: Slurm cli_filter/lua plugin (client side, inside sbatch: early, friendly, bypassable).

Install: copy cli_filter.lua, guarded_sbatch_lib.lua and guarded_sbatch_policy.lua beside slurm.conf
(the login nodes' copy) and set `CliFilterPlugins=cli_filter/lua`. Same policy file as job_submit.lua.

For sbatch only (srun and salloc pass: options["parsable"] is "invalid-context" there) and not for
--test-only: when the script file (options.argv[1]) launches training and the comment (command line or
#SBATCH) carries no valid guarded-sbatch marker for it, reject with the way to submit it (policy "reject")
or warn that job_submit will tag it (policy "tag"). A script on stdin or --wrap is left to job_submit.
]]
local here = string.match(string.gsub(debug.getinfo(1, "S").source or "", "^@", ""), "^(.*)/[^/]*$") or "."
local lib = dofile(here .. "/guarded_sbatch_lib.lua")

function slurm_cli_setup_defaults(options, early_pass)
  return slurm.SUCCESS
end

local function read_file(path)
  local file = io.open(path, "rb")
  if file == nil then return nil end
  local text = file:read(4 * 1024 * 1024 + 1)
  file:close()
  return text
end

function slurm_cli_pre_submit(options, offset)
  local parsable = options["parsable"]
  if parsable == nil or parsable == "invalid-context" then return slurm.SUCCESS end  -- not sbatch
  if options["test-only"] == "set" then return slurm.SUCCESS end
  local argv = options.argv
  if argv == nil or argv[1] == nil then return slurm.SUCCESS end  -- --wrap or stdin: job_submit decides
  local script = read_file(argv[1])
  if script == nil then return slurm.SUCCESS end
  local policy = lib.load_policy(here)
  if policy.unguarded_training == "allow" or lib.is_guarded(options["comment"], script) then
    return slurm.SUCCESS
  end
  local why = lib.training_line(script, policy)
  if why == nil then return slurm.SUCCESS end
  if policy.unguarded_training == "reject" then
    io.stderr:write("sbatch: error: " .. lib.reject_message(why, policy) .. "\n")
    return slurm.ERROR
  end
  io.stderr:write("sbatch: warning: guarded-sbatch: this training job skips the launch pre-flight and will be tagged "
    .. policy.tag .. "; use `" .. policy.how_to_submit .. "`\n")
  return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
  return slurm.SUCCESS
end
