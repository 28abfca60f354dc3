#!/usr/bin/env bash
# Set up .venv and run Dreamkeeper on its embedded defaults.
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/dreamkeeper dev --demo "$@"
