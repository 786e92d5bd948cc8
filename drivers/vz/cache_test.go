package vz

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"einsora.dev/edge/drivers"
	"einsora.dev/edge/hub/placement"
	"einsora.dev/edge/protocol"
)

func TestParseImage(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	tests := []struct {
		in      string
		want    Image
		wantErr bool
	}{
		{in: "/img/deb.raw", want: Image{Source: "/img/deb.raw", Guest: GuestLinux, DiskBytes: DefaultDiskBytes}},
		{in: "https://h/x.raw.gz#sha256=" + strings.ToUpper(digest) + "&disk=32G",
			want: Image{Source: "https://h/x.raw.gz", URL: true, Guest: GuestLinux, Gzip: true, Digest: digest, DiskBytes: 32 << 30}},
		{in: "https://h/UniversalMac.ipsw", want: Image{Source: "https://h/UniversalMac.ipsw", URL: true, Guest: GuestMacOS, DiskBytes: DefaultDiskBytes}},
		{in: "/a/disk.img#guest=macos&disk=512M", want: Image{Source: "/a/disk.img", Guest: GuestMacOS, DiskBytes: 512 << 20}},
		{in: "http://h/x.raw", wantErr: true},
		{in: "relative.raw", wantErr: true},
		{in: "/x.raw#sha256=abc", wantErr: true},
		{in: "/x.raw#disk=9T", wantErr: true},
		{in: "/x.raw#disk=-1G", wantErr: true},
		{in: "/x.raw#colour=red", wantErr: true},
		{in: "/x.raw#guest=windows", wantErr: true},
		{in: "/x.ipsw.gz#guest=macos", wantErr: true},
		{in: "https:///nohost.raw", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseImage(tt.in)
		if tt.wantErr {
			if reasonOf(err, "") != ReasonImageInvalid {
				t.Errorf("%q: err %v, want %s", tt.in, err, ReasonImageInvalid)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// imageServer serves files over https and counts the fetches of each.
func imageServer(t *testing.T, files map[string][]byte) (*httptest.Server, map[string]*atomic.Int32) {
	hits := map[string]*atomic.Int32{}
	for p := range files {
		hits[p] = &atomic.Int32{}
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		hits[r.URL.Path].Add(1)
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv, hits
}

// Two VMs of the same URL image share one download; a gzip image is made
// into a raw disk of the asked size; download progress reaches 100%.
func TestSecondVMDoesNotDownloadAgain(t *testing.T) {
	raw := []byte("fake: run\n" + strings.Repeat("d", 3<<20))
	packed := gz(t, raw)
	srv, hits := imageServer(t, map[string][]byte{"/deb.raw.gz": packed})
	dir := t.TempDir()
	d := newTestDriver(t, Options{Dir: dir, HTTPClient: srv.Client()})
	img := srv.URL + "/deb.raw.gz#sha256=" + sha(packed) + "&disk=64M"
	for _, w := range []string{"one", "two"} {
		if err := d.Start(ctxT(t), spec(w, img, 1)); err != nil {
			t.Fatal(err)
		}
		waitState(t, d, w, drivers.StateRunning)
	}
	if n := hits["/deb.raw.gz"].Load(); n != 1 {
		t.Fatalf("image fetched %d times, want 1", n)
	}
	st, err := os.Stat(bundleFor(d.bundles, "two").Disk())
	if err != nil || st.Size() != 64<<20 {
		t.Fatalf("disk: %v, size %d, want %d", err, st.Size(), 64<<20)
	}
	got, _ := os.ReadFile(bundleFor(d.bundles, "two").Disk())
	if !bytes.Equal(got[:len(raw)], raw) {
		t.Fatal("disk does not begin with the decompressed image")
	}
	cfg, _ := loadConfig(bundleFor(d.bundles, "one"))
	if cfg.ImageDigest != sha(packed) {
		t.Fatalf("bundle records digest %q", cfg.ImageDigest)
	}
}

func TestUnpinnedURLIsIndexed(t *testing.T) {
	body := []byte("fake: run\n")
	srv, hits := imageServer(t, map[string][]byte{"/a.raw": body})
	c, err := NewCache(t.TempDir(), srv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := ParseImage(srv.URL + "/a.raw")
	var steps []string
	for range 2 {
		_, digest, err := c.Get(ctxT(t), img, func(step string, pct int) { steps = append(steps, formatProgress(step, pct)) })
		if err != nil || digest != sha(body) {
			t.Fatalf("get: %q, %v", digest, err)
		}
	}
	if n := hits["/a.raw"].Load(); n != 1 {
		t.Fatalf("fetched %d times, want 1", n)
	}
	if len(steps) == 0 || steps[len(steps)-1] != "download 100%" {
		t.Fatalf("progress %q, want it to end at download 100%%", steps)
	}
}

// A digest that does not match, or a URL that fails, is image_unavailable
// with its fixed reason, and leaves nothing in the cache.
func TestBadImagesGiveFixedCodes(t *testing.T) {
	body := []byte("fake: run\n")
	srv, _ := imageServer(t, map[string][]byte{"/a.raw": body})
	dir := t.TempDir()
	d := newTestDriver(t, Options{Dir: dir, HTTPClient: srv.Client()})
	tests := []struct {
		w, image string
		reason   Reason
	}{
		{"mismatch", srv.URL + "/a.raw#sha256=" + strings.Repeat("0", 64), ReasonDigestMismatch},
		{"notfound", srv.URL + "/missing.raw", ReasonImageFetch},
		{"unreachable", "https://127.0.0.1:1/x.raw", ReasonImageFetch},
		{"badstring", "ftp://x", ReasonImageInvalid},
	}
	for _, tt := range tests {
		if err := d.Start(ctxT(t), spec(tt.w, tt.image, 1)); err != nil {
			t.Fatal(err)
		}
		in := waitState(t, d, tt.w, drivers.StateFailed)
		if in.Code != protocol.CodeImageUnavailable || !strings.HasPrefix(in.Detail, string(tt.reason)) {
			t.Errorf("%s: got %+v, want image_unavailable %s", tt.w, in, tt.reason)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, "images", "*"))
	if len(left) != 0 {
		t.Fatalf("cache holds %q after failed fetches", left)
	}
}

// fullDisk fails with ENOSPC after limit bytes.
type fullDisk struct {
	*os.File
	limit int
}

func (f *fullDisk) Write(b []byte) (int, error) {
	if len(b) > f.limit {
		n, _ := f.File.Write(b[:f.limit])
		f.limit = 0
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.limit -= len(b)
	return f.File.Write(b)
}

// A full disk while making the disk image is failed_start with
// vz_disk_full; the bundle's data is kept and a later Start retries.
func TestFullDiskWhileMakingTheDisk(t *testing.T) {
	orig := createDisk
	t.Cleanup(func() { createDisk = orig })
	createDisk = func(p string) (diskFile, error) {
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		return &fullDisk{File: f, limit: 100}, nil
	}
	dir, imgs := t.TempDir(), t.TempDir()
	d := newTestDriver(t, Options{Dir: dir})
	img := image(t, imgs, "run.raw", "run")
	if err := d.Start(ctxT(t), spec("w", img, 1)); err != nil {
		t.Fatal(err)
	}
	in := waitState(t, d, "w", drivers.StateFailed)
	if in.Code != protocol.CodeFailedStart || !strings.HasPrefix(in.Detail, string(ReasonDiskFull)) {
		t.Fatalf("got %+v, want failed_start %s", in, ReasonDiskFull)
	}
	b := bundleFor(d.bundles, "w")
	if _, err := os.Stat(b.Disk()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a partial disk was left: %v", err)
	}
	if _, err := os.Stat(b.MAC()); err != nil {
		t.Fatalf("bundle identity deleted: %v", err)
	}
	createDisk = orig
	if err := d.Start(ctxT(t), spec("w", img, 2)); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, "w", drivers.StateRunning)
}

func TestBundleNamesStayShort(t *testing.T) {
	long := strings.Repeat("w", 80)
	a, b := bundleFor("/s", long), bundleFor("/s", long+"x")
	if len(filepath.Base(a.Dir)) > maxBundleName || a == b {
		t.Fatalf("bundles %q and %q", a.Dir, b.Dir)
	}
	mac := "/Library/Application Support/Einsora/agent/vz/bundles"
	if s := bundleFor(mac, long).Socket(); len(s) > maxSocketPath {
		t.Fatalf("socket path %q is %d bytes", s, len(s))
	}
	if got := bundleFor("/s", "short-1").Dir; got != "/s/short-1" {
		t.Fatalf("short ID renamed: %q", got)
	}
}

// The hub counts vz's limit by placement.MacOSGuestImage: it must read
// the guest of an image as ParseImage does.
func TestHubReadsTheGuestAsTheDriverDoes(t *testing.T) {
	for _, s := range []string{
		"/a/deb.raw", "/a/deb.raw.gz", "https://h/Mac.ipsw", "https://h/Mac.IPSW?x=1", "/a/x.ipsw#sha256=" + strings.Repeat("0", 64),
		"/a/disk.img#guest=macos", "/a/x.ipsw#guest=linux", "/a/disk.img#disk=8G&guest=macos",
	} {
		img, err := ParseImage(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got := placement.MacOSGuestImage(s); got != (img.Guest == GuestMacOS) {
			t.Errorf("%q: hub says macOS %v, driver says guest %s", s, got, img.Guest)
		}
	}
}

// A server that stops sending fails the fetch after the stall time, with
// the fetch reason, and leaves nothing in the cache.
func TestStalledDownloadFails(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("fake: run\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	c, err := NewCache(dir, srv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.stall = 200 * time.Millisecond
	img, _ := ParseImage(srv.URL + "/slow.raw")
	start := time.Now()
	_, _, err = c.Get(ctxT(t), img, nil)
	if reasonOf(err, "") != ReasonImageFetch || !strings.Contains(err.Error(), "no data for") {
		t.Fatalf("got %v, want %s saying no data", err, ReasonImageFetch)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("cache holds %q", left)
	}
}

// A local image is copied into the cache once, and again only when the
// file changes.
func TestLocalImageCopiedOnceUntilItChanges(t *testing.T) {
	c, err := NewCache(t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "a.raw")
	os.WriteFile(src, []byte("fake: run\none"), 0o600)
	img, _ := ParseImage(src)
	copies := 0
	progress := func(step string, pct int) {
		if step == "copy" && pct == 100 {
			copies++
		}
	}
	d1, d2 := "", ""
	for range 2 {
		_, d1, err = c.Get(ctxT(t), img, progress)
		if err != nil {
			t.Fatal(err)
		}
	}
	if copies != 1 {
		t.Fatalf("copied %d times, want 1", copies)
	}
	os.WriteFile(src, []byte("fake: run\ntwo, longer"), 0o600)
	_, d2, err = c.Get(ctxT(t), img, progress)
	if err != nil {
		t.Fatal(err)
	}
	if copies != 2 || d1 == d2 {
		t.Fatalf("after a change: %d copies, digests %s %s", copies, d1, d2)
	}
}
