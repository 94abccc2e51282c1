#!/usr/bin/env bash
# Usage: tools/install_tool.sh COMMAND DEBIAN_PACKAGE
# Makes COMMAND available, installing DEBIAN_PACKAGE with apt-get when it is not
# on PATH (Bazel: Debian's offline-capable bazel-bootstrap, Bazel 4.2.3;
# valgrind). Needs root or sudo for apt-get.
set -euo pipefail
command_name=$1
package=$2
if command -v "$command_name" >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "installing Debian's $package..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$package" >/dev/null
command -v "$command_name"
