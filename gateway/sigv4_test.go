package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// TestSigV4Resigning: the upstream recomputes the signature from what it received, with the
// secret key, as AWS does; the sandbox's own signature never arrives.
func TestSigV4Resigning(t *testing.T) {
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	verdicts := make(chan string, 8)
	h := newHarness(t)
	leaf, _ := h.ca.Leaf("api.example.test")
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hash := r.Header.Get("X-Amz-Content-Sha256")
		if hash != "UNSIGNED-PAYLOAD" {
			sum := sha256.Sum256(body)
			if hex.EncodeToString(sum[:]) != hash {
				verdicts <- "payload hash mismatch"
				return
			}
		}
		when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if err != nil {
			verdicts <- "no X-Amz-Date"
			return
		}
		got := r.Header.Get("Authorization")
		check := r.Clone(context.Background())
		check.Header.Del("Authorization")
		check.URL.Scheme, check.URL.Host = "https", r.Host
		signed := strings.Split(strings.Split(got, "SignedHeaders=")[1], ",")[0]
		for k := range check.Header {
			if !strings.Contains(";"+signed+";", ";"+strings.ToLower(k)+";") {
				check.Header.Del(k)
			}
		}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, check, hash, "execute-api", "eu-west-1", when); err != nil {
			verdicts <- err.Error()
			return
		}
		if check.Header.Get("Authorization") != got {
			verdicts <- fmt.Sprintf("signature mismatch:\n got %s\nwant %s", got, check.Header.Get("Authorization"))
			return
		}
		verdicts <- "ok"
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	up.StartTLS()
	defer up.Close()
	addr := up.Listener.Addr().String()
	p := h.proxyHandler()
	p.dyn.Load().pins["api.example.test:443"] = netip.MustParseAddrPort(addr)
	h.dialer.allowed[addr] = true
	p.cfg.Broker = &fakeBroker{get: func(context.Context, string, *broker.Entry) (broker.Secret, error) {
		return broker.Secret{"access_key_id": creds.AccessKeyID, "secret_access_key": creds.SecretAccessKey}, nil
	}}
	useCatalog := func(unsigned bool, maxBody int64) {
		cat, err := broker.NewCatalog([]broker.Entry{{Name: "aws", Source: broker.Source{Kind: broker.SourceKV, Path: "aws"},
			Inject: broker.Injection{Kind: broker.InjectSigV4, Region: "eu-west-1", Service: "execute-api", UnsignedPayload: unsigned, MaxBody: maxBody},
			Hosts:  []string{"api.example.test"}}})
		if err != nil {
			t.Fatal(err)
		}
		p.Reload(cat, p.dyn.Load().pins, nil, budget.Budget{})
	}
	h.scopes = []scope.Scope{{Host: "api.example.test", Credential: "aws"}}
	send := func(body string) int {
		req, _ := http.NewRequest("POST", "https://api.example.test/prod/items?b=2&a=1", strings.NewReader(body))
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=FORGED/20200101/x/y/aws4_request, SignedHeaders=host, Signature=00")
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, unsigned := range []bool{false, true} {
		useCatalog(unsigned, 1<<20)
		if st := send(`{"item": 1}`); st != 200 {
			t.Fatalf("unsigned=%v: status %d", unsigned, st)
		}
		if v := <-verdicts; v != "ok" {
			t.Fatalf("unsigned=%v: the upstream's check: %s", unsigned, v)
		}
	}
	// A hashed body over the cap is refused before anything is sent.
	useCatalog(false, 16)
	if st := send(string(bytes.Repeat([]byte("x"), 100))); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over the signing cap: %d", st)
	}
	if rec := h.sink.last(); rec.Rule != rule.BodyTooLarge {
		t.Fatalf("audit %+v", rec)
	}
	select {
	case v := <-verdicts:
		t.Fatalf("an over-cap body reached the upstream (%s)", v)
	default:
	}
}
