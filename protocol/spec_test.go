package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func goodSpec() WorkloadSpec {
	return WorkloadSpec{
		Command:   []string{"serve", "--port", "8080"},
		Env:       map[string]string{"GREETING": "hello world", "_X1": ""},
		SecretEnv: map[string]string{"TOKEN": "s3cr3t=value"},
		Ports:     []Port{{Host: 8080, Container: 80}, {Host: 53, Container: 53, Proto: "udp"}, {Host: 53, Container: 53, Proto: "tcp"}},
		Workdir:   "/srv/app",
		Volumes:   []Volume{{Name: "cache", Path: "/var/cache/app"}, {Name: "db.v2", Path: "/db"}},
		Restart:   &RestartPolicy{Policy: RestartOnFailure, Max: 3},
	}
}

func TestValidateAcceptsGoodSpecs(t *testing.T) {
	for _, s := range []WorkloadSpec{{}, goodSpec(), {Restart: &RestartPolicy{Policy: RestartAlways}}} {
		if err := s.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", s.Redacted(), err)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	long := strings.Repeat("a", 64)
	manyEnv := map[string]string{}
	for i := range MaxEnv + 1 {
		manyEnv[fmt.Sprintf("K%d", i)] = "v"
	}
	bigEnv := map[string]string{}
	for i := range 5 {
		bigEnv[fmt.Sprintf("K%d", i)] = strings.Repeat("v", MaxEnvValueBytes)
	}
	tests := []struct {
		name  string
		edit  func(s *WorkloadSpec)
		field string
	}{
		{"too many words", func(s *WorkloadSpec) { s.Command = make([]string, MaxCommandWords+1) }, "command"},
		{"long word", func(s *WorkloadSpec) { s.Command = []string{strings.Repeat("x", MaxWordBytes+1)} }, "command[0]"},
		{"control in command", func(s *WorkloadSpec) { s.Command = []string{"ok", "a\nb"} }, "command[1]"},
		{"invalid utf8", func(s *WorkloadSpec) { s.Command = []string{"\xff"} }, "command[0]"},
		{"env key digit", func(s *WorkloadSpec) { s.Env = map[string]string{"1A": "x"} }, "env"},
		{"env key dash", func(s *WorkloadSpec) { s.Env = map[string]string{"A-B": "x"} }, "env"},
		{"env key empty", func(s *WorkloadSpec) { s.Env = map[string]string{"": "x"} }, "env"},
		{"env key reserved", func(s *WorkloadSpec) { s.Env = map[string]string{"EINSORA_DATA": "x"} }, "env[EINSORA_DATA]"},
		{"env value control", func(s *WorkloadSpec) { s.Env = map[string]string{"A": "x\x1b[2J"} }, "env[A]"},
		{"env value long", func(s *WorkloadSpec) { s.Env = map[string]string{"A": strings.Repeat("v", MaxEnvValueBytes+1)} }, "env[A]"},
		{"env too many", func(s *WorkloadSpec) { s.Env = manyEnv }, "env"},
		{"env too big", func(s *WorkloadSpec) { s.Env = bigEnv }, "env"},
		{"secret also env", func(s *WorkloadSpec) { s.SecretEnv = map[string]string{"GREETING": "x"} }, "secret_env[GREETING]"},
		{"secret control", func(s *WorkloadSpec) { s.SecretEnv = map[string]string{"T": "a\tb"} }, "secret_env[T]"},
		{"host port 0", func(s *WorkloadSpec) { s.Ports[0].Host = 0 }, "ports[0].host"},
		{"host port big", func(s *WorkloadSpec) { s.Ports[0].Host = 65536 }, "ports[0].host"},
		{"container port", func(s *WorkloadSpec) { s.Ports[1].Container = -1 }, "ports[1].container"},
		{"proto", func(s *WorkloadSpec) { s.Ports[0].Proto = "sctp" }, "ports[0].proto"},
		{"dup host port", func(s *WorkloadSpec) { s.Ports = append(s.Ports, Port{Host: 8080, Container: 81, Proto: "tcp"}) }, "ports[3].host"},
		{"too many ports", func(s *WorkloadSpec) { s.Ports = make([]Port, MaxPorts+1) }, "ports"},
		{"workdir relative", func(s *WorkloadSpec) { s.Workdir = "srv" }, "workdir"},
		{"workdir dotdot", func(s *WorkloadSpec) { s.Workdir = "/srv/../etc" }, "workdir"},
		{"workdir unclean", func(s *WorkloadSpec) { s.Workdir = "/srv//app/" }, "workdir"},
		{"workdir colon", func(s *WorkloadSpec) { s.Workdir = "/a:b" }, "workdir"},
		{"volume name upper", func(s *WorkloadSpec) { s.Volumes[0].Name = "Cache" }, "volumes[0].name"},
		{"volume name slash", func(s *WorkloadSpec) { s.Volumes[0].Name = "a/b" }, "volumes[0].name"},
		{"volume name dot", func(s *WorkloadSpec) { s.Volumes[0].Name = ".." }, "volumes[0].name"},
		{"volume name long", func(s *WorkloadSpec) { s.Volumes[0].Name = long }, "volumes[0].name"},
		{"volume name dup", func(s *WorkloadSpec) { s.Volumes[1].Name = "cache" }, "volumes[1].name"},
		{"volume path dup", func(s *WorkloadSpec) { s.Volumes[1].Path = "/var/cache/app" }, "volumes[1].path"},
		{"volume path root", func(s *WorkloadSpec) { s.Volumes[1].Path = "/" }, "volumes[1].path"},
		{"volume path relative", func(s *WorkloadSpec) { s.Volumes[1].Path = "db" }, "volumes[1].path"},
		{"too many volumes", func(s *WorkloadSpec) { s.Volumes = make([]Volume, MaxVolumes+1) }, "volumes"},
		{"restart policy", func(s *WorkloadSpec) { s.Restart = &RestartPolicy{Policy: "sometimes"} }, "restart.policy"},
		{"restart max always", func(s *WorkloadSpec) { s.Restart = &RestartPolicy{Policy: RestartAlways, Max: 2} }, "restart.max"},
		{"restart max negative", func(s *WorkloadSpec) { s.Restart = &RestartPolicy{Policy: RestartOnFailure, Max: -1} }, "restart.max"},
		{"restart max big", func(s *WorkloadSpec) { s.Restart = &RestartPolicy{Policy: RestartOnFailure, Max: MaxRestarts + 1} }, "restart.max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodSpec()
			tt.edit(&s)
			err := s.Validate()
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a *SpecError", err)
			}
			if se.Field != tt.field {
				t.Errorf("got field %q (%v), want %q", se.Field, err, tt.field)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("%v does not wrap ErrInvalidSpec", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// TestValidateNeverQuotesSecrets: a secret's value stays out of errors
// whatever is wrong with it.
func TestValidateNeverQuotesSecrets(t *testing.T) {
	for _, v := range []string{"hunter2\n", strings.Repeat("hunter2", MaxEnvValueBytes), "hunter2\xff"} {
		s := WorkloadSpec{SecretEnv: map[string]string{"PASS": v}}
		err := s.Validate()
		if err == nil {
			t.Fatalf("Validate accepted a bad secret")
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error quotes the secret: %v", err)
		}
	}
	if r := goodSpec().Redacted(); r.SecretEnv["TOKEN"] != "(secret)" {
		t.Errorf("Redacted left %q", r.SecretEnv["TOKEN"])
	}
	if goodSpec().SecretEnv["TOKEN"] != "s3cr3t=value" {
		t.Error("Redacted changed its receiver")
	}
}

func TestEnvList(t *testing.T) {
	got := goodSpec().EnvList()
	want := []string{"GREETING=hello world", "TOKEN=s3cr3t=value", "_X1="}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParsePort(t *testing.T) {
	good := map[string]Port{
		"8080:80":     {8080, 80, "tcp"},
		"53:53/udp":   {53, 53, "udp"},
		"1:65535/tcp": {1, 65535, "tcp"},
	}
	for in, want := range good {
		got, err := ParsePort(in)
		if err != nil || got != want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "80", "80:", ":80", "0:80", "80:65536", "80:80/sctp", "80:80/", "a:80", "+80:80", "-1:80", "80:80:80", "0080080:80"} {
		if p, err := ParsePort(in); err == nil {
			t.Errorf("ParsePort(%q) = %+v, want an error", in, p)
		}
	}
}

func TestParseEnv(t *testing.T) {
	k, v, err := ParseEnv("A_1=x=y")
	if err != nil || k != "A_1" || v != "x=y" {
		t.Errorf("got %q %q %v", k, v, err)
	}
	k, v, err = ParseEnv("EMPTY=")
	if err != nil || k != "EMPTY" || v != "" {
		t.Errorf("got %q %q %v", k, v, err)
	}
	for _, in := range []string{"NOVALUE", "=x", "1A=x", "A B=x", "EINSORA_X=1"} {
		if _, _, err := ParseEnv(in); err == nil {
			t.Errorf("ParseEnv(%q): want an error", in)
		}
	}
	if _, _, err := ParseEnv("BAD KEY=hunter2"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v quotes the value", err)
	}
}

func TestParseRestart(t *testing.T) {
	good := map[string]RestartPolicy{
		"no":           {Policy: "no"},
		"always":       {Policy: "always"},
		"on-failure":   {Policy: "on-failure"},
		"on-failure:5": {Policy: "on-failure", Max: 5},
	}
	for in, want := range good {
		got, err := ParseRestart(in)
		if err != nil || *got != want {
			t.Errorf("ParseRestart(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%q spells back as %q", in, got.String())
		}
	}
	for _, in := range []string{"", "yes", "on-failure:", "on-failure:-1", "on-failure:x", "always:3", "on-failure:1001"} {
		if _, err := ParseRestart(in); err == nil {
			t.Errorf("ParseRestart(%q): want an error", in)
		}
	}
}

func TestSplitWords(t *testing.T) {
	good := map[string][]string{
		``:                          nil,
		`  `:                        nil,
		`serve --port 80`:           {"serve", "--port", "80"},
		`sh -c 'echo "$HOME" done'`: {"sh", "-c", `echo "$HOME" done`},
		`a "b c" d`:                 {"a", "b c", "d"},
		`a "x\"y\\z\n"`:             {"a", `x"y\z\n`},
		`a\ b c`:                    {"a b", "c"},
		`'' ""`:                     {"", ""},
		`pre'fix'"ed"`:              {"prefixed"},
		"tab\tsep\nnl":              {"tab", "sep", "nl"},
	}
	for in, want := range good {
		got, err := SplitWords(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("SplitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`'open`, `"open`, `"a\"`, `trailing\`} {
		if got, err := SplitWords(in); err == nil {
			t.Errorf("SplitWords(%q) = %q, want an error", in, got)
		}
	}
}

func TestDecodeSpec(t *testing.T) {
	b, err := json.Marshal(goodSpec())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSpec(b)
	if err != nil {
		t.Fatalf("DecodeSpec: %v", err)
	}
	if !reflect.DeepEqual(got, goodSpec()) {
		t.Errorf("round trip: got %+v", got.Redacted())
	}
	for _, in := range []string{`{"comand":["x"]}`, `{} {}`, `{"ports":[{"host":0,"container":1}]}`, `[]`, strings.Repeat(" ", MaxSpecBytes+1)} {
		if _, err := DecodeSpec([]byte(in)); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("DecodeSpec(%.40q): got %v, want ErrInvalidSpec", in, err)
		}
	}
}

// TestDesiredWorkloadWire: the spec's fields sit flat beside the image,
// under stable snake_case names, and an empty spec adds nothing.
func TestDesiredWorkloadWire(t *testing.T) {
	dw := DesiredWorkload{ID: "w", Image: "img", WorkloadSpec: goodSpec()}
	b, err := json.Marshal(dw)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"command":`, `"env":`, `"secret_env":`, `"ports":`, `"workdir":`, `"volumes":`, `"restart":{"policy":"on-failure","max":3}`, `"host":8080`, `"container":80`, `"proto":"udp"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("%s lacks %s", b, key)
		}
	}
	b, _ = json.Marshal(DesiredWorkload{ID: "w"})
	for _, key := range []string{"command", "env", "ports", "workdir", "volumes", "restart"} {
		if bytes.Contains(b, []byte(`"`+key+`"`)) {
			t.Errorf("empty spec adds %s: %s", key, b)
		}
	}
}

// FuzzDecodeSpec: no input makes the decoder panic, and what it accepts
// re-encodes to itself, so an accepted spec has one stable form.
func FuzzDecodeSpec(f *testing.F) {
	b, _ := json.Marshal(goodSpec())
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"env":{"A":"\u0007"}}`))
	f.Add([]byte(`{"ports":[{"host":80,"container":80},{"host":80,"container":81}]}`))
	f.Add([]byte(`{"volumes":[{"name":"a","path":"/x/../y"}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeSpec(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %v does not wrap ErrInvalidSpec", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		b1, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("encode accepted spec: %v", err)
		}
		s2, err := DecodeSpec(b1)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b1, err)
		}
		b2, _ := json.Marshal(s2)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("unstable: %s then %s", b1, b2)
		}
	})
}
