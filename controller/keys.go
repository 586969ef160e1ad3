package controller

import (
	"context"
	"errors"
	"fmt"

	"mesh/keyring"
	"mesh/models"
	"mesh/store"
)

// loadKeyring reads the key that seals the signing keys at rest, from the
// key file or the config's text; nil when neither is given.
func loadKeyring(cfg Config) (*keyring.Keyring, error) {
	switch {
	case cfg.KeyFile != "" && cfg.Key != "":
		return nil, errors.New("both a key file (--key-file, MESH_KEY_FILE) and MESH_KEY are given: give one")
	case cfg.KeyFile != "":
		return keyring.Load(cfg.KeyFile)
	case cfg.Key != "":
		ring, err := keyring.Parse([]byte(cfg.Key))
		if err != nil {
			return nil, fmt.Errorf("MESH_KEY: %w", err)
		}
		return ring, nil
	}
	return nil, nil
}

// keySource names where the key came from, for messages.
func keySource(cfg Config) string {
	if cfg.KeyFile != "" {
		return "the key file " + cfg.KeyFile
	}
	return "MESH_KEY"
}

// signingKeys seals the store's plaintext signing keys when a key is given,
// then reads (or, on the first start, makes) the declaration key and the
// token key. A store whose keys the given key cannot open, or that holds
// sealed keys when none is given, is refused with what to do.
func signingKeys(ctx context.Context, st *store.Store, cfg Config) (decl, tok *models.Key, err error) {
	if st.SealsKeys() {
		n, err := st.SealKeys(ctx)
		if err != nil {
			return nil, nil, keyError(err, cfg)
		}
		if n > 0 {
			cfg.Log.Info("signing keys stored in plaintext are now sealed", "keys", n, "with", keySource(cfg))
		}
	}
	if decl, err = st.EnsureKey(ctx, "k1", store.KeyDeclaration); err != nil {
		return nil, nil, keyError(fmt.Errorf("declaration key: %w", err), cfg)
	}
	if tok, err = st.EnsureKey(ctx, "t1", store.KeyToken); err != nil {
		return nil, nil, keyError(fmt.Errorf("token key: %w", err), cfg)
	}
	if st.SealsKeys() {
		cfg.Log.Info("signing keys encrypted at rest", "with", keySource(cfg))
	} else {
		cfg.Log.Info("signing keys stored in plaintext: no --key-file (MESH_KEY_FILE) or MESH_KEY")
	}
	return decl, tok, nil
}

// keyError says what an operator does about a key that does not open.
func keyError(err error, cfg Config) error {
	switch {
	case errors.Is(err, keyring.ErrNoKey):
		return fmt.Errorf("the store's signing keys are encrypted at rest and no key was given: start with --key-file PATH (MESH_KEY_FILE) or MESH_KEY, the key they were sealed with (%w)", err)
	case errors.Is(err, keyring.ErrCannotOpen):
		return fmt.Errorf("%s does not open the store's signing keys: give the key they were sealed with (%w)", keySource(cfg), err)
	case errors.Is(err, store.ErrPlaintextKey):
		return fmt.Errorf("%w: a controller started without the key wrote it; start this one again to seal it", err)
	}
	return err
}
