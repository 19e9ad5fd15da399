package ship

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export"
)

// httpOut POSTs each batch as newline-delimited JSON, one record per line (what Vector's http
// source and Splunk HEC's event endpoint take; hec wraps each as a HEC event). A 2xx answer is
// delivery; 429 and 5xx are retried; any other status refuses the batch as such.
type httpOut struct {
	url, auth, format, host string
	client                  *http.Client
}

func newHTTPOut(cfg Config, tlsConf *tls.Config, token, host string) *httpOut {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConf
	auth := ""
	if token != "" {
		scheme := cfg.AuthScheme
		if scheme == "" {
			scheme = "Bearer"
		}
		auth = scheme + " " + token
	}
	return &httpOut{url: cfg.URL, auth: auth, format: cfg.Format, host: host, client: &http.Client{Transport: t, Timeout: 30 * time.Second}}
}

func (o *httpOut) deliver(ctx context.Context, recs []audit.Record) error {
	var body bytes.Buffer
	for i := range recs {
		line, err := format(&recs[i], o.format, o.host)
		if err != nil {
			return permanent{err}
		}
		body.Write(line)
		body.WriteByte('\n')
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, &body)
	if err != nil {
		return permanent{err}
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if o.auth != "" {
		req.Header.Set("Authorization", o.auth)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("receiver answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	default:
		return permanent{fmt.Errorf("receiver refused the batch: %s: %s", resp.Status, bytes.TrimSpace(msg))}
	}
}

func (o *httpOut) close() { o.client.CloseIdleConnections() }

// format is r in a sink's format: json is the trail's own line (hash chain included), ocsf and
// ecs the export schemas, hec a Splunk HEC event around the OCSF one.
func format(r *audit.Record, f, host string) ([]byte, error) {
	switch f {
	case "json":
		return audit.Line(r), nil
	case "ocsf":
		return json.Marshal(export.OCSF(*r))
	case "ecs":
		return json.Marshal(export.ECS(*r))
	case "hec":
		return json.Marshal(map[string]any{"time": float64(r.Time.UnixMicro()) / 1e6, "host": host, "source": "airlock",
			"sourcetype": "ocsf:airlock", "event": export.OCSF(*r)})
	}
	return nil, fmt.Errorf("format %q", f)
}
