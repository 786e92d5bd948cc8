# Homebrew formula for the Einsora node agent: a template. `make formula
# URL=... VERSION=...` renders it into dist/einsora-agent.rb with the real
# url and sha256 (scripts/render-formula.sh).
class EinsoraAgent < Formula
  desc "Node agent that runs Einsora workloads on this Mac"
  homepage "https://einsora.dev"
  url "@@URL@@"
  version "@@VERSION@@"
  sha256 "@@SHA256@@"
  license "Apache-2.0"

  depends_on "go" => :build
  depends_on :macos

  def install
    # The vz driver is the cgo shim over Virtualization.framework; it needs
    # cgo at build time and the virtualization entitlement at run time.
    ENV["CGO_ENABLED"] = "1"
    ldflags = "-s -w -X main.version=#{version}"
    system "go", "build", *std_go_args(ldflags:, output: bin/"einsora-agent"), "./cmd/einsora-agent"
    system "codesign", "--force", "--sign", "-", "--entitlements",
           "packaging/homebrew/einsora-agent.entitlements", bin/"einsora-agent"

    # The system daemon's plist, with this prefix (/opt/homebrew on Apple
    # silicon, /usr/local on Intel) in its paths.
    inreplace "packaging/launchd/dev.einsora.agent.plist", "@@PREFIX@@", HOMEBREW_PREFIX
    (share/"einsora-agent").install "packaging/launchd/dev.einsora.agent.plist"
  end

  # `sudo brew services start einsora-agent`: a system daemon, as root, on
  # the one state directory every command defaults to on macOS.
  # Docker: as root under launchd the agent has neither your shell's
  # DOCKER_HOST nor your home, so it finds only the system socket. To use
  # your Docker Desktop or Colima, name its socket in a config file
  # (docker_host: "unix:///Users/NAME/.docker/run/docker.sock" or
  # "unix:///Users/NAME/.colima/default/docker.sock") or with --docker-host.
  # `einsora-agent doctor` says which engine it found, and why.
  service do
    run [opt_bin/"einsora-agent", "run", "--state-dir", "/Library/Application Support/Einsora/agent"]
    require_root true
    keep_alive successful_exit: false
    log_path var/"log/einsora-agent.log"
    error_log_path var/"log/einsora-agent.log"
  end

  def caveats
    <<~EOS
      Enroll once, then start the daemon:
        sudo einsora-agent enroll --hub URL --token TOKEN
        sudo brew services start einsora-agent
      Both use /Library/Application Support/Einsora/agent. To install the
      daemon without brew services (it keeps VM helpers and native
      workloads alive across agent restarts with AbandonProcessGroup):
        sudo cp #{opt_share}/einsora-agent/dev.einsora.agent.plist /Library/LaunchDaemons/
        sudo launchctl bootstrap system /Library/LaunchDaemons/dev.einsora.agent.plist
    EOS
  end

  test do
    # Signed with the virtualization entitlement, or no VM starts.
    assert_match "com.apple.security.virtualization",
                 shell_output("codesign -d --entitlements - #{bin}/einsora-agent 2>&1")
    # Not enrolled in the test sandbox, so doctor exits 1; it must still run
    # every check and print a verdict for each.
    out = shell_output("#{bin}/einsora-agent doctor --state-dir #{testpath}/agent 2>&1", 1)
    assert_match(/^(ok|warn|fail)\s+\S/, out)
  end
end
