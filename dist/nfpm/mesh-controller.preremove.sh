#!/bin/sh
# Stop the controller before its binary goes; its data dir stays.
set -e
# Only on removal: an upgrade (deb: "upgrade", rpm: 1) keeps it running.
case "$1" in
  remove|0)
    if [ -d /run/systemd/system ]; then
      systemctl disable --now mesh-controller.service >/dev/null 2>&1 || true
    fi
    ;;
esac
