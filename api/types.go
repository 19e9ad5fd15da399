package api

import "github.com/airlock-dev/airlock/api/apitype"

// The API's requests and answers live in package apitype, a leaf a client imports without the
// server; these are the server's names for them.
type (
	LeaseRequest   = apitype.LeaseRequest
	LeaseView      = apitype.LeaseView
	RenewRequest   = apitype.RenewRequest
	TokenRequest   = apitype.TokenRequest
	PortRequest    = apitype.PortRequest
	PortView       = apitype.PortView
	ExplainRequest = apitype.ExplainRequest
	AnswerRequest  = apitype.AnswerRequest
	ExecRequest    = apitype.ExecRequest
	ExitStatus     = apitype.ExitStatus
	OutputView     = apitype.OutputView
	SignalRequest  = apitype.SignalRequest
	ResizeRequest  = apitype.ResizeRequest
	ListView       = apitype.ListView
	PathRequest    = apitype.PathRequest
	MoveRequest    = apitype.MoveRequest
)

// Exec stream frames and the header of an exec whose body is its input (apitype).
const (
	StreamStdout = apitype.StreamStdout
	StreamStderr = apitype.StreamStderr
	StreamExit   = apitype.StreamExit
	StreamStdin  = apitype.StreamStdin
	StreamResize = apitype.StreamResize
	ExecHeader   = apitype.ExecHeader
)

// MaxProcessWait bounds how long one call waits for a process's output or end.
const MaxProcessWait = apitype.MaxProcessWait
