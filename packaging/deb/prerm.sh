#!/bin/sh
# Stops the agent, never its workloads (KillMode=process), and keeps
# /var/lib/einsora-agent: the machine ID and its data outlive a reinstall.
set -e
if command -v systemctl >/dev/null 2>&1; then
	systemctl stop einsora-agent.service || true
	systemctl disable einsora-agent.service || true
fi
