package vz

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Guest is the operating system a VM runs.
type Guest string

const (
	GuestLinux Guest = "linux"
	GuestMacOS Guest = "macos"
)

// DefaultDiskBytes is a Linux guest's disk size when the image names none.
const DefaultDiskBytes = 16 << 30

// maxDiskBytes bounds the disk= option: a typo must not fill the host.
const maxDiskBytes = 4 << 40

// Image is a parsed image string:
//
//	SOURCE[#OPTION&OPTION...]
//
// SOURCE is an absolute path or an https URL of a raw disk image (".gz"
// for gzip-compressed) or of a macOS IPSW (".ipsw"). Options:
// sha256=HEX pins the digest of SOURCE's bytes (as fetched, before
// decompression); disk=SIZE (e.g. 32G, 512M) sets the disk size of a new
// VM; guest=linux|macos overrides what the suffix says.
type Image struct {
	Source    string
	URL       bool
	Guest     Guest
	Gzip      bool
	Digest    string // lower-case hex sha256, "" when not pinned
	DiskBytes int64
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseImage parses an image string; errors have ReasonImageInvalid.
func ParseImage(s string) (Image, error) {
	src, frag, _ := strings.Cut(s, "#")
	img := Image{Source: src, DiskBytes: DefaultDiskBytes}
	switch {
	case strings.HasPrefix(src, "https://"):
		u, err := url.Parse(src)
		if err != nil || u.Host == "" {
			return Image{}, errorf(ReasonImageInvalid, "image %q: bad URL", s)
		}
		img.URL = true
	case filepath.IsAbs(src):
		img.Source = filepath.Clean(src)
	default:
		return Image{}, errorf(ReasonImageInvalid, "image %q: want an https URL or an absolute path", s)
	}
	lower := strings.ToLower(src)
	if i := strings.IndexAny(lower, "?"); i >= 0 && img.URL {
		lower = lower[:i]
	}
	img.Guest = GuestLinux
	switch {
	case strings.HasSuffix(lower, ".ipsw"):
		img.Guest = GuestMacOS
	case strings.HasSuffix(lower, ".gz"):
		img.Gzip = true
	}
	if frag != "" {
		for opt := range strings.SplitSeq(frag, "&") {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "sha256":
				v = strings.ToLower(v)
				if !hexDigest.MatchString(v) {
					return Image{}, errorf(ReasonImageInvalid, "image %q: sha256 wants 64 hex digits", s)
				}
				img.Digest = v
			case "disk":
				n, err := parseSize(v)
				if err != nil {
					return Image{}, errorf(ReasonImageInvalid, "image %q: disk: %v", s, err)
				}
				img.DiskBytes = n
			case "guest":
				switch Guest(v) {
				case GuestLinux, GuestMacOS:
					img.Guest = Guest(v)
				default:
					return Image{}, errorf(ReasonImageInvalid, "image %q: guest wants linux or macos", s)
				}
			default:
				return Image{}, errorf(ReasonImageInvalid, "image %q: unknown option %q", s, k)
			}
		}
	}
	if img.Guest == GuestMacOS && img.Gzip {
		return Image{}, errorf(ReasonImageInvalid, "image %q: an IPSW is not compressed", s)
	}
	return img, nil
}

// parseSize reads 512M, 32G, 1T or a byte count.
func parseSize(v string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "T"):
		mult, v = 1<<40, strings.TrimSuffix(v, "T")
	case strings.HasSuffix(v, "G"):
		mult, v = 1<<30, strings.TrimSuffix(v, "G")
	case strings.HasSuffix(v, "M"):
		mult, v = 1<<20, strings.TrimSuffix(v, "M")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	if n > maxDiskBytes/mult {
		return 0, fmt.Errorf("%q is over the %d TiB limit", v, maxDiskBytes>>40)
	}
	return n * mult, nil
}
