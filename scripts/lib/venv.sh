# Sourced by scripts/demo and scripts/test: make .venv with the project installed, idempotently.
# Usage: ensure_venv [extra]   (extra: "test" installs the test dependencies too)
ensure_venv() {
  local repo extra python stamp
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  extra="${1:-}"
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
    "$python" -m venv "$repo/.venv"
  fi
  stamp="$repo/.venv/.installed-${extra:-main}"
  if [[ ! -f "$stamp" || "$repo/pyproject.toml" -nt "$stamp" ]]; then
    "$repo/.venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
    if [[ -n "$extra" ]]; then
      "$repo/.venv/bin/python" -m pip install -q --disable-pip-version-check -e "$repo[$extra]"
    else
      "$repo/.venv/bin/python" -m pip install -q --disable-pip-version-check -e "$repo"
    fi
    touch "$stamp"
  fi
  export PATH="$repo/.venv/bin:$PATH"
}

# The system tools the tests drive for real (tests/test_anywhere_*.py): tmux, and an sshd the tests start
# on a local port with a generated key. Installs only what is missing (Debian, as root); idempotent.
ensure_test_tools() {
  local missing=()
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
  { command -v sshd >/dev/null 2>&1 || [[ -x /usr/sbin/sshd ]]; } || missing+=(openssh-server)
  { command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1; } || missing+=(openssh-client)
  ((${#missing[@]} == 0)) && return 0
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    echo "guarded-sbatch: installing ${missing[*]} for the tests" >&2
    timeout 600 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "guarded-sbatch: the tests need ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
    return 1
  fi
}
