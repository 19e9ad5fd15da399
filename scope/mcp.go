package scope

// MCP narrows a scope on an MCP server's host (streamable HTTP): a tools/call of a tool not in
// Tools is refused with a JSON-RPC error, and tools/list answers list only Tools.
type MCP struct {
	Tools []string `json:"tools" yaml:"tools"`
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
