package agent

import (
	"errors"
	"net/http"
	"strings"

	"einsora.dev/edge/hubclient"
)

// simRefused returns the hub's one line when err is the hub refusing the
// sim driver (a hub started without --allow-sim): the owner must change
// the drivers or the hub, and backing off fixes nothing, so it is an error
// worth reading, not a retry note.
func simRefused(err error) (string, bool) {
	var he *hubclient.HubError
	if errors.As(err, &he) && he.Code == http.StatusForbidden && strings.Contains(he.Message, "sim driver") {
		return he.Message, true
	}
	return "", false
}
