package scope

// MCP narrows a scope on an MCP server's host (streamable HTTP): a tools/call of a tool not in
// Tools is refused with a JSON-RPC error, and tools/list answers list only Tools.
type MCP struct {
	Tools []string `json:"tools" yaml:"tools"`
	// Approve lists tools (of Tools) whose every call waits for a reviewer, as a scope's
	// approval holds a request.
	Approve []string `json:"approve,omitempty" yaml:"approve"`
}

// NeedsApproval reports whether a call of tool waits for a reviewer.
func (m *MCP) NeedsApproval(tool string) bool {
	for _, t := range m.Approve {
		if t == tool {
			return true
		}
	}
	return false
}

// AllowsTool reports whether the task may call tool.
func (m *MCP) AllowsTool(tool string) bool {
	for _, t := range m.Tools {
		if t == tool {
			return true
		}
	}
	return false
}
