#!/usr/bin/env bash
# lbtrain worker helper, installed by scripts/tpu_launch.py on every TPU VM worker.
#   setup ID COMMIT PYTHON JAX EXTRAS KEEP
#       unpack ~/lbtrain-ID.tar.gz (the code at COMMIT) into ~/lbtrain/launches/ID/src; install uv,
#       a Python of its own and lbtrain into ~/lbtrain/env, unless it holds COMMIT installed with
#       the same PYTHON, JAX and EXTRAS already (log: .../ID/install.log)
#   start ID [NAME=VALUE]... -- ARGS
#       end stale TPU holders, start `lbtrain ARGS` detached (log: .../ID/run.log)
#   follow ID|latest
#       print the run's log until it ends; exit with the run's exit code
#   stop GRACE
#       SIGTERM to the live run's process group, SIGKILL after GRACE seconds
#   wait | status [--json] | id
#       wait for no live run | print the live (else latest) launch's state, --json: as one line
#       "lbtrain-status {...}" | print the latest launch's id
# The record of a launch is its folder: launch_id, commit (setup), workdir (start), pid (its start),
# exit_code (its end). A run is live while the process it started (pid and start time in
# .../ID/pid) runs and has not written .../ID/exit_code. Exit 3 = a run is live (nothing was
# started). ~/lbtrain/env is the environment every launch runs in: src, venv, and spec and commit,
# written once its install succeeded.
set -uo pipefail
ROOT="$HOME/lbtrain"
LAUNCHES="$ROOT/launches"
INSTALL="$ROOT/env"
STATUS_MARKER="lbtrain-status"
# Where the TPU chips appear (v2-v4: /dev/accel*; v5e and later: /dev/vfio/N) and libtpu's lock
# file.
TPU_DEVICES="${LBTRAIN_TPU_DEVICES:-/dev/accel* /dev/vfio/[0-9]*}"
LIBTPU_LOCKFILE="${LBTRAIN_LIBTPU_LOCKFILE:-/tmp/libtpu_lockfile}"
HOST="$(hostname)"
# other users' processes can hold the TPU: look and end them as root where sudo needs no password
SUDO=""
if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi

say() { printf '%s: %s\n' "$HOST" "$*"; }

json_str() {  # json_str VALUE: VALUE as a JSON string, null when empty
  local s=$1
  [ -n "$s" ] || { printf null; return; }
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//[$'\001'-$'\037']/ }  # control characters (none expected in ids, commits, paths)
  printf '"%s"' "$s"
}

# the commit of the environment in ~/lbtrain/env, if its install succeeded (written last)
installed_commit() {
  [ -x "$INSTALL/venv/bin/lbtrain" ] && cat "$INSTALL/commit" 2>/dev/null
}

stat_field() {  # stat_field PID N: field N of /proc/PID/stat (field 2, the name, may hold spaces)
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  read -r -a fields <<<"${stat##*) }"  # fields 3, 4, ...
  [ "$2" -ge 3 ] && printf '%s\n' "${fields[$(($2 - 3))]}"
}

# running PID: the process exists and is not a zombie (one that has ended holds nothing open)
running() {
  local state
  state=$(stat_field "$1" 3) && [ "$state" != Z ]
}

is_live() {  # is_live DIR
  local pid start
  [ -f "$1/pid" ] && [ ! -f "$1/exit_code" ] || return 1
  read -r pid start <"$1/pid" || return 1
  [ -n "$pid" ] && [ "$(stat_field "$pid" 22)" = "$start" ] && running "$pid"
}

live_launches() {
  local d
  for d in "$LAUNCHES"/*/; do
    [ -d "$d" ] && is_live "${d%/}" && printf '%s\n' "$(basename "$d")"
  done
  return 0
}

launch_dir() {  # launch_dir ID|latest
  local id=$1
  if [ "$id" = latest ]; then
    [ -L "$ROOT/latest" ] || { say "no launch on this worker" >&2; return 2; }
    id=$(basename "$(readlink "$ROOT/latest")")
  fi
  [ -d "$LAUNCHES/$id" ] || { say "no launch $id on this worker" >&2; return 2; }
  printf '%s\n' "$LAUNCHES/$id"
}

# refuse_if_live [ID]: exit 3 when a run is live (and drop launch ID's copied files)
refuse_if_live() {
  local live id pid
  live=$(live_launches)
  [ -z "$live" ] && return 0
  for id in $live; do
    read -r pid _ <"$LAUNCHES/$id/pid"
    say "launch $id is live here (pid $pid, log ~/lbtrain/launches/$id/run.log):" \
      "not starting another"
  done
  [ -n "${1:-}" ] && rm -f "$HOME/lbtrain-$1.tar.gz" "$HOME/lbtrain-$1-worker.sh"
  exit 3
}

# prune KEEP CURRENT: remove launch folders beyond the KEEP newest others; never a live one
prune() {
  local keep=$1 current=$2 n=0 d id
  for d in $(ls -1d "$LAUNCHES"/*/ 2>/dev/null | sort -r); do
    d=${d%/}
    id=${d##*/}
    [ "$id" = "$current" ] && continue
    n=$((n + 1))
    [ "$n" -le "$keep" ] && continue
    is_live "$d" && continue
    rm -rf "$d" && say "pruned old launch $id"
  done
}

install_env() {  # install_env DIR PYTHON JAX EXTRAS
  local dir=$1 python=$2 jax=$3 extras=$4 uv="$HOME/.local/bin/uv" project
  if [ ! -x "$uv" ]; then
    uv=$(command -v uv || true)
  fi
  if [ -z "$uv" ]; then
    echo "installing uv into ~/.local/bin"
    curl -LsSf https://astral.sh/uv/install.sh \
      | env UV_INSTALL_DIR="$HOME/.local/bin" UV_NO_MODIFY_PATH=1 sh || return 1
    uv="$HOME/.local/bin/uv"
  fi
  # a Python that uv downloads and manages, never the image's own (3.10 on the Ubuntu 22.04 images)
  "$uv" venv --python "$python" --python-preference only-managed "$dir/venv" || return 1
  project="$dir/src"
  [ -n "$extras" ] && project="$dir/src[$extras]"
  "$uv" pip install --python "$dir/venv/bin/python" "$jax" -e "$project" || return 1
  # the versions installed (importing jax here would cost seconds per launch; the run imports it
  # first thing)
  "$dir/venv/bin/python" -c 'import sys; from importlib.metadata import version as v
print("python", sys.version.split()[0], "jax", v("jax"), "lbtrain", v("lbtrain"))'
}

cmd_setup() {  # setup ID COMMIT PYTHON JAX EXTRAS KEEP
  local id=$1 commit=$2 python=$3 jax=$4 extras=$5 keep=$6
  local dir="$LAUNCHES/$id" spec had why rc
  refuse_if_live "$id"
  mkdir -p "$dir/src" "$ROOT/bin" || exit 1
  tar -xzf "$HOME/lbtrain-$id.tar.gz" -C "$dir/src" || {
    say "could not unpack ~/lbtrain-$id.tar.gz"
    exit 1
  }
  rm -f "$HOME/lbtrain-$id.tar.gz"
  # later commands call ~/lbtrain/bin/lbtrain-worker: replace it by a rename, so a copy still being
  # read by a running bash keeps its file
  cp "$HOME/lbtrain-$id-worker.sh" "$ROOT/bin/.lbtrain-worker.$id" \
    && mv -f "$ROOT/bin/.lbtrain-worker.$id" "$ROOT/bin/lbtrain-worker"
  mv -f "$HOME/lbtrain-$id-worker.sh" "$dir/worker.sh"
  printf '%s\n' "$id" >"$dir/launch_id"
  printf '%s\n' "$commit" >"$dir/commit"
  ln -sfn "launches/$id" "$ROOT/latest"
  prune "$keep" "$id"
  # a launch of the commit already installed, with the same Python, JAX and extras, reuses it
  spec="python $python, $jax, lbtrain[$extras]"
  had=$(installed_commit)
  if [ "$had" = "$commit" ] && [ "$(cat "$INSTALL/spec" 2>/dev/null)" = "$spec" ]; then
    echo "install skipped: ~/lbtrain/env holds commit $commit ($spec)" >"$dir/install.log"
    say "launch $id: install skipped: ~/lbtrain/env holds this commit (${commit:0:12})" \
      "with the same Python, JAX and extras ($(cat "$INSTALL/versions" 2>/dev/null))"
    return 0
  fi
  if [ -z "$had" ]; then why="none installed"
  elif [ "$had" != "$commit" ]; then why="it held commit ${had:0:12}"
  else why="it held $(cat "$INSTALL/spec" 2>/dev/null)"
  fi
  say "launch $id: installing commit ${commit:0:12} into ~/lbtrain/env ($why)"
  # no commit file until the install succeeds: a half-built environment is never reused
  rm -rf "$INSTALL" && mkdir -p "$INSTALL/src" && cp -a "$dir/src/." "$INSTALL/src/" || {
    say "could not prepare ~/lbtrain/env"
    exit 1
  }
  install_env "$INSTALL" "$python" "$jax" "$extras" >"$dir/install.log" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    say "install failed (exit $rc); the end of ~/lbtrain/launches/$id/install.log:"
    tail -n 15 "$dir/install.log" | sed "s/^/$HOST:   /"
    exit 1
  fi
  tail -n 1 "$dir/install.log" >"$INSTALL/versions"
  printf '%s\n' "$spec" >"$INSTALL/spec"
  printf '%s\n' "$commit" >"$INSTALL/commit"
  say "launch $id: installed ($(cat "$INSTALL/versions")) in ~/lbtrain/env"
}

# end processes holding the TPU that are not a live run, and remove libtpu's stale lock
clear_stale() {
  local patterns p expr=() pids pid pgid live_pgids="" id cmd
  set -f
  patterns=($TPU_DEVICES)
  set +f
  for p in "${patterns[@]}"; do
    [ ${#expr[@]} -gt 0 ] && expr+=(-o)
    expr+=(-lname "$p")
  done
  for id in $(live_launches); do
    live_pgids="$live_pgids $(cut -d' ' -f1 "$LAUNCHES/$id/pid")"
  done
  pids=$($SUDO find /proc/[0-9]*/fd -maxdepth 1 -type l \( "${expr[@]}" \) -printf '%h\n' \
    2>/dev/null | cut -d/ -f3 | sort -u)
  for pid in $pids; do
    pgid=$(stat_field "$pid" 5) || continue
    case " $live_pgids " in *" $pgid "*) continue ;; esac
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)
    say "ending stale process $pid holding the TPU: $cmd"
    $SUDO kill -TERM "$pid" 2>/dev/null
  done
  for pid in $pids; do
    for _ in $(seq 20); do running "$pid" || break; sleep 0.5; done
    running "$pid" && $SUDO kill -KILL "$pid" 2>/dev/null
  done
  if [ -z "$live_pgids" ] && [ -e "$LIBTPU_LOCKFILE" ]; then
    $SUDO rm -f "$LIBTPU_LOCKFILE" && say "removed a stale $LIBTPU_LOCKFILE"
  fi
  return 0
}

cmd_start() {  # start ID [NAME=VALUE]... -- ARGS...
  local id=$1 dir="$LAUNCHES/$1" envs=() q prev="" workdir=""
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  # another launch's setup may have installed another commit since this one's
  [ -n "$(installed_commit)" ] && [ "$(installed_commit)" = "$(cat "$dir/commit" 2>/dev/null)" ] || {
    say "launch $id is not installed here (~/lbtrain/env holds commit" \
      "$(installed_commit || echo none), not $(cat "$dir/commit" 2>/dev/null))"
    exit 1
  }
  refuse_if_live
  clear_stale
  for q in "$@"; do  # the run's workdir, for status
    case "$q" in --workdir=* | -workdir=*) workdir=${q#*=} ;; esac
    case "$prev" in --workdir | -workdir) workdir=$q ;; esac
    prev=$q
  done
  printf '%s\n' "$workdir" >"$dir/workdir"
  {
    echo '#!/usr/bin/env bash'
    echo "# launch $id, written by the lbtrain worker helper; started detached (setsid nohup) so" \
      "that it outlives"
    echo "# the ssh session. Its process group is the run: a stop sends SIGTERM to all of it."
    echo "cd $(printf '%q' "$dir/src") || exit 1  # configs/ paths are relative to the source"
    echo 'stat=$(cat /proc/$$/stat); rest=${stat##*) }; set -- $rest'
    echo "echo \"\$\$ \${20}\" >$(printf '%q' "$dir/pid.tmp")" \
      "&& mv $(printf '%q' "$dir/pid.tmp") $(printf '%q' "$dir/pid")"
    for q in "${envs[@]}"; do echo "export $(printf '%q' "$q")"; done
    echo "log=$(printf '%q' "$dir/run.log")"
    printf 'args=('; [ $# -gt 0 ] && printf '%q ' "$@"; echo ')'
    echo 'echo "== launch '"$id"' on $(hostname), $(date -u +%FT%TZ):' \
      'lbtrain ${args[*]} ==" >>"$log"'
    echo '# trapped (not ignored), so lbtrain keeps the default handlers; bash runs the trap when' \
      'lbtrain has ended'
    echo "trap 'echo \"== \$(date -u +%FT%TZ): signal received, lbtrain is stopping ==\"" \
      ">>\"\$log\"' TERM INT HUP"
    echo "$(printf '%q' "$INSTALL/venv/bin/lbtrain")"' "${args[@]}" >>"$log" 2>&1 </dev/null'
    echo 'rc=$?'
    echo 'echo "== $(date -u +%FT%TZ): lbtrain exited with $rc ==" >>"$log"'
    echo "echo \"\$rc\" >$(printf '%q' "$dir/exit_code.tmp")" \
      "&& mv $(printf '%q' "$dir/exit_code.tmp") $(printf '%q' "$dir/exit_code")"
    echo 'exit "$rc"'
  } >"$dir/run.sh"
  rm -f "$dir/pid" "$dir/exit_code"
  : >"$dir/run.log"
  setsid nohup bash "$dir/run.sh" >/dev/null 2>&1 </dev/null &
  for _ in $(seq 100); do [ -f "$dir/pid" ] && break; sleep 0.1; done
  [ -f "$dir/pid" ] || { say "the run did not start (no $dir/pid after 10 s)"; exit 1; }
  ln -sfn "launches/$id" "$ROOT/latest"
  say "started launch $id (pid $(cut -d' ' -f1 "$dir/pid")); log: ~/lbtrain/launches/$id/run.log"
}

cmd_follow() {
  local dir pid start rc
  dir=$(launch_dir "$1") || exit 2
  for _ in $(seq 100); do [ -f "$dir/pid" ] && break; sleep 0.1; done
  [ -f "$dir/pid" ] || { say "launch ${dir##*/} was installed but never started"; exit 1; }
  read -r pid start <"$dir/pid"
  if is_live "$dir"; then
    tail -n +1 -F --pid="$pid" -s 0.5 "$dir/run.log" 2>/dev/null
  else
    cat "$dir/run.log"
  fi
  for _ in $(seq 20); do [ -f "$dir/exit_code" ] && break; sleep 0.1; done
  rc=$(cat "$dir/exit_code" 2>/dev/null) || rc=""
  if [ -z "$rc" ]; then
    say "launch ${dir##*/} ended without recording an exit code (killed)"
    exit 137
  fi
  exit "$rc"
}

cmd_stop() {  # stop GRACE
  local grace=${1:-180} id dir pid ticks n any=0
  for id in $(live_launches); do
    any=1
    dir="$LAUNCHES/$id"
    read -r pid _ <"$dir/pid"
    say "stopping launch $id: SIGTERM to its processes (lbtrain checkpoints and exits)"
    kill -TERM -- "-$pid" 2>/dev/null
    ticks=$(awk -v g="$grace" 'BEGIN { printf "%d", g * 2 }')
    n=0
    while is_live "$dir" && [ "$n" -lt "$ticks" ]; do sleep 0.5; n=$((n + 1)); done
    if is_live "$dir"; then
      say "launch $id still running after $grace s: SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null
      sleep 0.5
      [ -f "$dir/exit_code" ] || {
        echo 137 >"$dir/exit_code"
        echo "== killed by stop after $grace s ==" >>"$dir/run.log"
      }
    fi
    say "launch $id ended: exit $(cat "$dir/exit_code" 2>/dev/null)"
  done
  [ "$any" = 1 ] || say "no live run"
  return 0
}

cmd_wait() {
  local live
  while live=$(live_launches) && [ -n "$live" ]; do sleep 5; done
  say "no live run"
}

launch_state() {  # launch_state DIR: running | ended | killed | installed | not installed
  if is_live "$1"; then echo running
  elif [ -f "$1/exit_code" ]; then echo ended
  elif [ -f "$1/pid" ]; then echo killed
  elif [ -n "$(installed_commit)" ] && [ "$(installed_commit)" = "$(cat "$1/commit" 2>/dev/null)" ]
  then echo installed
  else echo "not installed"
  fi
}

cmd_status() {  # status [--json]: the live launch, else the latest
  local dir="" id state live
  live=$(live_launches | tail -n 1)
  if [ -n "$live" ]; then dir="$LAUNCHES/$live"
  else dir=$(launch_dir latest 2>/dev/null) || dir=""
  fi
  if [ "${1:-}" = --json ]; then status_json "$dir"; return; fi
  [ -n "$dir" ] || { say "no launch on this worker"; return; }
  id=${dir##*/}
  state=$(launch_state "$dir")
  case "$state" in
    running) state="running (pid $(cut -d' ' -f1 "$dir/pid"))" ;;
    ended) state="ended: exit $(cat "$dir/exit_code")" ;;
    killed) state="ended without an exit code (killed)" ;;
    installed) state="installed, not started" ;;
    *) state="not installed (see ~/lbtrain/launches/$id/install.log)" ;;
  esac
  say "launch $id: $state; log ~/lbtrain/launches/$id/run.log;" \
    "~/lbtrain/env: commit $(installed_commit || echo none)"
}

status_json() {  # status_json DIR: one line for the launcher, the marker and a JSON object
  local dir=$1 id="" state="" pid="" rc="" commit="" workdir="" live=false line
  if [ -n "$dir" ]; then
    id=${dir##*/}
    state=$(launch_state "$dir")
    if [ "$state" = running ]; then live=true; read -r pid _ <"$dir/pid"; fi
    rc=$(cat "$dir/exit_code" 2>/dev/null)
    commit=$(cat "$dir/commit" 2>/dev/null)
    workdir=$(cat "$dir/workdir" 2>/dev/null)
  fi
  case "$pid" in '' | *[!0-9]*) pid=null ;; esac
  case "$rc" in '' | *[!0-9]*) rc=null ;; esac
  line="{\"host\":$(json_str "$HOST"),\"live\":$live,\"launch_id\":$(json_str "$id"),"
  line+="\"state\":$(json_str "$state"),\"pid\":$pid,\"exit_code\":$rc,"
  line+="\"commit\":$(json_str "$commit"),\"workdir\":$(json_str "$workdir"),"
  line+="\"installed_commit\":$(json_str "$(installed_commit)")}"
  # one write: the workers of a slice answer on one stream
  printf '%s %s\n' "$STATUS_MARKER" "$line"
}

verb=${1:-}
[ $# -gt 0 ] && shift
case "$verb" in
  setup) cmd_setup "$@" ;;
  start) cmd_start "$@" ;;
  follow) cmd_follow "${1:-latest}" ;;
  stop) cmd_stop "$@" ;;
  wait) cmd_wait ;;
  status) cmd_status "$@" ;;
  id) dir=$(launch_dir latest) || exit 2; printf '%s\n' "${dir##*/}" ;;
  *) echo "usage: lbtrain-worker setup|start|follow|stop|wait|status|id ..." >&2; exit 2 ;;
esac
