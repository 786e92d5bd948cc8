package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// WorkloadSpec is what a workload runs beyond its image and class: its
// command, environment, published ports, working directory, named volumes
// and restart policy. DesiredWorkload embeds it, so its fields sit beside
// the image on the wire; every field is optional and the zero spec runs the
// image as it is. The hub checks a spec with Validate before storing it and
// the agent checks it again before handing it to a driver.
//
// SecretEnv travels to the agent only inside desired state, over mutual TLS.
// Neither the agent nor the drivers log it, put it in labels or report it;
// String and LogValue show its keys only.
type WorkloadSpec struct {
	// Command replaces the image's default command (Docker's CMD; for
	// macos-native the arguments in its "exec:" image). The image's
	// entrypoint stays. The CLI's --command (shell words) and repeated
	// --arg both append here.
	Command []string `json:"command,omitempty"`
	// Env is the workload's environment.
	Env map[string]string `json:"env,omitempty"`
	// SecretEnv is environment that is never shown: see the type's doc.
	// A key may not be in both Env and SecretEnv.
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	// Ports are published on the machine while the workload runs and
	// closed while it is parked.
	Ports []Port `json:"ports,omitempty"`
	// Workdir is the working directory inside the workload, absolute.
	// macos-native reads it relative to the workload's data directory.
	Workdir string `json:"workdir,omitempty"`
	// Volumes are named volumes, kept while the workload is parked and
	// deleted only with the workload.
	Volumes []Volume `json:"volumes,omitempty"`
	// Restart is the agent's local restart policy; nil is RestartNo.
	Restart *RestartPolicy `json:"restart,omitempty"`
}

// Port is one published port.
type Port struct {
	// Host is the machine's port, Container the workload's.
	Host      int `json:"host"`
	Container int `json:"container"`
	// Proto is "tcp" or "udp"; empty reads as "tcp".
	Proto string `json:"proto,omitempty"`
}

// Protocol returns p.Proto with the empty default filled in.
func (p Port) Protocol() string {
	if p.Proto == "" {
		return ProtoTCP
	}
	return p.Proto
}

func (p Port) String() string {
	return fmt.Sprintf("%d:%d/%s", p.Host, p.Container, p.Protocol())
}

// Port protocols.
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
)

// Volume is a named volume mounted at Path.
type Volume struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// RestartPolicy says when the agent restarts a workload that exited.
type RestartPolicy struct {
	// Policy is RestartNo, RestartOnFailure or RestartAlways.
	Policy string `json:"policy"`
	// Max bounds the restarts of one attempt under RestartOnFailure; 0
	// means no bound. It must be 0 for the other policies.
	Max int `json:"max,omitempty"`
}

// Restart policies.
const (
	RestartNo        = "no"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

func (r RestartPolicy) String() string {
	if r.Policy == RestartOnFailure && r.Max > 0 {
		return r.Policy + ":" + strconv.Itoa(r.Max)
	}
	return r.Policy
}

// Limits on a spec, checked by Validate. They keep one workload's desired
// state well under a megabyte and every name usable by every driver.
const (
	// MaxCommandWords bounds len(Command), MaxWordBytes each word.
	MaxCommandWords = 256
	MaxWordBytes    = 4096
	// MaxEnv bounds the entries of Env and SecretEnv together;
	// MaxEnvKeyBytes each key and MaxEnvValueBytes each value;
	// MaxEnvBytes all keys and values together.
	MaxEnv           = 256
	MaxEnvKeyBytes   = 256
	MaxEnvValueBytes = 16 << 10
	MaxEnvBytes      = 64 << 10
	MaxPorts         = 64
	MaxVolumes       = 16
	// MaxVolumeName bounds a volume's name, MaxPathBytes any path.
	MaxVolumeName = 63
	MaxPathBytes  = 1024
	// MaxRestarts bounds RestartPolicy.Max.
	MaxRestarts = 1000
	// ReservedEnvPrefix begins the variables drivers set themselves
	// (EINSORA_DATA); a spec may not set them.
	ReservedEnvPrefix = "EINSORA_"
)

// SpecError is Validate's refusal: the field at fault, named as on the wire
// (e.g. "ports[2].host", "env[PATH]"), and what is wrong with it. It never
// holds a secret's value.
type SpecError struct {
	Field   string
	Problem string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Problem }

// ErrInvalidSpec is wrapped by every error of Validate and the parsers.
var ErrInvalidSpec = errors.New("invalid workload spec")

func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

func specErr(field, format string, args ...any) error {
	return &SpecError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

var (
	envKeyRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	volumeNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
)

// Validate checks s against the limits above and the rules each driver
// needs, returning a *SpecError for the first field at fault: names usable
// as Docker names and paths, environment keys [A-Za-z_][A-Za-z0-9_]*,
// absolute clean paths, ports 1–65535 with no host port and protocol used
// twice, and no control characters or invalid UTF-8 anywhere.
func (s WorkloadSpec) Validate() error {
	if len(s.Command) > MaxCommandWords {
		return specErr("command", "%d words, at most %d", len(s.Command), MaxCommandWords)
	}
	for i, w := range s.Command {
		if err := checkText(fmt.Sprintf("command[%d]", i), w, MaxWordBytes); err != nil {
			return err
		}
	}
	if n := len(s.Env) + len(s.SecretEnv); n > MaxEnv {
		return specErr("env", "%d variables with secret_env, at most %d", n, MaxEnv)
	}
	total := 0
	for _, f := range []struct {
		name   string
		m      map[string]string
		secret bool
	}{{"env", s.Env, false}, {"secret_env", s.SecretEnv, true}} {
		for _, k := range sortedKeys(f.m) {
			if err := checkEnvKey(f.name, k); err != nil {
				return err
			}
			field := fmt.Sprintf("%s[%s]", f.name, k)
			if f.secret {
				if _, dup := s.Env[k]; dup {
					return specErr(field, "also set in env")
				}
			}
			if err := checkText(field, f.m[k], MaxEnvValueBytes); err != nil {
				return err
			}
			total += len(k) + len(f.m[k])
		}
	}
	if total > MaxEnvBytes {
		return specErr("env", "%d bytes with secret_env, at most %d", total, MaxEnvBytes)
	}
	if len(s.Ports) > MaxPorts {
		return specErr("ports", "%d ports, at most %d", len(s.Ports), MaxPorts)
	}
	hostPorts := map[string]int{}
	for i, p := range s.Ports {
		field := fmt.Sprintf("ports[%d]", i)
		if p.Host < 1 || p.Host > 65535 {
			return specErr(field+".host", "%d is not a port (1-65535)", p.Host)
		}
		if p.Container < 1 || p.Container > 65535 {
			return specErr(field+".container", "%d is not a port (1-65535)", p.Container)
		}
		if p.Proto != "" && p.Proto != ProtoTCP && p.Proto != ProtoUDP {
			return specErr(field+".proto", "%q is not tcp or udp", clipText(p.Proto))
		}
		key := strconv.Itoa(p.Host) + "/" + p.Protocol()
		if j, dup := hostPorts[key]; dup {
			return specErr(field+".host", "host port %s is also published by ports[%d]", key, j)
		}
		hostPorts[key] = i
	}
	if s.Workdir != "" {
		if err := checkPath("workdir", s.Workdir); err != nil {
			return err
		}
	}
	if len(s.Volumes) > MaxVolumes {
		return specErr("volumes", "%d volumes, at most %d", len(s.Volumes), MaxVolumes)
	}
	names, paths := map[string]int{}, map[string]int{}
	for i, v := range s.Volumes {
		field := fmt.Sprintf("volumes[%d]", i)
		if len(v.Name) > MaxVolumeName || !volumeNameRe.MatchString(v.Name) {
			return specErr(field+".name", "%q must be 1-%d of a-z 0-9 _ . - and begin with a letter or digit", clipText(v.Name), MaxVolumeName)
		}
		if err := checkPath(field+".path", v.Path); err != nil {
			return err
		}
		if v.Path == "/" {
			return specErr(field+".path", "cannot mount over /")
		}
		if j, dup := names[v.Name]; dup {
			return specErr(field+".name", "%q is also volumes[%d]", v.Name, j)
		}
		if j, dup := paths[v.Path]; dup {
			return specErr(field+".path", "%q is also the path of volumes[%d]", v.Path, j)
		}
		names[v.Name], paths[v.Path] = i, i
	}
	if r := s.Restart; r != nil {
		switch r.Policy {
		case RestartNo, RestartAlways:
			if r.Max != 0 {
				return specErr("restart.max", "only on-failure takes a maximum")
			}
		case RestartOnFailure:
			if r.Max < 0 || r.Max > MaxRestarts {
				return specErr("restart.max", "%d is not in 0-%d", r.Max, MaxRestarts)
			}
		default:
			return specErr("restart.policy", "%q is not no, on-failure or always", clipText(r.Policy))
		}
	}
	return nil
}

func checkEnvKey(field, k string) error {
	if len(k) > MaxEnvKeyBytes {
		return specErr(field, "a key of %d bytes, at most %d", len(k), MaxEnvKeyBytes)
	}
	if !envKeyRe.MatchString(k) {
		return specErr(field, "key %q must match [A-Za-z_][A-Za-z0-9_]*", clipText(k))
	}
	if strings.HasPrefix(strings.ToUpper(k), ReservedEnvPrefix) {
		return specErr(field+"["+k+"]", "keys beginning %s are set by the driver", ReservedEnvPrefix)
	}
	return nil
}

// checkText refuses text over max bytes, invalid UTF-8 and control
// characters. It never quotes the text: it may be a secret.
func checkText(field, s string, limit int) error {
	if len(s) > limit {
		return specErr(field, "%d bytes, at most %d", len(s), limit)
	}
	if !utf8.ValidString(s) {
		return specErr(field, "not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return specErr(field, "control character %U at byte %d", r, i)
		}
	}
	return nil
}

func checkPath(field, p string) error {
	if err := checkText(field, p, MaxPathBytes); err != nil {
		return err
	}
	if !strings.HasPrefix(p, "/") {
		return specErr(field, "%q is not absolute", p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return specErr(field, "%q contains ..", p)
	}
	if path.Clean(p) != p {
		return specErr(field, "%q is not clean (want %q)", p, path.Clean(p))
	}
	if strings.ContainsAny(p, ":,") {
		// Docker's mount syntax splits on both.
		return specErr(field, "%q contains : or ,", p)
	}
	return nil
}

// clipText quotes at most 64 bytes of untrusted text in an error.
func clipText(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.ToValidUTF8(s, "?")
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// EnvList returns Env and SecretEnv as KEY=VALUE words, sorted by key, for
// a driver's process environment. It holds secrets: never log it.
func (s WorkloadSpec) EnvList() []string {
	out := make([]string, 0, len(s.Env)+len(s.SecretEnv))
	for _, m := range []map[string]string{s.Env, s.SecretEnv} {
		for k, v := range m {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

// Redacted returns a copy of s whose secret values read "(secret)": what
// may be logged or shown.
func (s WorkloadSpec) Redacted() WorkloadSpec {
	if len(s.SecretEnv) == 0 {
		return s
	}
	r := s
	r.SecretEnv = make(map[string]string, len(s.SecretEnv))
	for k := range s.SecretEnv {
		r.SecretEnv[k] = "(secret)"
	}
	return r
}

// MaxSpecBytes bounds the JSON of one spec that DecodeSpec reads.
const MaxSpecBytes = 256 << 10

// DecodeSpec reads the JSON of a spec, refusing unknown fields, trailing
// data and anything Validate refuses.
func DecodeSpec(b []byte) (WorkloadSpec, error) {
	var s WorkloadSpec
	if len(b) > MaxSpecBytes {
		return s, specErr("spec", "%d bytes, at most %d", len(b), MaxSpecBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return WorkloadSpec{}, specErr("spec", "%v", err)
	}
	if dec.More() {
		return WorkloadSpec{}, specErr("spec", "data after the spec")
	}
	if err := s.Validate(); err != nil {
		return WorkloadSpec{}, err
	}
	return s, nil
}

// ParsePort reads the CLI's HOST:CONTAINER[/tcp|/udp].
func ParsePort(s string) (Port, error) {
	bad := func(why string) (Port, error) {
		return Port{}, specErr("port", "%q: %s (want HOST:CONTAINER[/tcp|/udp])", clipText(s), why)
	}
	spec, proto, hasProto := strings.Cut(s, "/")
	p := Port{Proto: ProtoTCP}
	if hasProto {
		if proto != ProtoTCP && proto != ProtoUDP {
			return bad("protocol is not tcp or udp")
		}
		p.Proto = proto
	}
	h, c, ok := strings.Cut(spec, ":")
	if !ok {
		return bad("no colon")
	}
	var err error
	if p.Host, err = parsePortNumber(h); err != nil {
		return bad("host " + err.Error())
	}
	if p.Container, err = parsePortNumber(c); err != nil {
		return bad("container " + err.Error())
	}
	return p, nil
}

func parsePortNumber(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("port is not a number")
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, errors.New("port is not in 1-65535")
	}
	return n, nil
}

// ParseEnv reads the CLI's KEY=VALUE (for --env and --secret). The value
// may be empty and may hold "=". Errors never quote the value.
func ParseEnv(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", specErr("env", "want KEY=VALUE")
	}
	if err := checkEnvKey("env", k); err != nil {
		return "", "", err
	}
	return k, v, nil
}

// ParseRestart reads the CLI's no|on-failure[:N]|always.
func ParseRestart(s string) (*RestartPolicy, error) {
	switch s {
	case RestartNo, RestartAlways, RestartOnFailure:
		return &RestartPolicy{Policy: s}, nil
	}
	if n, ok := strings.CutPrefix(s, RestartOnFailure+":"); ok {
		limit, err := strconv.Atoi(n)
		if err != nil || limit < 0 || limit > MaxRestarts {
			return nil, specErr("restart", "%q: N must be a number in 0-%d", clipText(s), MaxRestarts)
		}
		return &RestartPolicy{Policy: RestartOnFailure, Max: limit}, nil
	}
	return nil, specErr("restart", "%q: want no, on-failure[:N] or always", clipText(s))
}

// SplitWords splits the CLI's --command into words as a POSIX shell would,
// without expanding anything: blanks separate words, single quotes keep
// everything literally, double quotes keep everything but a backslash
// before " \ $ or `, and a backslash outside quotes keeps the next
// character. An unterminated quote or a trailing backslash is an error.
func SplitWords(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word is under way (possibly empty: '')
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, specErr("command", "trailing backslash")
			}
			i++
			cur.WriteByte(s[i])
			in = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, specErr("command", "unterminated single quote at byte %d", i)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			start := i
			for i++; ; i++ {
				if i == len(s) {
					return nil, specErr("command", "unterminated double quote at byte %d", start)
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
