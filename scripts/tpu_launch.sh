#!/usr/bin/env bash
# Launch an lbtrain run on a Cloud TPU VM: create it (or use an existing one), copy this repository,
# install jax[tpu] and lbtrain on every worker, run the config on all workers with the output streamed
# here, and optionally delete the VM afterwards.
#
#   scripts/tpu_launch.sh --name=lb-v4 --zone=us-central2-b --accelerator=v4-32 --create --delete \
#       -- --config=configs/ptb_lstm.py:size=large,batch=1280,scheme=legw --workdir=gs://BUCKET/ptb_large
#   scripts/tpu_launch.sh --name=lb-v4 --zone=us-central2-b --dry-run -- --config=configs/mnist_lstm.py ...
#
# Flags: --name (required), --zone (required), --project, --accelerator (default v4-8),
# --version (TPU VM image, default tpu-ubuntu2204-base), --create, --spot, --delete,
# --dry-run (print every gcloud command instead of running it). Everything after `--` goes to `lbtrain`.
set -euo pipefail

name="" zone="" project="" accelerator="v4-8" version="tpu-ubuntu2204-base"
create=0 spot=0 delete=0 dry_run=0
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name=*) name="${1#*=}" ;;
    --zone=*) zone="${1#*=}" ;;
    --project=*) project="${1#*=}" ;;
    --accelerator=*) accelerator="${1#*=}" ;;
    --version=*) version="${1#*=}" ;;
    --create) create=1 ;;
    --spot) spot=1 ;;
    --delete) delete=1 ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "tpu_launch.sh: error: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$name" ] || { echo "tpu_launch.sh: error: --name=TPU_NAME is required" >&2; exit 2; }
[ -n "$zone" ] || { echo "tpu_launch.sh: error: --zone=ZONE is required" >&2; exit 2; }
[ $# -gt 0 ] || { echo "tpu_launch.sh: error: give the lbtrain arguments after --, e.g. -- --config=configs/mnist_lstm.py --workdir=gs://B/run" >&2; exit 2; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
common=(--zone="$zone")
[ -n "$project" ] && common+=(--project="$project")
quote() {  # a shell word: as is when safe, else single-quoted
  if [[ "$1" =~ ^[A-Za-z0-9_=:,./@%+-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
lbtrain_args=""
for a in "$@"; do lbtrain_args+=" $(quote "$a")"; done

run() {  # print (copy-pasteable), and unless --dry-run, execute
  local line="" a
  for a in "$@"; do line+="$(quote "$a") "; done
  echo "${line% }"
  [ "$dry_run" = 1 ] || "$@"
}

archive="${TMPDIR:-/tmp}/lbtrain-src.tar.gz"
if [ "$create" = 1 ]; then
  extra=()
  [ "$spot" = 1 ] && extra+=(--spot)
  run gcloud compute tpus tpu-vm create "$name" "${common[@]}" --accelerator-type="$accelerator" --version="$version" "${extra[@]}"
fi
run git -C "$repo" archive --format=tar.gz --output="$archive" HEAD
run gcloud compute tpus tpu-vm scp "$archive" "$name:~/lbtrain-src.tar.gz" "${common[@]}" --worker=all
run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all --command \
  "rm -rf ~/lbtrain && mkdir -p ~/lbtrain && tar -xzf ~/lbtrain-src.tar.gz -C ~/lbtrain && cd ~/lbtrain && pip install -q 'jax[tpu]' -e '.[offline,gcs]'"
# On TPU VMs JAX discovers the slice's hosts itself; the output of every worker is streamed here.
status=0
run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all --command \
  "cd ~/lbtrain && PATH=\$HOME/.local/bin:\$PATH lbtrain$lbtrain_args" || status=$?
if [ "$delete" = 1 ]; then
  run gcloud compute tpus tpu-vm delete "$name" "${common[@]}" --quiet
fi
exit "$status"
