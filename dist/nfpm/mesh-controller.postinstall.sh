#!/bin/sh
# The controller's user first (sysusers.d), then the unit is known; it is
# not started: it needs its settings (/etc/mesh-controller/env) first.
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers mesh-controller.conf
elif ! id mesh-controller >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/mesh-controller --shell /usr/sbin/nologin mesh-controller
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
