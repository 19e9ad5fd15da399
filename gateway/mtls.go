package gateway

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
)

// transports picks the upstream transport per request: the shared one, or, for a credential
// injected as a client certificate, one transport per lease and certificate (its connections
// carry that certificate, so they are never shared with another lease).
type transports struct {
	base *http.Transport

	mu   sync.Mutex
	mtls map[string]*mtlsTransport // lease + "\x00" + certificate serial
}

type mtlsTransport struct {
	t     *http.Transport
	lease string
}

// of returns the transport x's request goes on.
func (ts *transports) of(x *exchange) (http.RoundTripper, error) {
	if x.entry == nil || x.entry.Inject.Kind != broker.InjectClientCert {
		return ts.base, nil
	}
	t, err := ts.forCert(x.b.Lease, x.secret)
	if err != nil {
		return nil, refuse(http.StatusBadGateway, rule.CredentialDown, "credential "+x.entry.Name+": "+err.Error(), "")
	}
	return t, nil
}

func (ts *transports) forCert(lease string, s broker.Secret) (*http.Transport, error) {
	key := lease + "\x00" + s["serial"]
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if m := ts.mtls[key]; m != nil {
		return m.t, nil
	}
	cert, err := s.ClientCertificate()
	if err != nil {
		return nil, err
	}
	t := ts.base.Clone()
	t.TLSClientConfig = t.TLSClientConfig.Clone()
	t.TLSClientConfig.Certificates = []tls.Certificate{cert}
	t.MaxIdleConnsPerHost = 4
	if ts.mtls == nil {
		ts.mtls = map[string]*mtlsTransport{}
	}
	ts.mtls[key] = &mtlsTransport{t: t, lease: lease}
	return t, nil
}

// prune closes the transports of leases for which live reports false.
func (ts *transports) prune(ctx context.Context, live func(lease string) bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for k, m := range ts.mtls {
		if !live(m.lease) {
			m.t.CloseIdleConnections()
			delete(ts.mtls, k)
		}
	}
}
