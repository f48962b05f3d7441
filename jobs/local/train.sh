#!/usr/bin/env bash
# The main job: train the default model on Fashion-MNIST on 2 local ranks.
# Until the trainer lands this sets up, builds and prints the version.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build/bin/lpsgd --version
