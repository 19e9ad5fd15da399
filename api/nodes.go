package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of a call one node forwards to the node that holds the lease. A client's own copies are
// removed before anything reads them: only a valid signature says a call was routed.
const (
	// RoutedHeader names the node that forwarded the call.
	RoutedHeader = "X-Airlock-Routed-By"
	// NodeSignatureHeader is "t=<unix seconds>,s=<hex HMAC-SHA256>" over the forwarding node,
	// the time, the method, the request URI and the caller's Authorization header, keyed with
	// the deployment's node secret.
	NodeSignatureHeader = "X-Airlock-Node-Signature"
)

// nodeSkew is how far a signature's time may be from the receiving node's clock.
const nodeSkew = time.Minute

// NodeAuth signs and checks the calls nodes make to each other's API with the deployment's node
// secret, which only nodes hold. Safe for concurrent use.
type NodeAuth struct {
	Node   string // this node, named in what it signs
	Secret []byte // shared by every node of the deployment; nil signs and accepts nothing
	Now    func() time.Time
}

func (a *NodeAuth) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *NodeAuth) mac(node string, t int64, r *http.Request) string {
	m := hmac.New(sha256.New, a.Secret)
	fmt.Fprintf(m, "airlock-node-call\n%s\n%d\n%s\n%s\n%s", node, t, r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"))
	return hex.EncodeToString(m.Sum(nil))
}

// Sign marks r, about to be forwarded, as coming from this node.
func (a *NodeAuth) Sign(r *http.Request) {
	t := a.now().Unix()
	r.Header.Set(RoutedHeader, a.Node)
	r.Header.Set(NodeSignatureHeader, "t="+strconv.FormatInt(t, 10)+",s="+a.mac(a.Node, t, r))
}

// Verify reports whether r was forwarded by a node of the deployment (a valid, fresh signature),
// and which. It removes the routing headers from r either way, so nothing after it can be fooled
// by a client's own copies.
func (a *NodeAuth) Verify(r *http.Request) (string, bool) {
	node, sig := r.Header.Get(RoutedHeader), r.Header.Get(NodeSignatureHeader)
	r.Header.Del(RoutedHeader)
	r.Header.Del(NodeSignatureHeader)
	if a == nil || len(a.Secret) == 0 || node == "" || sig == "" {
		return "", false
	}
	ts, mac, ok := strings.Cut(sig, ",s=")
	ts, ok2 := strings.CutPrefix(ts, "t=")
	t, err := strconv.ParseInt(ts, 10, 64)
	if !ok || !ok2 || err != nil {
		return "", false
	}
	if d := a.now().Sub(time.Unix(t, 0)); d > nodeSkew || d < -nodeSkew {
		return "", false
	}
	if !hmac.Equal([]byte(mac), []byte(a.mac(node, t, r))) {
		return "", false
	}
	return node, true
}
