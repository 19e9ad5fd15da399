package apitype

// MaxListEntries bounds one listing of a workspace (GET /v1/leases/{id}/fs/list): past it the
// answer is cut and says so (ListView.Truncated).
const MaxListEntries = 10000

// ListView is the answer of GET /v1/leases/{id}/fs/list.
type ListView struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated,omitempty"` // cut at MaxListEntries
}

// PathRequest is the body of POST /v1/leases/{id}/fs/mkdir and /fs/remove.
type PathRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"` // remove: a folder and all it holds
}

// MoveRequest is the body of POST /v1/leases/{id}/fs/move.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}
