# Homebrew formula for the Einsora node agent. The release process fills in
# url and sha256; `brew services start einsora-agent` runs it under launchd.
class EinsoraAgent < Formula
  desc "Node agent that runs Einsora workloads on this Mac"
  homepage "https://einsora.dev"
  url "https://einsora.dev/releases/einsora-edge-VERSION.tar.gz"
  sha256 "SHA256"
  license "Apache-2.0"

  depends_on "go" => :build
  depends_on :macos

  def install
    # The vz driver needs cgo and the virtualization entitlement.
    ENV["CGO_ENABLED"] = "1"
    ldflags = "-s -w -X main.version=#{version}"
    system "go", "build", *std_go_args(ldflags:, output: bin/"einsora-agent"), "./cmd/einsora-agent"
    system "codesign", "--force", "--sign", "-", "--entitlements",
           "packaging/homebrew/einsora-agent.entitlements", bin/"einsora-agent"
  end

  # Docker: brew services runs the agent under launchd, without your shell's
  # DOCKER_HOST. The agent still finds your current docker context and the
  # Docker Desktop (~/.docker/run/docker.sock) and Colima
  # (~/.colima/default/docker.sock) sockets under your home; to name
  # another engine, add "--docker-host", "unix://#{Dir.home}/PATH" to run,
  # or docker_host to a config file. `einsora-agent doctor` says which.
  service do
    run [opt_bin/"einsora-agent", "run", "--state-dir", var/"einsora/agent"]
    keep_alive successful_exit: false
    log_path var/"log/einsora-agent.log"
    error_log_path var/"log/einsora-agent.log"
  end

  test do
    assert_match "einsora-agent", shell_output("#{bin}/einsora-agent --help")
    system bin/"einsora-agent", "inventory", "--json"
  end
end
