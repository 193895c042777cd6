--[[ guarded-sbatch: code shared by cli_filter.lua and job_submit.lua (plain Lua 5.1, no modules).
Install it beside them (the folder of slurm.conf). Loaded with dofile; returns a table of functions.

  lib.load_policy(dir)                 -> the table of guarded_sbatch_policy.lua in dir (fails closed: reject)
  lib.is_guarded(comment, script)      -> true when comment carries guarded-sbatch's marker for this script
  lib.training_line(script, policy)    -> "line N: <text>" when the script launches training, else nil
                                          (a launch form it cannot classify counts: lib.unclassified_launch)
  lib.reject_message(why, policy), lib.tag_text(comment, why, policy)

The marker (written by guarded-sbatch, see wrapper/guarded_sbatch/launch/marking.py) is
"guarded-sbatch:preflight=<adler32 of the script bytes, 8 hex digits>" (the sidecar: ":sidecar=").
Training detection is the shim's rule in plain Lua: a launcher line (python <file or -m module>, torchrun,
accelerate launch, deepspeed; behind srun/exec/env VAR=.../time/nohup) whose program the policy does not
exempt, or a line containing one of the policy's training_commands. Variables are not expanded here.
]]
local lib = {}

local DEFAULT_POLICY = {
  unguarded_training = "tag",
  launchers = { "python", "torchrun", "accelerate", "deepspeed" },
  training_commands = {},
  exempt_programs = { "guarded_sbatch", "submitit.core._submit", "pip" },
  tag = "guarded-sbatch:unguarded",
  tag_field = "admin_comment",
  how_to_submit = "module load guarded-sbatch; guarded-sbatch [options] script.sh",
}

-- Fails closed: a policy that cannot be read (missing, unreadable by this user, broken) never weakens the site's
-- mode to "tag"; training jobs without the marker are rejected, naming the problem, until the admin fixes it.
function lib.load_policy(dir)
  local ok, policy = pcall(dofile, dir .. "/guarded_sbatch_policy.lua")
  if not ok or type(policy) ~= "table" or (policy.unguarded_training ~= "reject" and policy.unguarded_training ~= "tag"
      and policy.unguarded_training ~= "allow") then
    local closed = {}
    for key, value in pairs(DEFAULT_POLICY) do closed[key] = value end
    closed.unguarded_training = "reject"
    closed.how_to_submit = closed.how_to_submit .. " (the site's guarded_sbatch_policy.lua could not be loaded: "
      .. string.sub(tostring(policy), 1, 200) .. "; tell your site admin)"
    return closed, "guarded_sbatch_policy.lua not loaded (" .. tostring(policy) .. "): training jobs rejected"
  end
  for key, value in pairs(DEFAULT_POLICY) do
    if policy[key] == nil then policy[key] = value end
  end
  return policy, nil
end

function lib.adler32(text)
  local a, b = 1, 0
  local n = #text
  local i = 1
  while i <= n do
    local last = i + 3799 < n and i + 3799 or n  -- small chunks: a and b stay exact in doubles
    local bytes = { string.byte(text, i, last) }
    for k = 1, #bytes do
      a = a + bytes[k]
      b = b + a
    end
    a = a % 65521
    b = b % 65521
    i = last + 1
  end
  return string.format("%08x", b * 65536 + a)
end

function lib.is_guarded(comment, script)
  if comment == nil or script == nil then return false end
  local digest = lib.adler32(script)
  for kind, found in string.gmatch(comment, "guarded%-sbatch:(%a+)=(%x%x%x%x%x%x%x%x)") do
    if (kind == "preflight" or kind == "sidecar") and found == digest then return true end
  end
  return false
end

local function base_of(word)
  return string.match(word, "([^/]+)$") or word
end

local function is_python(word)
  return string.match(base_of(word), "^python[%d%.]*$") ~= nil
end

local PREFIX = { exec = true, time = true, nohup = true, command = true, ["do"] = true, ["then"] = true,
  ["else"] = true, builtin = true, stdbuf = true, ["{"] = true, ["("] = true, env = true }
local RUNNERS = { srun = true, mpirun = true, mpiexec = true }
local SRUN_VALUE_LETTERS = "AbcDdeiJLMmNnopqSTtWwxBCGF"
local SRUN_FLAGS = { label = true, unbuffered = true, verbose = true, quiet = true, overlap = true,
  ["multi-prog"] = true, pty = true, ["preserve-env"] = true, exclusive = true, ["kill-on-bad-exit"] = true,
  ["no-kill"] = true, immediate = true, contiguous = true, ["disable-status"] = true, overcommit = true }
local LAUNCHER_FLAGS = { standalone = true, module = true, m = true, ["no-python"] = true, no_python = true,
  cpu = true, multi_gpu = true, use_deepspeed = true, use_fsdp = true, debug = true, quiet = true,
  ["run-path"] = true, run_path = true, no_local_rank = true, force_multi = true }
local MODULE_LAUNCHERS = { ["torch.distributed.run"] = "torchrun", ["torch.distributed.launch"] = "torchrun",
  ["accelerate.commands.launch"] = "accelerate", ["deepspeed.launcher.runner"] = "deepspeed", deepspeed = "deepspeed" }

local function words_of(command)
  local words = {}
  for word in string.gmatch(command, "%S+") do
    words[#words + 1] = (string.gsub(word, "[\"']", ""))
  end
  return words
end

-- skip options starting at i; returns the index of the first non-option word
local function skip_options(words, i, flags, value_letters)
  while i <= #words do
    local word = words[i]
    if word == "--" then return i + 1 end
    if string.sub(word, 1, 1) ~= "-" or word == "-" then return i end
    if string.sub(word, 1, 2) == "--" then
      local name = string.match(word, "^%-%-([^=]+)")
      if string.find(word, "=", 1, true) or flags[name] or flags[string.gsub(name, "-", "_")] then
        i = i + 1
      else
        i = i + 2
      end
    else
      local letter = string.sub(word, 2, 2)
      if value_letters ~= "" and string.find(value_letters, letter, 1, true) and #word == 2 then
        i = i + 2
      else
        i = i + 1
      end
    end
  end
  return i
end

local function contains(list, value)
  for _, item in ipairs(list) do
    if item == value then return true end
  end
  return false
end

local function exempt(program, policy)
  local base = base_of(program)
  for _, entry in ipairs(policy.exempt_programs) do
    if program == entry or base == entry or string.sub(program, 1, #entry + 1) == entry .. "." then return true end
  end
  return false
end

-- kind, program of the launcher in one simple command, or nil
local function launcher_of(words)
  local i = 1
  while i <= #words do
    local word = words[i]
    local base = base_of(word)
    if PREFIX[word] or string.match(word, "^[%a_][%w_]*=") then
      i = i + 1
    elseif RUNNERS[base] then
      i = skip_options(words, i + 1, SRUN_FLAGS, SRUN_VALUE_LETTERS)
    else
      break
    end
  end
  local head = words[i]
  if head == nil then return nil end
  local base = base_of(head)
  if is_python(head) then
    i = i + 1
    while i <= #words do
      local word = words[i]
      if word == "-c" then return nil end
      if word == "-m" then
        local module = words[i + 1]
        if module == nil then return nil end
        local kind = MODULE_LAUNCHERS[module]
        if kind then
          local j = skip_options(words, i + 2, LAUNCHER_FLAGS, "")
          return kind, words[j] or module
        end
        return "python", module
      end
      if string.sub(word, 1, 2) == "-m" and #word > 2 then return "python", string.sub(word, 3) end
      if word == "-W" or word == "-X" then
        i = i + 2
      elseif string.sub(word, 1, 1) == "-" then
        i = i + 1
      else
        return "python", word
      end
    end
    return nil
  end
  local kind = nil
  if base == "torchrun" or base == "deepspeed" then
    kind, i = base, i + 1
  elseif base == "accelerate" and words[i + 1] == "launch" then
    kind, i = "accelerate", i + 2
  else
    return nil
  end
  local j = skip_options(words, i, LAUNCHER_FLAGS, "")
  if words[j] == nil then return nil end
  return kind, words[j]
end

-- { first line number, text } of each line with its backslash-newlines joined by `joiner` ("" as bash does)
local function logical_lines(script, joiner)
  local lines, buffer, start, number = {}, "", 0, 0
  for line in string.gmatch(script .. "\n", "([^\n]*)\n") do
    number = number + 1
    line = string.gsub(line, "\r$", "")
    if buffer == "" then start = number end
    if string.sub(line, -1) == "\\" and not string.match(line, "^%s*#") then
      buffer = buffer .. string.sub(line, 1, -2) .. joiner
    else
      lines[#lines + 1] = { start, buffer .. line }
      buffer = ""
    end
  end
  return lines
end

-- { number, stripped text } of each line of code: not line 1, a blank line, a comment or a here-document's body
local function code_lines(script, joiner)
  local code, heredoc_end = {}, nil
  for index, entry in ipairs(logical_lines(script, joiner)) do
    local stripped = string.match(entry[2], "^%s*(.-)%s*$")
    if heredoc_end then
      if stripped == heredoc_end then heredoc_end = nil end
    elseif index > 1 and stripped ~= "" and string.sub(stripped, 1, 1) ~= "#" then
      heredoc_end = string.match(entry[2], "<<%-?%s*[\"']?([%a_][%w_]*)")
      code[#code + 1] = { entry[1], stripped }
    end
  end
  return code
end

local function counts(policy, kind, program)
  return kind ~= nil and contains(policy.launchers, kind) and not exempt(program, policy)
end

-- Wrappers whose own options are not parsed: a launcher anywhere after one counts (site/enforcement.py: WRAPPERS).
local WRAPPERS = { srun = true, mpirun = true, mpiexec = true, timeout = true, singularity = true, apptainer = true,
  enroot = true, podman = true, docker = true, numactl = true, taskset = true }

-- kind, index of the first word after it when words[at] names a launcher, else nil (launch_forms.launcher_kind)
local function launcher_kind(words, at)
  local base = base_of(words[at])
  if is_python(words[at]) then return "python", at + 1 end
  if base == "torchrun" or base == "deepspeed" then return base, at + 1 end
  if base == "accelerate" and words[at + 1] == "launch" then return "accelerate", at + 2 end
  return nil
end

function lib.wrapped_launcher(words)
  local i = 1
  while i <= #words and (PREFIX[words[i]] or string.match(words[i], "^[%a_][%w_]*=")) do i = i + 1 end
  if words[i] == nil or not WRAPPERS[base_of(words[i])] then return nil end
  for at = i + 1, #words do
    local kind, first = launcher_kind(words, at)
    if kind then
      if kind == "python" and words[first] == "-c" then return nil end
      for j = first, #words do
        if string.sub(words[j], 1, 1) ~= "-" then return kind, words[j] end
      end
      return kind, ""
    end
  end
  return nil
end

local function python_shebang(line)
  return string.match(line, "^#!%S*python[%d%.]*%s") or string.match(line, "^#!%S*python[%d%.]*$")
    or string.match(line, "^#!%S*/env%s+[^\n]-python[%d%.]*%s") or string.match(line, "^#!%S*/env%s+[^\n]-python[%d%.]*$")
end

-- Fails closed (site/launch_forms.py is the Python twin): a line the launcher rule above cannot classify but that may
-- start a launcher counts. Read as bash joins and unquotes it, roughly: backslash-newline removed, backslashes and
-- quotes dropped, cut into commands at ; & | ( ) { } and backquotes; words that run the rest of their command
-- (exec -a N, time -p, env -i A=1, nohup, bash -c, eval, sudo ...) looked through; a variable as the command word
-- counts when it names Python or runs a .py file.
local RUNS_ARGUMENTS = {
  exec = { ["-a"] = true }, time = { ["-f"] = true, ["-o"] = true, ["--format"] = true, ["--output"] = true },
  nohup = {}, command = {}, builtin = {}, env = { ["-u"] = true, ["-C"] = true, ["--unset"] = true, ["--chdir"] = true,
  ["-S"] = true }, stdbuf = { ["-i"] = true, ["-o"] = true, ["-e"] = true }, nice = { ["-n"] = true },
  ionice = { ["-c"] = true, ["-n"] = true, ["-p"] = true }, setsid = {}, chrt = {}, eval = {}, bash = {}, sh = {},
  zsh = {}, dash = {}, ksh = {}, xargs = {}, parallel = {}, sudo = { ["-u"] = true, ["-g"] = true }, su = {},
  runuser = { ["-u"] = true }, flock = {}, watch = { ["-n"] = true }, unbuffer = {},
  strace = { ["-o"] = true, ["-e"] = true, ["-p"] = true }, valgrind = {}, nsys = {}, ncu = {}, perf = {}, gdb = {},
  catchsegv = {}, srun = {}, mpirun = {}, mpiexec = {}, timeout = {}, singularity = {}, apptainer = {}, enroot = {},
  podman = {}, docker = {}, numactl = {}, taskset = {}, ["do"] = {}, ["then"] = {}, ["else"] = {}, elif = {},
  ["if"] = {}, ["while"] = {}, ["until"] = {}, ["!"] = {}, coproc = {},
}

local function launcher_at(words, at)
  local kind, first = launcher_kind(words, at)
  if kind == nil then return nil end
  for j = first, #words do
    local word = words[j]
    if kind == "python" and word == "-c" then return nil end
    if kind == "python" and word == "-m" then return kind, words[j + 1] or "" end
    if string.sub(word, 1, 1) ~= "-" then return kind, word end
  end
  return kind, ""
end

local function skip_runner_options(words, i, takes_value)
  while i <= #words and string.sub(words[i], 1, 1) == "-" and words[i] ~= "-" do
    if takes_value[words[i]] then i = i + 2 else i = i + 1 end
  end
  return i
end

local function command_launcher(words)
  local i, runner = 1, false
  while i <= #words do
    local word = words[i]
    local base = base_of(word)
    if string.match(word, "^[%a_][%w_]*=") then
      i = i + 1
    elseif RUNS_ARGUMENTS[base] then
      runner, i = true, skip_runner_options(words, i + 1, RUNS_ARGUMENTS[base])
    else
      break
    end
  end
  if i > #words then return nil end
  local kind, program = launcher_at(words, i)
  local variable = string.find(words[i], "$", 1, true) ~= nil
  if kind or (not runner and not variable) then return kind, program end
  if variable then
    local py_file = false
    for j = i + 1, #words do
      if string.sub(words[j], -3) == ".py" then py_file = true end
    end
    local lowered = string.lower(words[i])
    if string.find(lowered, "py", 1, true) or string.find(lowered, "torch", 1, true)
        or string.find(lowered, "accel", 1, true) or string.find(lowered, "deepspeed", 1, true) or py_file then
      for j = i + 1, #words do
        if string.sub(words[j], 1, 1) ~= "-" then return "python", words[j] end
      end
      return "python", ""
    end
    return nil
  end
  for at = i, #words do
    kind, program = launcher_at(words, at)
    if kind or is_python(words[at]) then return kind, program end
  end
  return nil
end

function lib.unclassified_launch(script, policy)
  for _, entry in ipairs(code_lines(script, "")) do
    local number, stripped = entry[1], entry[2]
    local code = string.gsub(string.gsub(stripped, "%s#.*$", ""), "[\\\"']", "")
    for command in string.gmatch(code .. ";", "([^;&|(){}`]*)[;&|(){}`]") do
      local words = {}
      for word in string.gmatch(command, "%S+") do words[#words + 1] = word end
      if counts(policy, command_launcher(words)) then return "line " .. number .. ": " .. stripped end
    end
  end
  return nil
end

function lib.training_line(script, policy)
  if script == nil then return nil end
  local first = string.match(string.match(script, "^[^\n]*"), "^%s*(.-)%s*$")
  if contains(policy.launchers, "python") and python_shebang(first) then return "line 1: " .. first end
  for _, entry in ipairs(code_lines(script, " ")) do
    local number, stripped = entry[1], entry[2]
    for _, needle in ipairs(policy.training_commands) do
      if string.find(stripped, needle, 1, true) then return "line " .. number .. ": " .. stripped end
    end
    local code = string.gsub(stripped, "%s#.*$", "")
    for command in string.gmatch(code .. ";", "([^;&|]+)[;&|]+") do
      local words = words_of(command)
      if counts(policy, launcher_of(words)) or counts(policy, lib.wrapped_launcher(words)) then
        return "line " .. number .. ": " .. stripped
      end
    end
  end
  return lib.unclassified_launch(script, policy)
end

function lib.reject_message(why, policy)
  return "guarded-sbatch: this training job (" .. why .. ") did not go through the launch pre-flight, "
    .. "which this site requires; submit it with `" .. policy.how_to_submit .. "`"
end

function lib.tag_text(existing, why, policy)
  local tag = policy.tag .. " (" .. why .. ")"
  if existing == nil or existing == "" then return tag end
  return existing .. " " .. tag
end

function lib.dir_of(source)
  local path = string.gsub(source or "", "^@", "")
  return string.match(path, "^(.*)/[^/]*$") or "."
end

return lib
