package hub

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"einsora.dev/edge/protocol"
)

// SecretKeyFile is the file in the hub's data directory that holds the key
// sealing workloads' secret environment in the store. Replicas over one
// PostgreSQL database must share it: copy the data directory.
const SecretKeyFile = "secrets-key"

// sealedPrefix marks a sealed value: version 1 is AES-256-GCM, a random
// 12-byte nonce, the ciphertext and tag, in base64.
const sealedPrefix = "v1:"

// LoadOrCreateSecretKey reads the 32-byte secrets key from dir, making one
// the first time (mode 0600: whoever reads it and the store reads every
// secret).
func LoadOrCreateSecretKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretKeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		key, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("secrets key %s is not 64 hex digits; restore it from a backup of the data directory", path)
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path, 0o600); err != nil {
				return nil, fmt.Errorf("secrets key %s is readable by others and could not be narrowed: %w", path, err)
			}
		}
		return key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	// O_EXCL: two processes making the key at once keep the first.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadOrCreateSecretKey(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return key, nil
}

// sealer seals and opens secret values. Each value is bound to its
// workload and key, so a sealed value copied to another row does not open.
type sealer struct{ aead cipher.AEAD }

// errNoSecretKey refuses secrets on a hub configured without a key.
var errNoSecretKey = fmt.Errorf("%w: secret: this hub has no secrets key (Config.SecretKey)", ErrInvalid)

func newSealer(key []byte) (*sealer, error) {
	if key == nil {
		return nil, nil
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("hub: secrets key is %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("hub: secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("hub: secrets key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

func additional(workload, key string) []byte { return []byte(workload + "\x00" + key) }

// seal returns spec with every SecretEnv value sealed for workload.
func (s *sealer) seal(workload string, spec protocol.WorkloadSpec) (protocol.WorkloadSpec, error) {
	if len(spec.SecretEnv) == 0 {
		return spec, nil
	}
	if s == nil {
		return spec, errNoSecretKey
	}
	out := spec
	out.SecretEnv = make(map[string]string, len(spec.SecretEnv))
	for k, v := range spec.SecretEnv {
		nonce := make([]byte, s.aead.NonceSize())
		rand.Read(nonce)
		sealed := s.aead.Seal(nonce, nonce, []byte(v), additional(workload, k))
		out.SecretEnv[k] = sealedPrefix + base64.StdEncoding.EncodeToString(sealed)
	}
	return out, nil
}

// open returns spec with every SecretEnv value opened: only desired state
// holds the result.
func (s *sealer) open(workload string, spec protocol.WorkloadSpec) (protocol.WorkloadSpec, error) {
	if len(spec.SecretEnv) == 0 {
		return spec, nil
	}
	if s == nil {
		return spec, errors.New("this hub has no secrets key; give it the data directory's " + SecretKeyFile)
	}
	out := spec
	out.SecretEnv = make(map[string]string, len(spec.SecretEnv))
	for k, v := range spec.SecretEnv {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, sealedPrefix))
		if !strings.HasPrefix(v, sealedPrefix) || err != nil || len(raw) < s.aead.NonceSize() {
			return spec, fmt.Errorf("secret %s of workload %s is not sealed as this hub seals", k, workload)
		}
		plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], additional(workload, k))
		if err != nil {
			return spec, fmt.Errorf("secret %s of workload %s does not open with this hub's %s (replicas must share it)", k, workload, SecretKeyFile)
		}
		out.SecretEnv[k] = string(plain)
	}
	return out, nil
}
