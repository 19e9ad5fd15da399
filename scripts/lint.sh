#!/usr/bin/env bash
# Lint: gofmt, go vet, staticcheck and govulncheck, with the tools pinned and cached outside the
# checkout. govulncheck needs its vulnerability database, which is not reachable from every
# machine; when it is not, this says so and skips that one check (never silently).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
tools="$cache/tools"
mkdir -p "$tools"
export GOBIN="$tools"
[ -x "$tools/staticcheck" ] || go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
[ -x "$tools/govulncheck" ] || go install golang.org/x/vuln/cmd/govulncheck@v1.9.0

fail=0
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt: these files need formatting:"; echo "$unformatted"; fail=1
fi
go vet ./... || fail=1
(cd tools/vault && go vet ./...) || fail=1
(cd tools/seaweedfs && go vet ./...) || fail=1
(cd tools/kubernetes && go vet ./pause) || fail=1
"$tools/staticcheck" ./... || fail=1

if [ -n "${GOVULNDB:-}" ] || timeout 10 "$tools/govulncheck" -version >/dev/null 2>&1 && timeout 20 curl -fsS -o /dev/null "${GOVULNDB:-https://vuln.go.dev}/index/db.json.gz" 2>/dev/null; then
	"$tools/govulncheck" ${GOVULNDB:+-db "$GOVULNDB"} ./... || fail=1
else
	echo "govulncheck: SKIPPED: the vulnerability database is not reachable from this machine (set GOVULNDB to a local copy to run it)"
fi
exit $fail
