package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/snapshot"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is a private SeaweedFS server (master, volume server, filer and S3 gateway in one
// process) with one bucket and one identity, for the S3 snapshot store's tests and a dev node.
// Security: only its S3 gateway asks for credentials; its master, volume server and filer
// answer anyone on the machine (on 127.0.0.1 only), so it is no store for a shared host.
type S3Server struct {
	*Process
	// Endpoint is the S3 gateway's URL, "http://127.0.0.1:port".
	Endpoint string
	// Bucket exists and is empty when StartS3 returns.
	Bucket string
	// AccessKey and SecretKey are the one identity the server knows; anonymous requests are
	// refused.
	AccessKey, SecretKey string
	// sockets are the unix sockets `weed server` makes in /tmp, one for each gRPC port (a
	// path it does not let us choose; mode 0755, so only its user can connect), and leaves.
	sockets []string
}

// Stop ends the server and removes what it leaves in /tmp.
func (s *S3Server) Stop() {
	s.Process.Stop()
	s.removeSockets()
}

func (s *S3Server) removeSockets() {
	for _, p := range s.sockets {
		os.Remove(p)
	}
}

// StoreConfig is the config of a snapshot store in the server's bucket, under prefix.
func (s *S3Server) StoreConfig(prefix string) snapshot.S3Config {
	return snapshot.S3Config{
		Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix,
		AccessKey: s.AccessKey, SecretKey: s.SecretKey,
	}
}

// s3Ready bounds StartS3's wait for the server to store an object: on 2 busy cores under
// `go test -race ./...`, SeaweedFS's master, volume server and filer take some seconds to find
// each other.
const s3Ready = 90 * time.Second

// StartS3 runs `weed server -s3` from binary with its data in dir, every port on 127.0.0.1
// (free ones), no telemetry and no other gateway, and a static identity of random keys. It
// creates the bucket "airlock" and returns once an object can be put and removed, or an error
// that says what it waited for. The server stops when ctx ends, or with Stop.
func StartS3(ctx context.Context, dir, binary string) (*S3Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	access, secret := "ak"+randHex(10), RandomSecret("sk-")
	cfg, err := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name":        "airlock",
		"credentials": []any{map[string]string{"accessKey": access, "secretKey": secret}},
		"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	ports := make([]int, 8)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	p, err := start(ctx, filepath.Join(dir, "weed.log"), binary,
		"-logtostderr", // into weed.log, not files of its own in /tmp
		"server",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir="+data,
		"-master.port="+strconv.Itoa(ports[0]), "-master.port.grpc="+strconv.Itoa(ports[1]),
		"-volume.port="+strconv.Itoa(ports[2]), "-volume.port.grpc="+strconv.Itoa(ports[3]),
		"-filer", "-filer.port="+strconv.Itoa(ports[4]), "-filer.port.grpc="+strconv.Itoa(ports[5]),
		"-filer.localSocket="+filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port="+strconv.Itoa(ports[6]), "-s3.port.grpc="+strconv.Itoa(ports[7]),
		"-s3.config="+cfgPath, "-s3.localSocket="+filepath.Join(dir, "s3.sock"),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		// No report of usage to SeaweedFS's server: this machine reaches only loopback.
		"-master.telemetry=false",
		// Small volumes (files that grow as they are written), up to 2 GiB of them: a test run
		// stores a few hundred megabytes, and deleting frees nothing until a vacuum.
		"-master.volumeSizeLimitMB=64", "-volume.max=32",
	)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make seaweedfs`, which builds bin/weed)", err)
	}
	s := &S3Server{
		Process:  p,
		Endpoint: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[6])),
		Bucket:   "airlock", AccessKey: access, SecretKey: secret,
		sockets: []string{
			fmt.Sprintf("/tmp/seaweedfs-master-grpc-%d.sock", ports[1]),
			fmt.Sprintf("/tmp/seaweedfs-volume-grpc-%d.sock", ports[3]),
			fmt.Sprintf("/tmp/seaweedfs-filer-grpc-%d.sock", ports[5]),
			fmt.Sprintf("/tmp/seaweedfs-s3-grpc-%d.sock", ports[7]),
		},
	}
	go func() { <-p.Done(); s.removeSockets() }() // when ctx ends it
	client, err := minio.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[6])), &minio.Options{
		Creds: credentials.NewStaticV4(access, secret, ""), Region: "us-east-1",
		BucketLookup: minio.BucketLookupPath, MaxRetries: 1,
	})
	if err != nil {
		p.Stop()
		return nil, err
	}
	if err := waitFor(ctx, p, s3Ready, func() error { return s.ready(ctx, client) }); err != nil {
		p.Stop()
		return nil, fmt.Errorf("seaweedfs did not start: waited for its S3 gateway at %s to create bucket %s and store an object in it: %v\n%s",
			s.Endpoint, s.Bucket, err, p.tail())
	}
	return s, nil
}

// ready creates the bucket (once) and puts and removes an object: the S3 gateway answers
// before the filer and the volume server are ready to store anything.
func (s *S3Server) ready(ctx context.Context, c *minio.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := c.BucketExists(ctx, s.Bucket)
	if err != nil {
		return err
	}
	if !ok {
		if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	const probe = "airlock-devstack-probe"
	if _, err := c.PutObject(ctx, s.Bucket, probe, bytes.NewReader([]byte("ok")), 2, minio.PutObjectOptions{}); err != nil {
		return err
	}
	return c.RemoveObject(ctx, s.Bucket, probe, minio.RemoveObjectOptions{})
}

// FindWeed returns the SeaweedFS binary to run: configured, beside the running executable, or
// on PATH.
func FindWeed(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "weed")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("weed"); err == nil {
		return p, nil
	}
	return "", errors.New("no weed (SeaweedFS) binary found beside airlock or on PATH (run `make seaweedfs`)")
}
