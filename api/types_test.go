package api_test

import (
	"testing"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/pool"
)

// The bound a client reads (apitype, which it links without the pool) is the one the pool
// cuts listings at.
func TestClientsReadThePoolsBounds(t *testing.T) {
	if pool.MaxListEntries != apitype.MaxListEntries {
		t.Errorf("pool.MaxListEntries = %d, apitype.MaxListEntries = %d: a listing is cut where a client does not expect it",
			pool.MaxListEntries, apitype.MaxListEntries)
	}
}
