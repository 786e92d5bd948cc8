package hub

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// AdminTokenFile is the file in the hub's data directory that holds the
// admin token.
const AdminTokenFile = "admin-token"

// LoadOrCreateAdminToken reads the admin token from dir, making one the
// first time (mode 0600: whoever can read it administers the hub).
func LoadOrCreateAdminToken(dir string) (string, error) {
	path := filepath.Join(dir, AdminTokenFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			// An older hub, or a copy, may have left it open to others.
			if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
				if err := os.Chmod(path, 0o600); err != nil {
					return "", fmt.Errorf("admin token %s is readable by others and could not be narrowed: %w", path, err)
				}
			}
			return t, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("admin token: %w", err)
	}
	var raw [32]byte
	rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	// WriteFile keeps the mode of a file that was there, empty.
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return token, nil
}
