#!/usr/bin/env bash
# Installs every Debian package Frenzy needs to build, test and run.
# Safe to run again; needs root (or sudo) on Debian 12.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build ccache pkg-config \
  clang libclang-rt-14-dev \
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  libsqlite3-dev libcpp-httplib-dev libboost-dev libssl-dev coinor-libcbc-dev python3 python3-torch \
  slurm-wlm slurmctld slurmd slurm-client munge procps \
  chromium chromium-driver python3-selenium fonts-liberation >/dev/null
# chromium (headless), its driver and Selenium: the browser tests of the dashboard and of the
# simulator's index.html; fonts-liberation so that pages render with real glyphs.
