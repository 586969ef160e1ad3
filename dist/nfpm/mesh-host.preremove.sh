#!/bin/sh
# Stop the launcher before its binary goes. The services it started run in
# sessions of their own and keep running; its state dir stays.
set -e
# Only on removal: an upgrade (deb: "upgrade", rpm: 1) keeps it running.
case "$1" in
  remove|0)
    if [ -d /run/systemd/system ]; then
      systemctl disable --now mesh-host.service >/dev/null 2>&1 || true
    fi
    ;;
esac
