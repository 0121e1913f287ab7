#!/usr/bin/env bash
# Run lbtrain on a Cloud TPU VM slice: `scripts/tpu_launch.sh --help`, docs/cloud_tpu.md. The launcher is
# scripts/tpu_launch.py (standard library only, any python3 >= 3.8 on the machine you launch from).
exec python3 "$(dirname "$0")/tpu_launch.py" "$@"
