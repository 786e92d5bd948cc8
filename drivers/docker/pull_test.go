package docker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/volume"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/protocol"
)

// fakeEngine answers the few Engine API calls a pull-then-run makes, so
// the background pull can be tested without a registry. Its pull reports
// one of two layers, then waits for release.
type fakeEngine struct {
	pullErr   string        // pull fails with this message
	release   chan struct{} // closed to let the pull finish
	cancelled chan struct{} // closed when a pull's client goes away

	mu        sync.Mutex
	hasImage  bool
	volumes   map[string]map[string]string
	container *fakeContainer
}

type fakeContainer struct {
	name    string
	labels  map[string]string
	running bool
}

const fakeID = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"

var apiVersionPrefix = regexp.MustCompile(`^/v[0-9.]+`)

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Api-Version", "1.41")
	p := apiVersionPrefix.ReplaceAllString(r.URL.Path, "")
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case p == "/_ping":
		w.WriteHeader(http.StatusOK)
	case p == "/volumes/create":
		var req volume.CreateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if f.volumes[req.Name] == nil {
			f.volumes[req.Name] = req.Labels
		}
		writeJSON(w, http.StatusCreated, volume.Volume{Name: req.Name, Labels: f.volumes[req.Name]})
	case strings.HasPrefix(p, "/volumes/"):
		name := strings.TrimPrefix(p, "/volumes/")
		labels, ok := f.volumes[name]
		switch {
		case !ok:
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such volume"})
		case r.Method == http.MethodDelete:
			delete(f.volumes, name)
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, http.StatusOK, volume.Volume{Name: name, Labels: labels})
		}
	case p == "/images/create":
		f.mu.Unlock()
		f.pull(w, r)
		f.mu.Lock()
	case p == "/containers/create":
		if !f.hasImage {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "No such image"})
			return
		}
		var req container.CreateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.container = &fakeContainer{name: r.URL.Query().Get("name"), labels: req.Labels}
		writeJSON(w, http.StatusCreated, container.CreateResponse{ID: fakeID})
	case p == "/containers/"+fakeID+"/start":
		f.container.running = true
		w.WriteHeader(http.StatusNoContent)
	case p == "/containers/json":
		var list []container.Summary
		if c := f.container; c != nil {
			list = append(list, container.Summary{ID: fakeID, Names: []string{"/" + c.name}, Labels: c.labels, State: c.state()})
		}
		writeJSON(w, http.StatusOK, list)
	case strings.HasPrefix(p, "/containers/") && strings.HasSuffix(p, "/json"):
		ref := strings.TrimSuffix(strings.TrimPrefix(p, "/containers/"), "/json")
		c := f.container
		if c == nil || (ref != fakeID && ref != c.name) {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "No such container"})
			return
		}
		writeJSON(w, http.StatusOK, container.InspectResponse{
			ID: fakeID, Name: "/" + c.name,
			Config: &container.Config{Labels: c.labels},
			State:  &container.State{Status: c.state(), Running: c.running},
		})
	default:
		writeJSON(w, http.StatusNotImplemented, map[string]string{"message": "fake engine: " + r.Method + " " + p})
	}
}

func (c *fakeContainer) state() container.ContainerState {
	if c.running {
		return container.StateRunning
	}
	return container.StateCreated
}

func (f *fakeEngine) pull(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	send := func(m string) {
		_, _ = w.Write([]byte(m + "\n"))
		w.(http.Flusher).Flush()
	}
	send(`{"status":"Pulling from library/app","id":"latest"}`)
	send(`{"status":"Pulling fs layer","id":"a"}`)
	send(`{"status":"Pulling fs layer","id":"b"}`)
	send(`{"status":"Pull complete","id":"a"}`)
	select {
	case <-f.release:
	case <-r.Context().Done():
		close(f.cancelled)
		return
	}
	if f.pullErr != "" {
		send(`{"errorDetail":{"message":"` + f.pullErr + `"},"error":"` + f.pullErr + `"}`)
		return
	}
	send(`{"status":"Pull complete","id":"b"}`)
	f.mu.Lock()
	f.hasImage = true
	f.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func TestBackgroundPull(t *testing.T) {
	tests := []struct {
		name      string
		pullErr   string
		stopEarly bool
		want      drivers.Instance
	}{
		{name: "pull_then_run", want: drivers.Instance{State: drivers.StateRunning, Attempt: 2}},
		{name: "pull_fails", pullErr: "manifest unknown", want: drivers.Instance{
			State: drivers.StateFailed, Attempt: 2, Code: protocol.CodeImageUnavailable,
			Detail: "pull registry.example/app:1: manifest unknown",
		}},
		{name: "stop_cancels_pull", stopEarly: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEngine{
				pullErr: tt.pullErr, release: make(chan struct{}), cancelled: make(chan struct{}),
				volumes: make(map[string]map[string]string),
			}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			d, err := New(Options{Host: "tcp://" + srv.Listener.Addr().String(), Logger: newTestDriverLogger()})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { d.Close() })
			w := "pulled"
			spec := drivers.Spec{Workload: w, Attempt: 1, Image: "registry.example/app:1"}

			t0 := time.Now()
			mustStart(t, d, spec)
			if el := time.Since(t0); el > time.Second {
				t.Errorf("Start took %v, want it not to wait for the pull", el)
			}
			inst := waitInstance(t, d, w, "pull progress", func(inst drivers.Instance, found bool) bool {
				return found && inst.Progress == "pulling: 1/2 layers"
			})
			if inst.State != drivers.StateStarting {
				t.Errorf("during pull: got state %s, want starting", inst.State)
			}
			// A Start during the pull only records the attempt.
			spec.Attempt = 2
			mustStart(t, d, spec)

			if tt.stopEarly {
				if err := d.Stop(testCtx(t), w); err != nil {
					t.Fatalf("Stop: %v", err)
				}
				select {
				case <-f.cancelled:
				case <-time.After(5 * time.Second):
					t.Fatalf("pull not cancelled by Stop")
				}
				if inst, found := listed(t, d, w); found {
					t.Errorf("after Stop during pull: got %+v, want unlisted", inst)
				}
				f.mu.Lock()
				made := f.container != nil
				f.mu.Unlock()
				if made {
					t.Errorf("after Stop during pull: got a container, want none")
				}
				return
			}
			close(f.release)
			got := waitInstance(t, d, w, string(tt.want.State), func(inst drivers.Instance, found bool) bool {
				return found && inst.State == tt.want.State
			})
			tt.want.Workload = w
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
