-- guarded-sbatch 0.1.0 for Lmod. `module load guarded-sbatch` puts guarded-sbatch's `sbatch` shim first on
-- PATH (training jobs get the launch pre-flight, every other job goes to Slurm's sbatch untouched), adds the
-- `guarded-sbatch` command, and points both at the site config.

-- Site admin: set these for your installation; nil keeps the default in the comment.
local install_root = nil  -- nil: the checkout this file is in (<root>/modulefiles/guarded-sbatch/0.1.0.lua)
local python       = nil  -- nil: <install_root>/.venv/bin/python (a Python with guarded-sbatch[cli] installed)
local site_config  = nil  -- nil: <install_root>/site_configs/site.toml (e.g. /etc/guarded-sbatch/site.toml)
-- A site_config set above is a production install: the module refuses to load (non-zero, a clear message)
-- while that file is missing, rather than run with weaker built-in defaults. With nil it only warns.
local real_sbatch  = nil  -- nil: the first sbatch on PATH outside the shim folder, else /usr/bin/sbatch

local site_config_set = site_config ~= nil
local this_file = myFileName()
local root = install_root or this_file:match("^(.*)/[^/]+/[^/]+/[^/]+$")
local shims = pathJoin(root, "shims")
python = python or pathJoin(root, ".venv/bin/python")
site_config = site_config or pathJoin(root, "site_configs/site.toml")
if not real_sbatch then
  for folder in (os.getenv("PATH") or ""):gmatch("[^:]+") do
    if folder ~= shims and isFile(pathJoin(folder, "sbatch")) then
      real_sbatch = pathJoin(folder, "sbatch")
      break
    end
  end
  real_sbatch = real_sbatch or "/usr/bin/sbatch"
end

whatis("Name: guarded-sbatch")
whatis("Version: 0.1.0")
whatis("Description: sbatch with a launch pre-flight and a sidecar that stops broken training runs")
help([[
guarded-sbatch: `sbatch train.sh` now runs the launch pre-flight for training jobs (report on stderr;
a failed check blocks with exit 3 unless waived with --guard-waive CHECK="REASON"). Other jobs go to
Slurm's sbatch unchanged. `guarded-sbatch --help` lists everything; `guarded-sbatch check train.sh`
reviews a launch without submitting.
]])

if not isFile(python) then
  LmodError("guarded-sbatch: no Python at " .. python .. "; the site admin sets `python` at the top of " .. this_file)
end
prepend_path("PATH", shims)
setenv("GUARDED_SBATCH_PYTHON", python)
setenv("GUARDED_SBATCH_REAL_SBATCH", real_sbatch)
if isFile(site_config) then
  setenv("GUARDED_SBATCH_SITE_CONFIG", site_config)
elseif site_config_set and mode() == "load" then
  LmodError("guarded-sbatch: the site config " .. site_config .. " (set in " .. this_file .. ") does not exist; "
    .. "not loaded, so that no job runs under weaker defaults. Site admin: create it from "
    .. "site_configs/example-site.toml, or fix `site_config` in the modulefile")
elseif mode() == "load" then
  LmodMessage("guarded-sbatch: no site config at " .. site_config .. " (built-in defaults apply)")
end
