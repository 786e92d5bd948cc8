package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"einsora.dev/edge/hub/adminapi"
	"einsora.dev/edge/hub/dashboard"
	"einsora.dev/edge/internal/cli"
)

func dashboardCmd(g *globals) *cobra.Command {
	var noOpen bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Print a one-time sign-in link to the hub's web dashboard, and open it",
		Long: `Ask the hub for a one-time sign-in link to its web dashboard (valid 5 minutes), print it,
and open it in a browser when one can be started (xdg-open, open). The dashboard is on the
admin listener; sign in there with the admin token instead if you prefer.`,
		Args: cli.Args(cobra.NoArgs),
	}
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "only print the link")
	cmd.RunE = run(g, func(ctx context.Context, c *adminapi.Client) error {
		link, err := signInLink(ctx, c)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), link)
		if !noOpen {
			if err := openBrowser(link); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "open the link in a browser (%v); it signs in once, within 5 minutes\n", err)
			}
		}
		return nil
	})
	return cmd
}

func signInLink(ctx context.Context, c *adminapi.Client) (string, error) {
	base := strings.TrimSuffix(c.BaseURL, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+dashboard.LinkPath, nil)
	if err != nil {
		return "", fmt.Errorf("dashboard link: %w (check --hub)", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("dashboard link: %w (is the hub running at %s?)", err, base)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("dashboard link: the hub answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var out dashboard.LinkResponse
	if err := json.Unmarshal(body, &out); err != nil || !strings.HasPrefix(out.Path, dashboard.Prefix) {
		return "", fmt.Errorf("dashboard link: unexpected answer %q: %w", body, err)
	}
	return base + out.Path, nil
}

// openBrowser starts the desktop's browser on link, without waiting for it.
func openBrowser(link string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("no %s here", name)
	}
	cmd := exec.Command(path, link)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	go cmd.Wait()
	return nil
}
