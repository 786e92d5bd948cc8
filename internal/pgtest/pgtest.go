// Package pgtest gives tests a real PostgreSQL:
//
//   - EINSORA_TEST_POSTGRES, when set, is the DSN of a server to use; each
//     test gets a schema of its own there (Schema), dropped afterwards.
//   - Otherwise, where initdb and postgres are installed (on PATH or in
//     /usr/lib/postgresql/*/bin), the first caller of Start starts a
//     throwaway server in a temporary directory, listening only on a unix
//     socket in that directory; the test binary's TestMain stops it (Stop)
//     and removes the directory. As root, which PostgreSQL refuses, it runs
//     initdb and postgres as the postgres user.
//   - Otherwise the tests skip, unless EINSORA_REQUIRE_POSTGRES=1 (as in
//     CI): then they fail.
//
// A test that needs TCP (a relay in front of the server, a hub process
// given a postgres:// URL) asks Target where to dial and URL for the
// address to hand out.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var srv struct {
	once sync.Once
	dsn  string
	skip string // why there is no server, when there is none to start
	err  error  // why starting one failed
	stop func()
}

// Stop stops the server Start started, if any, and removes its directory.
// TestMain calls it after m.Run; the server dies with the test process
// anyway (on Linux), but its directory would stay.
func Stop() {
	if srv.stop != nil {
		srv.stop()
	}
}

// Start returns the DSN of the test server, starting it on first use. It
// skips t when there is none to start, or fails it when
// EINSORA_REQUIRE_POSTGRES=1.
func Start(t testing.TB) string {
	t.Helper()
	srv.once.Do(func() {
		if dsn := os.Getenv("EINSORA_TEST_POSTGRES"); dsn != "" {
			srv.dsn = dsn
			return
		}
		srv.dsn, srv.stop, srv.skip, srv.err = startServer()
	})
	switch {
	case srv.err != nil:
		t.Fatalf("start a throwaway PostgreSQL: %v", srv.err)
	case srv.skip != "" && os.Getenv("EINSORA_REQUIRE_POSTGRES") == "1":
		t.Fatalf("EINSORA_REQUIRE_POSTGRES=1 but %s", srv.skip)
	case srv.skip != "":
		t.Skipf("no PostgreSQL: %s; set EINSORA_TEST_POSTGRES to a DSN or install postgresql", srv.skip)
	}
	return srv.dsn
}

var schemaSeq atomic.Int64

// Schema returns a DSN whose search_path is a new, empty schema that is
// dropped when t ends: a fresh database as far as a store can tell.
func Schema(t testing.TB) string {
	t.Helper()
	base := Start(t)
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "_"))
	schema := fmt.Sprintf("einsora_test_%d_%d_%.30s", os.Getpid(), schemaSeq.Add(1), name)
	Exec(t, base, `CREATE SCHEMA `+schema)
	t.Cleanup(func() { Exec(t, base, `DROP SCHEMA `+schema+` CASCADE`) })
	return WithParam(base, "search_path", schema)
}

// Exec runs one statement on a connection of its own.
func Exec(t testing.TB, dsn, stmt string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// WithParam adds a connection parameter to a URL or keyword/value DSN.
func WithParam(dsn, key, value string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			q := u.Query()
			q.Set(key, value)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " " + key + "=" + value
}

// Target returns what a client of dsn dials: ("unix", socket path) for a
// server on a unix socket, ("tcp", host:port) otherwise.
func Target(dsn string) (network, address string, err error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", "", fmt.Errorf("parse the test DSN: %w", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port)), nil
	}
	return "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// URL returns dsn as a postgres:// URL that reaches the server through
// hostport (a relay) instead, with dsn's user, password, database and
// search_path, and TLS off (the relay is on loopback).
func URL(dsn, hostport string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("parse the test DSN: %w", err)
	}
	u := url.URL{Scheme: "postgres", Host: hostport, Path: "/" + cfg.Database}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	q := url.Values{"sslmode": {"disable"}}
	if sp := cfg.RuntimeParams["search_path"]; sp != "" {
		q.Set("search_path", sp)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// pgBin finds the directory holding initdb and postgres, newest version
// first; "" if there is none.
func pgBin() string {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	for _, d := range append(dirs, found...) {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// ErrUnavailable: there is no PostgreSQL to start here (not installed, or
// running as root without a postgres user to run it as).
var ErrUnavailable = errors.New("no PostgreSQL to start")

// Server is a throwaway PostgreSQL started outside a test (the fleet
// benchmark), as Start starts one for tests.
type Server struct {
	// DSN is the server's address, in key=value form.
	DSN  string
	stop func()
}

// StartServer starts a throwaway server; Stop stops it and removes its
// directory. Where there is none to start, the error wraps
// ErrUnavailable.
func StartServer() (*Server, error) {
	dsn, stop, skip, err := startServer()
	if skip != "" {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, skip)
	}
	if err != nil {
		return nil, err
	}
	return &Server{DSN: dsn, stop: stop}, nil
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() { s.stop() }

// URL is the server's address as a postgres:// URL, the form
// einsora-hub serve --store takes.
func (s *Server) URL() (string, error) {
	c, err := pgconn.ParseConfig(s.DSN)
	if err != nil {
		return "", err
	}
	q := url.Values{"host": {c.Host}, "port": {strconv.Itoa(int(c.Port))}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User(c.User), Path: "/" + c.Database, RawQuery: q.Encode()}).String(), nil
}

// startServer initialises a cluster in a temporary directory and runs
// postgres on a unix socket there, as a child of the test process, so it
// dies with it even when Stop never runs.
func startServer() (dsn string, stop func(), skip string, err error) {
	bin := pgBin()
	if bin == "" {
		return "", nil, "initdb and postgres not found on PATH or in /usr/lib/postgresql/*/bin", nil
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, "running as root and there is no postgres user to run the server as", nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "einsora-pg-")
	if err != nil {
		return "", nil, "", err
	}
	fail := func(err error) (string, func(), string, error) {
		os.RemoveAll(dir)
		return "", nil, "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(err)
	}
	defer logFile.Close()
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
		cmd.SysProcAttr = procAttr(cred)
		return cmd
	}
	data := filepath.Join(dir, "data")
	initdb := command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	if err := initdb.Run(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, tail(logPath)))
	}
	// Only a unix socket, in dir: no port to collide with (a relay in
	// front of it listens on TCP for tests that need that). Durability is
	// off: the cluster is thrown away.
	const port = "5432"
	pg := command("postgres", "-D", data, "-k", dir, "-p", port, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	if err := pg.Start(); err != nil {
		return fail(fmt.Errorf("postgres: %v", err))
	}
	exited := make(chan error, 1)
	go func() { exited <- pg.Wait() }()
	stop = func() {
		pg.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			pg.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	dsn = fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable", dir, port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return dsn, stop, "", nil
		}
		select {
		case werr := <-exited:
			exited <- werr
			stop()
			return "", nil, "", fmt.Errorf("postgres exited: %v\n%s", werr, tail(logPath))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log := tail(logPath)
			stop()
			return "", nil, "", fmt.Errorf("postgres did not answer within a minute: %v\n%s", err, log)
		}
	}
}

// tail returns the end of a log, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
