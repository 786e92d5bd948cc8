package vz

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"einsora.dev/edge/internal/atomicfile"
)

// Cache keeps fetched images under one directory, keyed by the sha256 of
// their bytes, so VMs of the same image share one download:
//
//	sha256-HEX       the bytes as fetched (a raw image or an IPSW)
//	sha256-HEX.raw   for a gzip image, the raw image inside it
//	url-HEX          for an unpinned URL (HEX: sha256 of the URL), the
//	                 digest its bytes had, so it is not fetched again
//	path-HEX         for an unpinned local path, its size, modification
//	                 time and digest: the file is copied again only when
//	                 it changed
//
// Nothing in it is deleted by the driver: a failed fetch leaves only its
// temporary file, which is removed.
type Cache struct {
	dir    string
	client *http.Client
	log    *slog.Logger
	// stall fails a download that brings no byte for this long.
	stall time.Duration

	mu    sync.Mutex
	locks map[string]*sync.Mutex // by source: one fetch at a time per image
}

// NewCache returns a cache in dir.
func NewCache(dir string, client *http.Client, log *slog.Logger) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vz: image cache: %w", err)
	}
	if client == nil {
		client = &http.Client{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{dir: dir, client: client, log: log, stall: DefaultFetchStall, locks: map[string]*sync.Mutex{}}, nil
}

// DefaultFetchStall is how long a download may bring nothing before it
// fails: a server that stops sending must not hold a Start forever.
const DefaultFetchStall = 2 * time.Minute

// Progress receives what a long step has done, in percent (-1: unknown).
type Progress func(step string, pct int)

// Get returns the path of img's usable file in the cache (the raw image,
// decompressed, or the IPSW) and the digest of its fetched bytes,
// fetching it when the cache lacks it.
func (c *Cache) Get(ctx context.Context, img Image, progress Progress) (path, digest string, err error) {
	c.mu.Lock()
	l := c.locks[img.Source]
	if l == nil {
		l = &sync.Mutex{}
		c.locks[img.Source] = l
	}
	c.mu.Unlock()
	l.Lock()
	defer l.Unlock()

	digest = img.Digest
	if digest == "" && img.URL {
		if b, err := os.ReadFile(c.urlIndex(img.Source)); err == nil && hexDigest.Match(b) {
			digest = string(b)
		}
	}
	if digest == "" && !img.URL {
		digest = c.pathDigest(img.Source)
	}
	if digest != "" {
		if p, ok := c.have(digest, img.Gzip); ok {
			c.log.Debug("vz: image cached", "image", img.Source, "digest", digest)
			return p, digest, nil
		}
	}
	digest, err = c.fetch(ctx, img, progress)
	if err != nil {
		return "", "", err
	}
	if img.Gzip {
		if err := c.gunzip(ctx, digest, progress); err != nil {
			return "", "", err
		}
	}
	p, ok := c.have(digest, img.Gzip)
	if !ok {
		return "", "", errorf(ReasonImageFetch, "image %s: cached file vanished", img.Source)
	}
	return p, digest, nil
}

func (c *Cache) blob(digest string) string { return filepath.Join(c.dir, "sha256-"+digest) }

func (c *Cache) urlIndex(u string) string {
	sum := sha256.Sum256([]byte(u))
	return filepath.Join(c.dir, "url-"+hex.EncodeToString(sum[:]))
}

func (c *Cache) pathIndex(p string) string {
	sum := sha256.Sum256([]byte(p))
	return filepath.Join(c.dir, "path-"+hex.EncodeToString(sum[:]))
}

// pathEntry is a path-HEX index file.
type pathEntry struct {
	Size    int64  `json:"size"`
	ModNano int64  `json:"mod_nano"`
	Digest  string `json:"digest"`
}

// pathDigest is the digest a local file had when last copied, "" when it
// has changed since or was never copied.
func (c *Cache) pathDigest(p string) string {
	b, err := os.ReadFile(c.pathIndex(p))
	if err != nil || len(b) > maxLine {
		return ""
	}
	var e pathEntry
	st, serr := os.Stat(p)
	if json.Unmarshal(b, &e) != nil || serr != nil || !hexDigest.MatchString(e.Digest) ||
		st.Size() != e.Size || st.ModTime().UnixNano() != e.ModNano {
		return ""
	}
	return e.Digest
}

// have reports the usable file for digest, if cached.
func (c *Cache) have(digest string, gz bool) (string, bool) {
	p := c.blob(digest)
	if gz {
		p += ".raw"
	}
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p, true
	}
	return "", false
}

// fetch copies the source into the cache, checking the pinned digest, and
// returns the digest of its bytes.
func (c *Cache) fetch(ctx context.Context, img Image, progress Progress) (string, error) {
	var src io.ReadCloser
	var size int64 = -1
	var srcStat os.FileInfo
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if img.URL {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, img.Source, nil)
		if err != nil {
			return "", errorf(ReasonImageFetch, "image %s: %w", img.Source, err)
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return "", errorf(ReasonImageFetch, "image %s: %w", img.Source, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return "", errorf(ReasonImageFetch, "image %s: HTTP %s", img.Source, resp.Status)
		}
		src, size = &stallReader{r: resp.Body, t: time.AfterFunc(c.stall, func() {
			cancel(fmt.Errorf("no data for %v", c.stall))
		}), d: c.stall}, resp.ContentLength
	} else {
		f, err := os.Open(img.Source)
		if err != nil {
			return "", errorf(ReasonImageFetch, "image %s: %w", img.Source, err)
		}
		if st, err := f.Stat(); err == nil {
			if !st.Mode().IsRegular() {
				f.Close()
				return "", errorf(ReasonImageFetch, "image %s: not a regular file", img.Source)
			}
			size, srcStat = st.Size(), st
		}
		src = f
	}
	defer src.Close()

	tmp, err := os.CreateTemp(c.dir, "tmp-fetch-*")
	if err != nil {
		return "", diskErr(err, "image cache")
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	w := &progressWriter{w: io.MultiWriter(tmp, h), total: size, step: "download", progress: progress}
	if !img.URL {
		w.step = "copy"
	}
	if _, err := copyCtx(ctx, w, src); err != nil {
		if w.writeErr != nil {
			return "", diskErr(w.writeErr, "image cache")
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		return "", errorf(ReasonImageFetch, "image %s: %w", img.Source, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", diskErr(err, "image cache")
	}
	if err := tmp.Close(); err != nil {
		return "", diskErr(err, "image cache")
	}
	digest := hex.EncodeToString(h.Sum(nil))
	if img.Digest != "" && digest != img.Digest {
		return "", errorf(ReasonDigestMismatch, "image %s: sha256 is %s, the image string pins %s", img.Source, digest, img.Digest)
	}
	if err := os.Rename(tmp.Name(), c.blob(digest)); err != nil {
		return "", diskErr(err, "image cache")
	}
	if img.URL && img.Digest == "" {
		if err := atomicfile.Write(c.urlIndex(img.Source), []byte(digest), 0o600); err != nil {
			return "", diskErr(err, "image cache")
		}
	}
	if !img.URL && img.Digest == "" && srcStat != nil {
		b, _ := json.Marshal(pathEntry{Size: srcStat.Size(), ModNano: srcStat.ModTime().UnixNano(), Digest: digest})
		if err := atomicfile.Write(c.pathIndex(img.Source), b, 0o600); err != nil {
			return "", diskErr(err, "image cache")
		}
	}
	c.log.Info("vz: image fetched", "image", img.Source, "digest", digest, "bytes", w.n)
	return digest, nil
}

// gunzip makes sha256-HEX.raw from sha256-HEX.
func (c *Cache) gunzip(ctx context.Context, digest string, progress Progress) error {
	if _, ok := c.have(digest, true); ok {
		return nil
	}
	f, err := os.Open(c.blob(digest))
	if err != nil {
		return errorf(ReasonImageFetch, "image sha256-%s: %w", digest, err)
	}
	defer f.Close()
	var size int64 = -1
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	counted := &countingReader{r: f}
	zr, err := gzip.NewReader(counted)
	if err != nil {
		return errorf(ReasonImageFetch, "image sha256-%s: not gzip: %w", digest, err)
	}
	tmp, err := os.CreateTemp(c.dir, "tmp-gunzip-*")
	if err != nil {
		return diskErr(err, "image cache")
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w := &progressWriter{w: tmp, step: "decompress", progress: progress, totalFn: func() (int64, int64) { return counted.n, size }}
	if _, err := copyCtx(ctx, w, zr); err != nil {
		if w.writeErr != nil {
			return diskErr(w.writeErr, "image cache")
		}
		return errorf(ReasonImageFetch, "image sha256-%s: decompress: %w", digest, err)
	}
	if err := tmp.Close(); err != nil {
		return diskErr(err, "image cache")
	}
	if err := os.Rename(tmp.Name(), c.blob(digest)+".raw"); err != nil {
		return diskErr(err, "image cache")
	}
	return nil
}

// diskErr gives a write failure its reason: ReasonDiskFull for ENOSPC.
func diskErr(err error, where string) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errorf(ReasonDiskFull, "%s: no space left: %w", where, err)
	}
	return errorf(ReasonBundleCorrupt, "%s: %w", where, err)
}

// copyCtx copies until EOF, an error or ctx's end.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			m, werr := w.Write(buf[:k])
			n += int64(m)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// stallReader restarts its timer on every read that brings data; when the
// timer fires the request's context is cancelled.
type stallReader struct {
	r io.ReadCloser
	t *time.Timer
	d time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.t.Reset(s.d)
	}
	return n, err
}

func (s *stallReader) Close() error { s.t.Stop(); return s.r.Close() }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// progressWriter reports percentages as bytes pass; writeErr keeps a
// failure of the destination apart from one of the source.
type progressWriter struct {
	w        io.Writer
	n, total int64
	totalFn  func() (done, total int64)
	step     string
	progress Progress
	last     int
	writeErr error
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	if err != nil {
		p.writeErr = err
		return n, err
	}
	if p.progress != nil {
		done, total := p.n, p.total
		if p.totalFn != nil {
			done, total = p.totalFn()
		}
		pct := -1
		if total > 0 {
			pct = int(min(100, done*100/total))
		}
		if pct != p.last {
			p.last = pct
			p.progress(p.step, pct)
		}
	}
	return n, err
}

// formatProgress is how List shows a step: "download 42%".
func formatProgress(step string, pct int) string {
	if pct < 0 {
		return step
	}
	return fmt.Sprintf("%s %d%%", step, pct)
}

// trimDetail keeps a log or detail line short.
func trimDetail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
