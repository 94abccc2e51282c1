#!/usr/bin/env bash
# Makes `bazel` available: Debian's offline-capable bazel-bootstrap (Bazel 4.2.3)
# when no bazel is on PATH. Needs root or sudo for apt-get.
set -euo pipefail
if command -v bazel >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "installing Debian's bazel-bootstrap (Bazel 4.2.3)..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq bazel-bootstrap >/dev/null
command -v bazel
