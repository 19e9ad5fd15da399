package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/snapshot"
)

// newSnapshots is the node's catalog of snapshots (config snapshots): its store, the tenants'
// keys in Vault's transit engine through the broker's logged-in client, and retention, each
// snapshot retention removes recorded in the trail. nil when snapshots.store is "off".
func newSnapshots(cfg config.Config, vault *vaultapi.Client, sink audit.Sink, log *slog.Logger) (*snapshot.Catalog, error) {
	sc := cfg.Snapshots
	var store snapshot.Store
	switch sc.Store {
	case "off":
		return nil, nil
	case "s3":
		access, secret, err := s3Keys(sc.S3)
		if err != nil {
			return nil, err
		}
		if store, err = snapshot.NewS3(snapshot.S3Config{Endpoint: sc.S3.Endpoint, Bucket: sc.S3.Bucket, Region: sc.S3.Region,
			Prefix: sc.S3.Prefix, AccessKey: access, SecretKey: secret, PartSize: int64(sc.S3.PartMB) << 20}); err != nil {
			return nil, fmt.Errorf("snapshots.s3: %w", err)
		}
	default:
		dir := sc.Dir
		if dir == "" {
			dir = filepath.Join(cfg.StateDir, "snapshots")
		}
		var err error
		if store, err = snapshot.NewDir(dir); err != nil {
			return nil, fmt.Errorf("snapshots.dir: %w", err)
		}
	}
	keys, err := snapshot.NewTransit(snapshot.TransitConfig{Client: vault, Mount: sc.TransitMount})
	if err != nil {
		return nil, err
	}
	r := sc.Retention
	return snapshot.NewCatalog(snapshot.CatalogConfig{Store: store, Keys: keys, Staging: filepath.Join(cfg.StateDir, "snapshots-staging"),
		Retention: snapshot.Retention{MaxCount: r.MaxCount, MaxAge: r.MaxAge, MaxTotal: r.MaxTotalMB << 20}, Log: log,
		Pruned: func(m snapshot.Manifest) {
			if err := sink.Write(context.Background(), audit.Record{Kind: audit.KindFile, Event: pool.EventSnapshotDelete, Node: cfg.Node, Tenant: m.Tenant,
				Lease: m.Lease, Path: strings.Join(m.Paths, " "), Size: m.Size, SHA256: m.ID, Decision: audit.Allow,
				Reason: "removed by snapshots.retention (the tenant's oldest past max_count, max_age or max_total_mb)"}); err != nil {
				log.Error("audit write failed", "err", err)
			}
		}})
}

// s3Keys reads the S3 store's keys from their files, or else from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
func s3Keys(c config.S3) (access, secret string, err error) {
	if c.AccessKeyFile == "" {
		access, secret = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if access == "" || secret == "" {
			return "", "", errors.New("snapshots.s3: no keys: set access_key_file and secret_key_file, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		return access, secret, nil
	}
	read := func(field, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("snapshots.s3.%s: %w", field, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if access, err = read("access_key_file", c.AccessKeyFile); err != nil {
		return "", "", err
	}
	secret, err = read("secret_key_file", c.SecretKeyFile)
	return access, secret, err
}

// tenantsOf lists the tenants of the node's API keys, sorted: those whose paused leases it
// expires.
func tenantsOf(keys map[string]string) []string {
	var out []string
	for _, t := range keys {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}
