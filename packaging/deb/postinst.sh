#!/bin/sh
# Enabled, not started: the agent needs `einsora-agent enroll` first.
set -e
install -d -m 0700 /var/lib/einsora-agent
if command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload || true
	systemctl enable einsora-agent.service || true
fi
echo "einsora-agent installed. Enrol it with: sudo einsora-agent enroll --hub https://HUB:8443 --token TOKEN --state-dir /var/lib/einsora-agent && sudo systemctl start einsora-agent"
