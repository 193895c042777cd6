# Sourced by scripts/demo, scripts/test and scripts/install: make .venv, the tool's own environment, with the
# project installed (always with its `cli` extra: everything the command-line tool uses), idempotently.
# Usage: ensure_venv [extra] [bytecode]   (extra: "test" installs the test dependencies too; bytecode: "compiled", the
# default, compiles every installed module at the install, "lazy" leaves each to be compiled where it is first
# imported: the suite imports a fraction of what the test extras install)
ensure_venv() {
  local repo extra python stamp bytecode
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  extra="${1:-}"
  bytecode="${2:-compiled}"
  if [[ -n "${GUARDED_SBATCH_VENV:-}" ]]; then  # an environment that has the project already (the demo's test)
    export PATH="$GUARDED_SBATCH_VENV/bin:$PATH"
    return 0
  fi
  python=""
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      python="$candidate"; break
    fi
  done
  if [[ -z "$python" ]]; then
    if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
      python=python3
    else
      echo "guarded-sbatch: Python >= 3.11 is needed; install it (Debian: apt-get install python3 python3-venv)" >&2
      return 1
    fi
  fi
  if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  if [[ ! -x "$repo/.venv/bin/python" ]]; then
    echo "guarded-sbatch: [setup 1/2] creating $repo/.venv" >&2
    "$python" -m venv "$repo/.venv"
  fi
  stamp="$repo/.venv/.installed-${extra:-main}"
  if [[ ! -f "$stamp" || "$repo/pyproject.toml" -nt "$stamp" ]]; then
    echo "guarded-sbatch: [setup 2/2] installing guarded-sbatch[cli${extra:+,$extra}] and its dependencies" >&2
    local log="$repo/.venv/install.log" pid
    install_project "$repo" "$repo[cli${extra:+,$extra}]" "$bytecode" >"$log" 2>&1 &
    pid=$!
    say_progress "$pid" "installing (the full log: $log)" &
    # a line per package from pip (Collecting: from an index, Processing: a local wheel or folder), a few
    # summary lines from uv
    tail --pid="$pid" -n +1 -F "$log" 2>/dev/null \
      | grep -E --line-buffered '^(Collecting|Processing|Building|Installing collected packages|Successfully|Resolved|Prepared|Installed|guarded-sbatch:)' \
      | sed -u 's/^Installing collected packages: \(.*\)$/Installing collected packages (about half a minute, no output meanwhile): \1/' >&2 \
      || true
    if ! wait "$pid"; then
      tail -n 20 "$log" >&2
      echo "guarded-sbatch: the install failed (full log: $log)" >&2
      return 1
    fi
    touch "$stamp"
    echo "guarded-sbatch: setup done" >&2
  fi
  write_command "$repo/.venv"
  # the project's own modules: the editable install leaves them uncompiled, and where PYTHONDONTWRITEBYTECODE is
  # set (this image sets it) every start of the tool would compile what it imports again (about as much CPU as the
  # start itself); compileall skips what is compiled already
  timeout 120 "$repo/.venv/bin/python" -m compileall -q -j 0 "$repo/wrapper/guarded_sbatch" >/dev/null 2>&1 || true
  export PATH="$repo/.venv/bin:$PATH"
}

# write_command VENV: the tool's one `guarded-sbatch` command, VENV/bin/guarded-sbatch, run by VENV's python
# (scripts/install links it onto PATH; the modulefile has its own, shims/guarded-sbatch). The package declares no
# console script, so a `pip install guarded-sbatch` into a user's environment puts no second guarded-sbatch on
# their PATH that would shadow this one. Rewritten only when it differs (after an install, or from an older one).
write_command() {
  local venv=$1 command="$1/bin/guarded-sbatch" text
  text="#!$venv/bin/python
# guarded-sbatch, the tool's command (scripts/lib/venv.sh writes it): this environment's python runs the tool
import sys
from guarded_sbatch.cli.entry import run
sys.exit(run())"
  if [[ -f "$command" && "$(<"$command")" == "$text" ]]; then
    return 0
  fi
  printf '%s\n' "$text" >"$command.new.$$"
  chmod 755 "$command.new.$$"
  mv -f "$command.new.$$" "$command"
}

# say_progress PID WHAT: while PID runs, a line every 10 s (the first at 5 s) with the time so far: every wait says
# how it goes, also between pip's lines (a large wheel downloads for a minute without one)
say_progress() {
  local pid=$1 what=$2 started=$SECONDS next=5
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( SECONDS - started >= next )) && kill -0 "$pid" 2>/dev/null; then
      echo "guarded-sbatch: still $what: $((SECONDS - started)) s so far" >&2
      next=$((next + 10))
    fi
  done
  return 0
}

# install_project REPO SPEC [BYTECODE]: SPEC (the project, editable, with its extras) into REPO/.venv. uv installs it
# faster than pip (downloads in parallel, bytecode compiled on every core: about 37 s against 57 s for the test
# extras here); BYTECODE "lazy" skips that compile (about 45 s of CPU for some 19 000 modules, most never imported);
# it reads pip's find-links (where a site keeps wheels such as the CPU torch) and CA bundle. pip remains the
# fallback: no uv wheel for this platform, an index only pip is configured for.
install_project() {
  local repo=$1 spec=$2 python="$1/.venv/bin/python" link cert args=() compile=(--compile-bytecode)
  [[ "${3:-compiled}" == lazy ]] && compile=()
  for link in ${PIP_FIND_LINKS:-$("$python" -m pip config get global.find-links 2>/dev/null || true)}; do
    args+=(--find-links "$link")
  done
  cert="${PIP_CERT:-$("$python" -m pip config get global.cert 2>/dev/null || true)}"
  [[ -n "$cert" ]] && export SSL_CERT_FILE="$cert"
  if timeout 300 "$python" -m pip install -q --disable-pip-version-check uv &&
     timeout 1800 "$repo/.venv/bin/uv" pip install "${compile[@]}" --python "$python" "${args[@]}" -e "$spec"; then
    return 0
  fi
  echo "guarded-sbatch: uv could not install it; installing with pip"
  timeout 3600 "$python" -m pip install --disable-pip-version-check --progress-bar off -e "$spec"
}

# The system tools the tests drive for real (tests/test_anywhere_*.py): tmux, and an sshd the tests start
# on a local port with a generated key. Installs only what is missing (Debian, as root); idempotent.
ensure_test_tools() {
  local missing=()
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
  { command -v sshd >/dev/null 2>&1 || [[ -x /usr/sbin/sshd ]]; } || missing+=(openssh-server)
  { command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1; } || missing+=(openssh-client)
  command -v setfacl >/dev/null 2>&1 || missing+=(acl)  # the shared-cluster tests' folders with default ACLs
  ((${#missing[@]} == 0)) && return 0
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    echo "guarded-sbatch: installing ${missing[*]} for the tests" >&2
    timeout 600 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "guarded-sbatch: the tests need ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
    return 1
  fi
}
