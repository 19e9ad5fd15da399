package review

import (
	"fmt"
	"html/template"
	"time"
)

// markForm is what the mark form of a lease or a destination needs.
type markForm struct {
	CSRF, Back, Tenant, Lease, Host string
}

// MarkForm is the form that marks a lease (or a host) of the page reviewed.
func (p page) MarkForm(lease, host, tenant string) markForm {
	m := markForm{Back: p.Back, Tenant: tenant, Lease: lease, Host: host}
	if p.Session != nil {
		m.CSRF = p.Session.CSRF
	}
	return m
}

// funcs are the templates' helpers; none returns markup (html/template escapes what they give).
var funcs = template.FuncMap{
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"ms":    func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) },
	"minus": func(a, b int) int { return a - b },
	"kinds": func() []string { return []string{"", "http", "dns", "exec", "lease", "file", "audit"} },
}
