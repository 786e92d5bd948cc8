package fleetbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// pgServer is a throwaway PostgreSQL the bench starts when no -store is
// given: a cluster in a temporary directory, reached on a unix socket
// there only, durability off (it is thrown away).
type pgServer struct {
	dir    string
	dsn    string
	cmd    *exec.Cmd
	exited chan error
}

// pgBinDir finds initdb and postgres on PATH or in /usr/lib/postgresql/*/bin,
// the newest version first.
func pgBinDir() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	ver := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(found, func(i, j int) bool { return ver(found[i]) > ver(found[j]) })
	for _, d := range append(dirs, found...) {
		if isRegular(filepath.Join(d, "initdb")) && isRegular(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres are not on PATH nor in /usr/lib/postgresql/*/bin: install PostgreSQL or give -store postgres://…")
}

func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// startPostgres starts a throwaway server. As root, which PostgreSQL
// refuses, it runs it as the postgres user.
func startPostgres() (*pgServer, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("running as root and there is no postgres user to run PostgreSQL as: give -store postgres://…")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Its own directory, not the bench's: the postgres user must own it.
	dir, err := os.MkdirTemp("", "fleetbench-pg-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{dir: dir, exited: make(chan error, 1)}
	fail := func(err error) (*pgServer, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if err := command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync").Run(); err != nil {
		return fail(fmt.Errorf("initdb: %w (see %s)", err, logPath))
	}
	// Three replicas hold up to postgres.MaxConns each, plus their
	// notification connections and the bench's own.
	s.cmd = command("postgres", "-D", data, "-k", dir, "-p", "5432", "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	if err := s.cmd.Start(); err != nil {
		return fail(fmt.Errorf("postgres: %w", err))
	}
	go func() { s.exited <- s.cmd.Wait() }()
	s.dsn = (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/postgres",
		RawQuery: url.Values{"host": {dir}, "port": {"5432"}, "sslmode": {"disable"}}.Encode()}).String()
	end := time.Now().Add(time.Minute)
	for {
		if err := pingPG(s.dsn); err == nil {
			return s, nil
		} else if time.Now().After(end) {
			s.stop()
			return nil, fmt.Errorf("postgres did not answer within a minute: %w (see %s)", err, logPath)
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			s.stop()
			return nil, fmt.Errorf("postgres exited: %v (see %s)", err, logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop stops the server (fast shutdown) and removes its directory.
func (s *pgServer) stop() {
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}

func pingPG(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

var schemaName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// pgSchema creates schema name in the database of dsn and returns a DSN
// whose search_path is it: a database of its own as far as the hub can
// tell, so each measured target starts empty.
func pgSchema(ctx context.Context, dsn, name string) (string, error) {
	if !schemaName.MatchString(name) {
		return "", fmt.Errorf("schema name %q", name)
	}
	if err := pgExec(ctx, dsn, "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("-store: %w", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// dropPGSchema removes what pgSchema made, best effort.
func dropPGSchema(dsn, name string) error {
	if !schemaName.MatchString(name) {
		return fmt.Errorf("schema name %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return pgExec(ctx, dsn, "DROP SCHEMA "+name+" CASCADE")
}

func pgExec(ctx context.Context, dsn, stmt string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}
